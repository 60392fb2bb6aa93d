#pragma once
// Sufficient-factor broadcasting (docs/paper.md §2): per layer and iteration,
// every worker sends its factor buffer (for an FC layer: its K×M top diff and
// K×N bottom data, K·(M+N) floats) to every other worker, peer to peer over
// the worker-worker connections — no server relays it. When an allgather
// completes, the factors of all P1 workers are readable in rank order. With
// several workers per machine (cost_model.h, Note [local aggregation]) only
// the machines' leaders take part, each sending its machine's factors: the
// factors are readable at the leaders' ranks.
//
// Note [factor slots]: each layer has two slots (iteration parity), each with
// P1 receive buffers, allocated at registration for the factors the plan
// expects (reserved_floats) and grown, up to max_floats, when a step brings
// more rows (gradient accumulation, a K that changes between steps). A peer
// can run at most one iteration ahead of this worker (it needs our factor to
// finish its own), so its next factor lands in the other slot and never
// overwrites one the caller may still be reading: the factors of iteration t
// stay valid until this worker calls allgather(layer, t + 1) and its peers
// get to iteration t + 2.

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "poseidon/handle.h"
#include "poseidon/internal/data_plane.h"
#include "poseidon/internal/layer_ops.h"
#include "poseidon/internal/layer_table.h"
#include "poseidon/types.h"

namespace poseidon {

class SFBroadcaster {
 public:
  explicit SFBroadcaster(DataPlane& plane) : plane_(plane), layers_(plane, Scheme::kSFB) {}

  // Allocates 2 × P1 × reserved_floats floats; a worker's factor may grow to
  // max_floats (0: reserved_floats), beyond which it is refused (from a peer:
  // a protocol error). The layer must be an SFB layer of the plan. Thread-safe;
  // once per layer.
  void register_layer(uint32_t layer_id, size_t reserved_floats, size_t max_floats = 0);
  bool registered(uint32_t layer_id) const { return layers_.find(layer_id) != nullptr; }
  // Sends `send` (num_floats <= max, owned by the caller, valid until the
  // handle completes) to every peer, chunked, and returns a handle that
  // completes when every peer's factor for `iteration` has arrived and ours
  // is written. Iterations of a layer must be consecutive. Thread-safe.
  Handle allgather(uint32_t layer_id, int64_t iteration, const float* send, size_t num_floats);
  // Worker `rank`'s factor of a completed allgather (see Note [factor slots]).
  // Throws ConfigError if that iteration is not complete or was overwritten.
  FactorView factor(uint32_t layer_id, int64_t iteration, int rank) const;
  // Reader thread of a worker connection: validates a FACTOR frame and reads
  // it into the slot. Blocks (up to the timeout) if the layer is not
  // registered here yet — the peer may be ahead of us.
  void on_factor(Peer& from, const FrameHeader& header);
  void fail_all(const Failure& failure) { layers_.fail_all(failure); }
  std::string pending() const { return layers_.pending(); }

 private:
  struct Slot {
    int64_t iteration = 0;
    bool used = false;
    std::vector<std::vector<float>> buffers;  // [rank][reserved, grown to max]
    std::vector<uint64_t> total;              // floats announced per rank (UINT64_MAX: none yet)
    std::vector<std::vector<uint8_t>> got;    // [rank][chunk] arrived
    std::vector<uint32_t> chunks_left;        // per rank
    int inflight = 0;                         // payload reads in progress
  };
  struct Layer {
    const LayerPlan* plan = nullptr;
    size_t max_floats = 0;
    uint32_t max_chunks = 0;
    LayerCounters* counters = nullptr;
    mutable std::mutex mu;
    LayerOps ops;  // guarded by mu
    Slot slots[2];
  };
  static Slot& slot_for(Layer& layer, int64_t iteration);
  void reset_slot(Slot& slot, int64_t iteration) const;
  bool rank_complete(const Slot& slot, size_t rank) const;

  DataPlane& plane_;
  LayerTable<Layer> layers_;
};

}  // namespace poseidon
