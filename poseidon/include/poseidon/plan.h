#pragma once
// The per-layer plan: which scheme synchronises each layer, and how the
// layers that go through the shards (PS, BF16, PowerSGD) are cut into parts
// and chunks and spread over the shards. The coordinator builds it
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
  // Note [byte-scaled layers]: the compute replay (poseidon/experiments)
  // stands a layer in with buffers of 1/byte_scale of its floats (each blob
  // rounded up). The cost model decides on the real layer (m, n, k and
  // modelled_floats()); the plan cuts the parts it registers from num_floats,
  // and PowerSGD's matrix is the real one's rows and columns / byte_scale
  // (LayerPlan::matrix_m, matrix_n), so every part moves 1/byte_scale of the
  // real bytes. 1 for every real job.
  uint32_t byte_scale = 1;
  // What the declaring worker timed (cost_model.h, Note [measured costs]).
  // Not part of the layer's identity: workers' timings differ, operator==
  // ignores them, and the coordinator plans with the first worker's.
  MeasuredCosts measured;

  bool operator==(const LayerSpec& o) const;
  // The real layer's floats: num_floats × byte_scale (saturating).
  uint64_t modelled_floats() const;
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

// Note [plan parts]: a layer that goes through the shards registers one
// fp32 buffer of wire_floats floats (Worker::register_layer), made of parts;
// push_pull(layer, t, part) pushes one part's chunks and completes when
// their sums are back, and a layer's calls go (t, 0), (t, 1), ..., (t+1, 0):
//   PS, BF16   one part, the layer's num_floats floats (BF16: bfloat16 on
//              the wire, fp32 in the buffer)
//   PowerSGD   part 0 = [P | rest]: r·m floats of P (m×r), then the
//              num_floats − m·n floats of the layer past its m×n weight (e.g.
//              the bias), summed exactly; part 1 = [Q]: r·n floats of Q (n×r);
//              r = min(rank, m, n). (A byte-scaled layer: m, n and the
//              weight's floats / byte_scale, Note [byte-scaled layers].) The
//              core only sums them; computing P and Q (and what they sum to)
//              is the caller's.
//   SFB        no part (wire_floats 0): factors go peer to peer
// Each part is cut into chunks on its own (Note [chunk layout]); a layer's
// chunks are numbered through its parts, part 0's first, and chunk c of the
// layer goes to shard (first_chunk + c) mod P2.
// Whether a layer of `scheme` goes through the shards (PS, BF16, PowerSGD:
// Worker::register_layer and push_pull) or peer to peer (SFB).
inline bool through_shards(Scheme scheme) { return scheme != Scheme::kSFB; }

struct PlanPart {
  uint64_t offset = 0;        // first float within the registered buffer
  uint64_t num_floats = 0;    // length
  uint32_t first_chunk = 0;   // index of its chunk 0 among the layer's chunks
  uint32_t num_chunks = 0;    // at least 1
  uint64_t chunk_floats = 0;  // floats per chunk (the last may be shorter)

  // Length of the part's own chunk `chunk`; 0 past the end.
  size_t chunk_length(uint32_t chunk) const;
};

struct LayerPlan {
  LayerSpec spec;
  Scheme scheme = Scheme::kPS;
  CommCost cost;            // per iteration, see cost_model.h
  SchemeEstimate estimate;  // the chosen scheme's, see cost_model.h Note [time model]
  uint32_t rank = 0;        // PowerSGD: min(rank, m, n); else 0
  // PowerSGD: the matrix its wire carries, matrix_m × matrix_n at the start
  // of the layer's range (m × n; a byte-scaled layer's stand-in, Note
  // [byte-scaled layers]); else 0.
  uint64_t matrix_m = 0;
  uint64_t matrix_n = 0;
  uint64_t wire_floats = 0;     // floats of the registered buffer (Note [plan parts]); SFB: 0
  std::vector<PlanPart> parts;  // Note [plan parts]; SFB: none
  uint64_t first_chunk = 0;     // global index of the layer's chunk 0 (chunks go round-robin)
  uint32_t num_chunks = 0;      // over all parts, see Note [chunk layout]; SFB: 0
  uint64_t chunk_floats = 0;    // part 0's floats per chunk (PS, BF16: the layer's)

  // Where the layer's chunk `chunk` lies in the registered buffer: its part's
  // offset plus its place in the part; wire_floats past the end.
  size_t chunk_offset(uint32_t chunk) const;
  size_t chunk_length(uint32_t chunk) const;  // 0 past the end
  // The part that holds the layer's chunk `chunk`; -1 past the end.
  int part_of(uint32_t chunk) const;
};

