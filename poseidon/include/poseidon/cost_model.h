#pragma once
// The cost model of docs/paper.md §4 (Poseidon, ATC'17): how many numbers one
// node sends plus receives per iteration to synchronise one M×N layer, under
// the sharded parameter server (PS) and under sufficient-factor broadcasting
// (SFB), and BestScheme, which picks the cheaper one; then the time-based
// model that also weighs two lossy schemes, BF16 and PowerSGD (Note [time
// model]). This file is the only place the formulas live;
// docs/communication.md §5 shows the same formulas.

#include <cstdint>
#include <vector>

#include "poseidon/config.h"

namespace poseidon {

enum class LayerKind : uint8_t { kFullyConnected = 1, kConvolution = 2, kOther = 3 };
const char* layer_kind_name(LayerKind kind);  // "FC", "conv", "other"

inline constexpr double kBytesPerFloat = 4.0;  // fp32

// Floats sent + received per iteration for one layer with an M×N weight,
// P1 workers, P2 server shards, K samples per worker. Doubles: exact for
// every integer below 2^53, and no overflow for the largest layers.
//
// Note [local aggregation]: with G workers per machine (Config::
// workers_per_machine) a machine's workers first sum their gradient inside
// the machine and only its leader talks over the network: to the shards the
// job has Pm = P1/G pushers, and under SFB each machine sends its G·K rows.
// So the four network fields below are the paper's formulas with P1 := Pm
// and, for SFB, K := G·K — per machine, through its one link (G = 1: P1 and
// K as written). The local stage moves, per worker, through the machine's
// internal links (Rates::local_bytes_per_s): under PS, BF16 and PowerSGD a
// reduce to the leader and a broadcast back, each (G−1)/G of the fp32 layer
// in and out (pipelined, as NCCL's); under SFB the machine's factors
// gathered, and the other machines' spread to every worker. G = 1 is the
// paper's layout: both local fields are 0.
struct CommCost {
  double ps_worker_floats = 0;     // a worker alone: 2·M·N
  double ps_server_floats = 0;     // a shard alone: 2·P1·M·N/P2
  double ps_colocated_floats = 0;  // one worker + one shard on a node: 2·M·N·(P1+P2−2)/P2
  double sfb_floats = 0;           // a worker under SFB: 2·K·(P1−1)·(M+N)
  double ps_local_floats = 0;      // one worker's local stage, PS: 4·M·N·(G−1)/G
  double sfb_local_floats = 0;     // one worker's local stage, SFB: K·(M+N)·Pm·(G−1)

  double ps_bytes() const { return ps_colocated_floats * kBytesPerFloat; }
  double sfb_bytes() const { return sfb_floats * kBytesPerFloat; }
};

// The formula. Non-blocking, thread-safe. Requires P1 >= 1, P2 >= 1 and G a
// divisor of P1 (ConfigError).
CommCost comm_cost(uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2, int64_t g = 1);

// BestScheme: not FC -> PS; FC and SFB cost <= colocated PS cost -> SFB;
// else PS. Costs are compared per node per iteration (colocated column).
Scheme best_scheme(LayerKind kind, uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2);

// The largest P >= 2 such that best_scheme(FC, m, n, k, P, P) is SFB, i.e.
// "SFB wins while P <= this" in docs/paper.md §4; 1 if SFB loses already at 2;
// max_p if it still wins there. Uses best_scheme itself, so both agree.
int64_t sfb_crossover_workers(uint64_t m, uint64_t n, uint64_t k, int64_t max_p = 1 << 20);

// Note [time model]: beyond the paper, each scheme's cost for one M×N layer
// per node per iteration is three amounts, and a predicted time:
//   wire_bytes    sent + received, in the colocated accounting of
//                 ps_colocated_floats (a worker and a shard on every node)
//   flops         GEMM work the scheme adds to plain training
//   memory_bytes  streaming passes over memory the scheme adds
//   local_bytes   the local stage's (Note [local aggregation]), per worker
//   seconds       wire_bytes/link + local_bytes/local + flops/gemm +
//                 memory_bytes/memory (Rates); an unknown rate (0)
//                 contributes 0 s
// With r = min(rank, M, N) and c = (P1+P2−2)/P2 (the colocated PS factor;
// with G workers per machine the wire columns take P1 := P1/G and SFB's
// K := G·K, Note [local aggregation]; the flops stay each worker's):
//   scheme    wire_bytes           flops               memory_bytes
//   PS        4·2·M·N·c            0                   0
//   BF16      2·2·M·N·c            0                   12·M·N
//   SFB       4·2·K·(P1−1)·(M+N)   2·M·N·K·(P1−1)      0
//   PowerSGD  4·2·r·(M+N)·c        6·M·N·r + 4·M·r²    12·M·N
// BF16's memory: fp32->bf16 before the push (read 4 + write 2 bytes per
// float), bf16->fp32 after the pull (read 2 + write 4). SFB's flops: the
// rebuild of the other workers' M×N updates from their factors. PowerSGD's
// flops: three GEMMs and orthogonalising P; its memory: error feedback, three
// fp32 passes over M·N.
// Like the paper, biases (a layer's floats beyond M·N) are left out.
// Each estimate also says where its compute falls (Note [schedule]):
//   scheme    encode_s (before the send)   between_s (PowerSGD)    finish_s
//   BF16      half the memory term         -                       the other half
//   SFB       minus the own dW product     -                       the rebuild
//   PowerSGD  2·M·N·r flops + 4·M·N bytes  2·M·N·r + 4·M·r² flops  2·M·N·r + 8·M·N bytes
// SFB's rebuild makes the weight gradient from all P1 workers' factors
// (2·M·N·K·P1 flops), and the layer's backward skips its own dW product
// (2·M·N·K flops): the net is the table's 2·M·N·K·(P1−1). A worker's
// measurement of a phase on its device (MeasuredCosts), when there is one,
// replaces the formula's. The per-layer pick
// (choose_scheme) ranks the applicable and allowed schemes by seconds,
// or by wire_bytes alone when the link rate is unknown; ties go to the first
// of SFB, PS, BF16, PowerSGD — so with no rates and Compression::kNone the
// pick is best_scheme's, ties included (exact before lossy, and SFB on <=).

// Note [measured costs]: what a worker timed on its own device for one
// layer, at the layer's shapes and the job's P1 (python/poseidon/sync/
// measure.py), in seconds; 0 = not measured (the formula's rate is used).
// The phases are those of Note [schedule]. backward_s is the layer's own
// backward pass, what the layers' transfers can hide behind.
struct MeasuredCosts {
  double backward_s = 0;
  double sfb_rebuild_s = 0;       // finish: dW from all workers' factors (K·P1 rows)
  double dw_s = 0;                // the layer's own dW product (K rows), which SFB skips
  double bf16_encode_s = 0;       // fp32 -> bf16 before the push
  double bf16_finish_s = 0;       // bf16 -> fp32 after the pull
  double powersgd_encode_s = 0;   // error feedback, P = M·Q
  double powersgd_between_s = 0;  // orthogonalise the summed P, Q = Mᵀ·P
  double powersgd_finish_s = 0;   // P·Qᵀ / P1, the new error

