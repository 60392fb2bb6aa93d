#pragma once
// What a worker's PS client (KVWorker) and SFB broadcaster share: the plan,
// the persistent connections, the send queue, the abort latch and the
// traffic counters. Owned by Worker, which outlives both users; fixed once
// the plan is known.

#include <memory>
#include <vector>

#include "poseidon/internal/abort_signal.h"
#include "poseidon/internal/colocated.h"
#include "poseidon/internal/coordinator_client.h"
#include "poseidon/internal/counters.h"
#include "poseidon/internal/node_id.h"
#include "poseidon/internal/peer.h"
#include "poseidon/internal/send_queue.h"
#include "poseidon/plan.h"

namespace poseidon {

struct DataPlane {
  NodeId self;
  Plan plan;
  std::vector<std::shared_ptr<Peer>> servers;  // by shard
  std::vector<std::shared_ptr<Peer>> workers;  // by rank; null at this worker's rank
  // The shard running in this process (Config::local_server), reached in
  // place (kv_server.h, Note [in-place rounds]); -1 / null: none.
  int local_shard = -1;
  std::shared_ptr<ColocatedLink> local_link;
  SendQueue* queue = nullptr;
  std::shared_ptr<AbortSignal> abort;
  CounterTable* counters = nullptr;
  CoordinatorClient* coord = nullptr;  // heartbeat progress
  int timeout_ms = 0;

  // Throws PeerFailure naming `what` if the job is aborted.
  void check_abort(const std::string& what, int64_t layer, int64_t iteration) const {
    if (abort->tripped()) {
      const Failure f = abort->failure();
      throw PeerFailure(what + " failed: " + f.reason, f.peer, layer, iteration);
    }
  }
};

}  // namespace poseidon