// Note [chunk layout]: a part (Note [plan parts]; a PS layer's one part is its tensor) of n floats
// is cut into chunks of equal size (the last may be shorter) of at most chunk_bytes, and into at
// least min(P2, n·4 / min_spread_chunk_bytes(chunk_bytes)) of them, so that a tensor smaller than
// P2 chunks still spreads over the shards (a 4 MB layer on 4 shards is 4
// chunks of 1 MB, not 1 chunk on one shard). More than P2 chunks are rounded up
// to a multiple of P2 (a 9 MB layer on 4 shards is 12 chunks of 0.75 MB, not 9
// of 1 MB), so that every shard owns as many of them: the shard that owned one
// more would receive and return P2 − 1 more frames than the others, and every
// worker's round waits for that shard's link (a tenth more bytes on the busiest
// link for a 9-chunk layer on 4 shards; docs/communication.md). An empty tensor
// is one empty chunk: it still makes a round.

struct Plan {
  int num_workers = 0;
  int num_servers = 0;
  // G (Config::workers_per_machine; cost_model.h, Note [local aggregation]):
  // only each machine's leader pushes to the shards and sends factors.
  int workers_per_machine = 1;
  size_t chunk_bytes = 0;
  // What the coordinator decided with (they travel in the plan, so every
  // node derives the same layout and estimates).
  Compression compression = Compression::kNone;
  uint32_t powersgd_rank = kDefaultPowerSGDRank;  // as asked; layers use min(r, m, n)
  Rates rates;
  std::vector<LayerPlan> layers;  // declaration order
  // The iteration's backward + synchronisation under these schemes, as
  // schedule.h simulates it; 0 when the link rate is unknown.
  double schedule_s = 0;

  // Pm = P1/G: the leaders, who push to the shards and exchange factors.
  int num_machines() const { return num_workers / workers_per_machine; }
  int machine_of(int worker) const { return worker / workers_per_machine; }
  int leader_of_machine(int machine) const { return machine * workers_per_machine; }
  bool is_leader(int worker) const { return worker % workers_per_machine == 0; }
  // The chunk size of SFB factors, and the upper bound of PS chunks.
  size_t chunk_floats() const { return chunk_bytes / 4; }
  // nullptr when the layer is not in the plan. Thread-safe (const).
  const LayerPlan* find(uint32_t layer_id) const;
  // Shard that owns the layer's chunk `chunk`: (first_chunk + chunk) % P2.
  int shard_of(const LayerPlan& layer, uint32_t chunk) const;
  // First float and length of chunk `chunk` of an SFB factor of `num_floats`
  // (cut at chunk_floats(); PS layers use LayerPlan's own chunking).
  size_t chunk_offset(uint32_t chunk) const { return size_t{chunk} * chunk_floats(); }
  size_t chunk_length(uint64_t num_floats, uint32_t chunk) const;
};

// Number of chunks a tensor of `num_floats` is cut into: at least one, so a
// zero-length tensor still makes one (empty) synchronised round.
uint32_t count_chunks(uint64_t num_floats, size_t chunk_floats);

// Chooses each layer's scheme — its LayerSpec::force, else `cluster_force`
// (Config::scheme), else the cost model's pick among the schemes
// `compression` allows (choose_scheme; with kNone and no rates, BestScheme;
// with the link rate known, refined on the iteration's schedule: Note
// [schedule] in schedule.h) — and lays out parts and chunks, for
// `workers_per_machine` workers per machine (cost_model.h, Note [local
// aggregation]). Throws ConfigError on duplicate layer ids, sizes that
// overflow, powersgd_rank < 1, a negative or non-finite rate or measured
// cost, a workers_per_machine that does not divide num_workers, or a forced
// scheme the layer cannot serve (naming the layer and the setting).
// Non-blocking, thread-safe.
Plan make_plan(const std::vector<LayerSpec>& specs, int num_workers, int num_servers,
               size_t chunk_bytes, SchemeChoice cluster_force,
               Compression compression = Compression::kNone,
               int powersgd_rank = kDefaultPowerSGDRank, const Rates& rates = {},
               int workers_per_machine = 1);

// Rebuilds a plan from decided schemes (what travels on the wire); derives
// costs, estimates, parts and chunks with the same code as make_plan. Throws
// ConfigError as make_plan, and for a scheme the layer cannot serve.
Plan assemble_plan(const std::vector<LayerSpec>& specs, const std::vector<Scheme>& schemes,
                   int num_workers, int num_servers, size_t chunk_bytes,
                   int powersgd_rank = kDefaultPowerSGDRank, const Rates& rates = {},
                   Compression compression = Compression::kNone, int workers_per_machine = 1);

// Every scheme's estimate for one layer (cost_model.h, estimate_schemes), in
// Scheme order: what `poseidon plan` prints to say why a scheme won.
std::vector<SchemeEstimate> layer_estimates(const LayerSpec& spec, int num_workers, int num_servers,
                                            int powersgd_rank = kDefaultPowerSGDRank,
                                            const Rates& rates = {}, int workers_per_machine = 1);

}  // namespace poseidon
