#pragma once
// The per-layer plan: which scheme synchronises each layer, and how PS layers
// are cut into chunks and spread over the shards. The coordinator builds it
// once from the workers' layer specs and sends the same bytes to every node,
// so every node derives the same chunk -> shard map: order and placement are
// fixed by construction, never negotiated while training.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "poseidon/config.h"
#include "poseidon/cost_model.h"

namespace poseidon {

// What a worker declares about one learnable layer.
struct LayerSpec {
  uint32_t layer_id = 0;  // key; lower ids are sent first
  std::string name;       // for messages and the printed plan
  LayerKind kind = LayerKind::kOther;
  uint64_t m = 0;           // weight rows (FC: num_output)
  uint64_t n = 0;           // weight columns (FC: input dimension)
  uint64_t k = 0;           // samples per worker per iteration (the bottom's batch)
  uint64_t num_floats = 0;  // length of the layer's contiguous gradient range
  SchemeChoice force = SchemeChoice::kAuto;

  bool operator==(const LayerSpec& o) const;
  std::string debug_string() const;  // "fc6 (layer 5, FC 4096x25088, K=32, 102764544 floats)"
};

// Smallest chunk a tensor is cut into so that it spreads over more shards:
// below this, another frame costs more than the parallelism gains. With small
// chunk sizes the floor is a sixteenth of a chunk instead, so that the layout
// keeps its shape when every size shrinks by one factor (the byte-scaled
// compute replay of poseidon/experiments: chunk_bytes / s, same chunk counts).
inline constexpr size_t kMinSpreadChunkBytes = size_t{64} << 10;
inline constexpr size_t kSpreadChunksPerChunk = 16;
size_t min_spread_chunk_bytes(size_t chunk_bytes);  // min(64 KiB, chunk_bytes / 16), >= 4

struct LayerPlan {
  LayerSpec spec;
  Scheme scheme = Scheme::kPS;
  CommCost cost;              // per iteration, see cost_model.h
  uint64_t first_chunk = 0;   // PS: global index of chunk 0 (chunks go round-robin)
  uint32_t num_chunks = 0;    // PS: see Note [chunk layout]; SFB: 0
  uint64_t chunk_floats = 0;  // PS: floats per chunk (the last may be shorter)

  size_t chunk_offset(uint32_t chunk) const { return static_cast<size_t>(chunk * chunk_floats); }
  size_t chunk_length(uint32_t chunk) const;  // 0 past the end
};

// Note [chunk layout]: a PS tensor of n floats is cut into chunks of equal
// size (the last may be shorter) of at most chunk_bytes, and into at least
// min(P2, n·4 / min_spread_chunk_bytes(chunk_bytes)) of them, so that a tensor smaller than
// P2 chunks still spreads over the shards (a 4 MB layer on 4 shards is 4
// chunks of 1 MB, not 1 chunk on one shard). An empty tensor is one empty
// chunk: it still makes a round.

struct Plan {
  int num_workers = 0;
  int num_servers = 0;
  size_t chunk_bytes = 0;
  std::vector<LayerPlan> layers;  // declaration order

  // The chunk size of SFB factors, and the upper bound of PS chunks.
  size_t chunk_floats() const { return chunk_bytes / 4; }
  // nullptr when the layer is not in the plan. Thread-safe (const).
  const LayerPlan* find(uint32_t layer_id) const;
  // Shard that owns chunk `chunk` of a PS layer: (first_chunk + chunk) % P2.
  int shard_of(const LayerPlan& layer, uint32_t chunk) const;
  // First float and length of chunk `chunk` of an SFB factor of `num_floats`
  // (cut at chunk_floats(); PS layers use LayerPlan's own chunking).
  size_t chunk_offset(uint32_t chunk) const { return size_t{chunk} * chunk_floats(); }
  size_t chunk_length(uint64_t num_floats, uint32_t chunk) const;
};

// Number of chunks a tensor of `num_floats` is cut into: at least one, so a
// zero-length tensor still makes one (empty) synchronised round.
uint32_t count_chunks(uint64_t num_floats, size_t chunk_floats);

// Chooses each layer's scheme (per-layer force, else `cluster_force`, else
// best_scheme) and lays out the chunks. Throws ConfigError on duplicate
// layer ids or sizes that overflow. Non-blocking, thread-safe.
Plan make_plan(const std::vector<LayerSpec>& specs, int num_workers, int num_servers,
               size_t chunk_bytes, SchemeChoice cluster_force);

// Rebuilds a plan from decided schemes (what travels on the wire); derives
// costs and the chunk layout with the same code as make_plan.
Plan assemble_plan(const std::vector<LayerSpec>& specs, const std::vector<Scheme>& schemes,
                   int num_workers, int num_servers, size_t chunk_bytes);

}  // namespace poseidon
