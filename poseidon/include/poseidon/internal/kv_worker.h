#pragma once
// The PS side of a worker (docs/paper.md §3, "client library"): each registered
// layer's gradient range is pushed chunk by chunk to the shards that own the
// chunks, and each shard's reply — the sum over all P1 workers — is read
// straight back into the same range. Internal to Worker.
//
// Every scheme through the shards goes here (plan.h, Note [plan parts]): PS
// as above; PowerSGD the same, one part per push_pull; BF16 converts each
// chunk into a bf16 staging copy of the range before pushing it (PUSH16),
// reads the reply (PULL_REPLY16) into that copy and widens it into the range.
// A BF16 chunk summed in place is first rounded to bf16 precision in the
// range itself (kv_server.h, Note [in-place rounds]).
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
#include <vector>

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
  // owns a chunk of it. The layer must go through the shards in the plan,
  // and num_floats must be its wire_floats. Thread-safe; once per layer.
  void register_layer(uint32_t layer_id, float* grad, size_t num_floats);
  bool registered(uint32_t layer_id) const { return layers_.find(layer_id) != nullptr; }
  // Queues the chunks of the layer's part `part` (non-blocking) and returns a
  // handle that completes when that part of the range holds the sum over
  // all workers. A layer's (iteration, part) sequence must be consecutive
  // and its operations may not overlap (LayerOps::check_next). Thread-safe.
  Handle push_pull(uint32_t layer_id, int64_t iteration, uint32_t part = 0);
  // Reader thread of a server connection: validates a PULL_REPLY (PULL_REPLY16)
  // against the pending push and reads its payload into the range, or takes
  // a PULL_DONE from the shard of this process (the range already holds the
  // sum). Throws ProtocolError naming the server, key and iteration on any
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
    std::vector<uint16_t> wire16;  // BF16: the bf16 bytes pushed and pulled, as the range
    std::mutex mu;
    LayerOps ops;       // guarded by mu
    uint32_t part = 0;  // of the current operation; guarded by mu
  };

  DataPlane& plane_;
  LayerTable<Layer> layers_;
};

}  // namespace poseidon