  bool any() const;
  bool operator==(const MeasuredCosts& o) const;
};

// Whether `scheme` can serve a layer: PS and BF16 any layer; SFB a
// fully-connected one; PowerSGD an m×n weight with m >= 2 and n >= 2 inside
// the layer's num_floats (the rest, e.g. a bias, stays exact).
bool scheme_applicable(Scheme scheme, LayerKind kind, uint64_t m, uint64_t n, uint64_t num_floats);
// Whether `compression` lets the cost model pick `scheme` (PS and SFB always).
bool scheme_allowed(Scheme scheme, Compression compression);
// The rank a PowerSGD layer really uses: min(rank, m, n).
uint64_t powersgd_effective_rank(uint64_t rank, uint64_t m, uint64_t n);

// Whether the cost model may pick PowerSGD for an m×n weight at `rank`: only
// when the factors are at most half the matrix, 2·r·(m+n) < m·n with
// r = min(rank, m, n) — PyTorch's hook's rule (min_compression_rate = 2). A
// small weight gains too little for the extra round and the approximation;
// forcing PowerSGD on it still works.
bool powersgd_pays(uint64_t m, uint64_t n, uint64_t rank);

// One scheme's cost for one layer (Note [time model]).
struct SchemeEstimate {
  Scheme scheme = Scheme::kPS;
  bool applicable = false;  // scheme_applicable (the amounts are computed either way)
  uint64_t rank = 0;        // PowerSGD: min(rank, m, n); else 0
  double wire_bytes = 0;    // sent + received per node per iteration
  double flops = 0;         // extra GEMM flops per node per iteration
  double memory_bytes = 0;  // extra memory traffic per node per iteration
  double local_bytes = 0;   // the local stage, per worker (Note [local aggregation])
  double seconds = 0;       // predicted; unknown rates count 0
  // seconds, split by where it falls (Note [schedule]); seconds is their sum.
  double wire_s = 0;     // wire_bytes at the link rate (PowerSGD: both rounds)
  double local_s = 0;    // local_bytes at the local rate: half before the wire, half after
  double encode_s = 0;   // on the training thread, before the layer's first send
  double between_s = 0;  // PowerSGD: between its two rounds
  double finish_s = 0;   // after the layer's last round, before its update
};

// The estimate of `scheme` for a layer of `kind` with an m×n weight, k
// samples per worker, `num_floats` floats in all, P1 workers, P2 shards,
// PowerSGD rank `rank` and G workers per machine; `measured` replaces the
// formula's compute where set. Requires P1, P2 >= 1 and G a divisor of P1
// (ConfigError). Pure.
SchemeEstimate estimate_scheme(Scheme scheme, LayerKind kind, uint64_t m, uint64_t n, uint64_t k,
                               int64_t p1, int64_t p2, uint64_t rank, uint64_t num_floats,
                               const Rates& rates, const MeasuredCosts& measured = {},
                               int64_t g = 1);
// All four, in Scheme order (PS, SFB, BF16, PowerSGD).
std::vector<SchemeEstimate> estimate_schemes(LayerKind kind, uint64_t m, uint64_t n, uint64_t k,
                                             int64_t p1, int64_t p2, uint64_t rank,
                                             uint64_t num_floats, const Rates& rates,
                                             const MeasuredCosts& measured = {}, int64_t g = 1);
// True if `a` ranks before `b` (Note [time model]: seconds, or wire_bytes
// when rates.link_bytes_per_s is 0; ties by SFB, PS, BF16, PowerSGD).
bool ranks_before(const SchemeEstimate& a, const SchemeEstimate& b, const Rates& rates);
// Whether the model may pick `scheme` for a layer: applicable, allowed by
// `compression`, and for PowerSGD only where powersgd_pays.
bool scheme_candidate(Scheme scheme, LayerKind kind, uint64_t m, uint64_t n, uint64_t num_floats,
                      Compression compression, uint64_t rank);
// The model's pick for one layer on its own: the candidate that ranks first
// (ranks_before). Pure. make_plan refines these picks on the iteration's
// schedule when the link rate is known (Note [schedule], schedule.h).
Scheme choose_scheme(LayerKind kind, uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2,
                     Compression compression, uint64_t rank, uint64_t num_floats,
                     const Rates& rates, const MeasuredCosts& measured = {}, int64_t g = 1);

}  // namespace poseidon
