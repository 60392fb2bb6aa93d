#pragma once
// The cost model of docs/paper.md §4 (Poseidon, ATC'17): how many numbers one
// node sends plus receives per iteration to synchronise one M×N layer, under
// the sharded parameter server (PS) and under sufficient-factor broadcasting
// (SFB), and BestScheme, which picks the cheaper one. This file is the only
// place the formula lives; docs/communication.md shows the same formula.

#include <cstdint>

#include "poseidon/config.h"

namespace poseidon {

enum class LayerKind : uint8_t { kFullyConnected = 1, kConvolution = 2, kOther = 3 };
const char* layer_kind_name(LayerKind kind);  // "FC", "conv", "other"

inline constexpr double kBytesPerFloat = 4.0;  // fp32

// Floats sent + received per iteration for one layer with an M×N weight,
// P1 workers, P2 server shards, K samples per worker. Doubles: exact for
// every integer below 2^53, and no overflow for the largest layers.
struct CommCost {
  double ps_worker_floats = 0;     // a worker alone: 2·M·N
  double ps_server_floats = 0;     // a shard alone: 2·P1·M·N/P2
  double ps_colocated_floats = 0;  // one worker + one shard on a node: 2·M·N·(P1+P2−2)/P2
  double sfb_floats = 0;           // a worker under SFB: 2·K·(P1−1)·(M+N)

  double ps_bytes() const { return ps_colocated_floats * kBytesPerFloat; }
  double sfb_bytes() const { return sfb_floats * kBytesPerFloat; }
};

// The formula. Non-blocking, thread-safe. Requires P1 >= 1, P2 >= 1.
CommCost comm_cost(uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2);

// BestScheme: not FC -> PS; FC and SFB cost <= colocated PS cost -> SFB;
// else PS. Costs are compared per node per iteration (colocated column).
Scheme best_scheme(LayerKind kind, uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2);

// The largest P >= 2 such that best_scheme(FC, m, n, k, P, P) is SFB, i.e.
// "SFB wins while P <= this" in docs/paper.md §4; 1 if SFB loses already at 2;
// max_p if it still wins there. Uses best_scheme itself, so both agree.
int64_t sfb_crossover_workers(uint64_t m, uint64_t n, uint64_t k, int64_t max_p = 1 << 20);

}  // namespace poseidon
