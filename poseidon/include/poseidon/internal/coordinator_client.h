#pragma once
// A node's link to the coordinator: rendezvous, address book, plan, barriers,
// heartbeats, failure reports and the abort broadcast. Used by Worker and
// KVServer; the coordinator itself is coordinator.h.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "poseidon/config.h"
#include "poseidon/internal/abort_signal.h"
#include "poseidon/internal/messages.h"
#include "poseidon/internal/peer.h"
#include "poseidon/internal/transport.h"
#include "poseidon/plan.h"

namespace poseidon {

class CoordinatorClient {
 public:
  // `self` is this node with its listen address. The client trips `abort` on
  // ABORT from the coordinator, on losing the coordinator, and on missed
  // coordinator heartbeats; when `abort` trips for a local reason it reports
  // the failure to the coordinator, which aborts everyone else.
  CoordinatorClient(const Config& config, Transport& transport, NodeId self,
                    std::shared_ptr<AbortSignal> abort);
  ~CoordinatorClient();  // close()

  // Dials the coordinator (retrying while nobody listens yet), handshakes
  // (this registers the node), starts the reader and heartbeat threads, and
  // blocks until the address book arrives. Call once. Throws TimeoutError,
  // PeerFailure or ProtocolError (e.g. wrong token) with the coordinator's
  // address in the message.
  AddressBook connect(Deadline deadline);
  // Workers: declares this worker's layers and blocks until the coordinator
  // sends the plan (built once all workers declared theirs).
  Plan request_plan(const std::vector<LayerSpec>& layers, Deadline deadline);
  // Blocks until the plan arrives.
  Plan wait_plan(Deadline deadline);
  // Servers: blocks until the plan arrives (returns it), or SHUTDOWN comes
  // first (a job that never declared layers; returns nothing), or abort.
  std::optional<Plan> wait_plan_or_shutdown(Deadline deadline);
  // Workers: blocks until every worker entered its barrier with the same
  // sequence number (barriers must be entered in the same order everywhere;
  // the coordinator aborts on a name mismatch).
  void barrier(const std::string& name, Deadline deadline);
  // Workers: tells the coordinator this worker is done; blocks until every
  // worker is (the coordinator's SHUTDOWN).
  void request_shutdown(Deadline deadline);
  // Workers: asks for an action that every worker takes at one iteration
  // (action_rounds.h, Note [agreed actions]). Blocks only for the send.
  // Thread-safe.
  void request_action(ActionKind kind, const std::string& reason, Deadline deadline);
  // Workers' training loops, at every iteration boundary (`iteration` =
  // updates completed): records it for the votes (action_rounds.h, Note
  // [agreed actions]); blocks (until the decision, abort or `deadline`) when
  // this worker voted in an undecided round at a boundary before `iteration`.
  // Returns the decisions that arrived since the last call, oldest first.
  // Throws PeerFailure on abort, TimeoutError.
  std::vector<ActionMessage> reach_boundary(int64_t iteration, Deadline deadline);
  // Blocks until SHUTDOWN (true) or abort (false); `deadline` may be never.
  bool wait_shutdown(Deadline deadline);
  bool shutdown_received() const { return shutdown_received_.load(); }
  // What heartbeats report (lock-free, thread-safe).
  void set_progress(int64_t iteration, int64_t layer);
  Progress progress() const {
    return Progress{progress_iteration_.load(std::memory_order_relaxed),
                    progress_layer_.load(std::memory_order_relaxed)};
  }
  // Stops heartbeats and closes the connection (gracefully when the job
  // ended normally). Idempotent.
  void close();
  const std::string& coordinator_address() const { return address_; }

 private:
  void on_frame(Peer& peer, const FrameHeader& header);
  // Under mu_: a vote for the latest proposal if this worker owes one and knows
  // its boundary (the caller sends it, outside the lock).
  std::optional<ActionMessage> vote_locked();
  void on_closed(Peer& peer, const std::string& reason, bool clean);
  void heartbeat_loop();
  // Waits for `ready` under mu_; throws PeerFailure / TimeoutError naming `what`.
  template <typename Pred>
  void wait_for(std::unique_lock<std::mutex>& lock, Deadline deadline, const std::string& what,
                Pred ready);

  const Config config_;
  Transport& transport_;
  const NodeId self_;
  const std::string address_;
  std::shared_ptr<AbortSignal> abort_;
  std::shared_ptr<Peer> peer_;
  std::thread heartbeat_;
  std::atomic<bool> received_abort_{false};
  std::atomic<bool> shutdown_received_{false};
  std::atomic<bool> closing_{false};
  std::atomic<int64_t> progress_iteration_{-1};
  std::atomic<int64_t> progress_layer_{-1};
  std::atomic<int64_t> last_seen_ms_{0};  // steady clock, ms

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<AddressBook> book_;
  std::optional<Plan> plan_;
  // Agreed actions (under mu_): the last boundary the training loop reached
  // (-1: none yet), the latest round proposed and the one voted in (with the
  // boundary voted), and the decisions not yet handed to the loop.
  int64_t boundary_ = -1;
  uint64_t proposed_round_ = 0;
  uint64_t voted_round_ = 0;
  int64_t voted_boundary_ = -1;
  uint64_t decided_round_ = 0;
  std::vector<ActionMessage> decisions_;
  uint64_t barriers_entered_ = 0;
  uint64_t barriers_released_ = 0;
  bool stop_heartbeat_ = false;
};

}  // namespace poseidon
