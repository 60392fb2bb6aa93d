#pragma once
// The PS side of a worker (docs/paper.md §3, "client library"): each registered
// layer's gradient range is pushed chunk by chunk to the shards that own the
// chunks, and each shard's reply — the sum over all P1 workers — is read
// straight back into the same range. Internal to Worker.
//
// With a shard in this process (Config::local_server), the chunks it owns are
// not pushed: the range is lent to it (colocated.h) and each such chunk is
// announced with PUSH_IN_PLACE; the shard sums into the range and answers with
// PULL_DONE (kv_server.h, Note [in-place rounds]).
//
// Note [push order]: within a layer and iteration a worker queues its
// in-place announcements first (they cost nothing and let the other
// workers' pushes go straight into the range), then its pushes in turns of
// P2 chunks, each turn starting at shard (rank + k) mod P2 — so at any
// moment the workers push to different shards instead of all to the same
// one. Lower layers still go first (send_queue.h, Note [send priority]).

#include <cstdint>
#include <mutex>
#include <string>

#include "poseidon/handle.h"
#include "poseidon/internal/data_plane.h"
#include "poseidon/internal/layer_ops.h"
#include "poseidon/internal/layer_table.h"

namespace poseidon {

class KVWorker {
 public:
  explicit KVWorker(DataPlane& plane) : plane_(plane), layers_(plane, Scheme::kPS) {}

  // `grad` (num_floats floats, owned by the caller) must stay valid while
  // the worker lives; it is lent to the shard of this process if that shard
  // owns a chunk of it. The layer must be a PS layer of the plan with exactly
  // num_floats floats. Thread-safe; once per layer.
  void register_layer(uint32_t layer_id, float* grad, size_t num_floats);
  bool registered(uint32_t layer_id) const { return layers_.find(layer_id) != nullptr; }
  // Queues the layer's chunks (non-blocking) and returns a handle that
  // completes when the range holds the sum over all workers. Iterations of a
  // layer must be consecutive and not overlap. Thread-safe.
  Handle push_pull(uint32_t layer_id, int64_t iteration);
  // Reader thread of a server connection: validates a PULL_REPLY against the
  // pending push and reads its payload into the range, or takes a PULL_DONE
  // from the shard of this process (the range already holds the sum).
  // Throws ProtocolError naming the server, key and iteration on any
  // mismatch.
  void on_reply(Peer& from, const FrameHeader& header);
  // Fails every pending operation with `failure`. Thread-safe.
  void fail_all(const Failure& failure) { layers_.fail_all(failure); }
  // "push_pull of layer 3 (fc6) iteration 7" for each pending op, or "".
  std::string pending() const { return layers_.pending(); }

 private:
  struct Layer {
    const LayerPlan* plan = nullptr;
    float* data = nullptr;
    LayerCounters* counters = nullptr;
    std::mutex mu;
    LayerOps ops;  // guarded by mu
  };

  DataPlane& plane_;
  LayerTable<Layer> layers_;
};

}  // namespace poseidon
