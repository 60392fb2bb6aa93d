#include "poseidon/cost_model.h"

#include <algorithm>

#include "poseidon/errors.h"

namespace poseidon {

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kFullyConnected:
      return "FC";
    case LayerKind::kConvolution:
      return "conv";
    case LayerKind::kOther:
      return "other";
  }
  return "kind?";
}

CommCost comm_cost(uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2, int64_t g) {
  if (p1 < 1 || p2 < 1 || g < 1 || p1 % g != 0) {
    throw ConfigError("comm_cost: P1=" + std::to_string(p1) + " P2=" + std::to_string(p2) +
                      " G=" + std::to_string(g) + " (want P1, P2 >= 1 and G a divisor of P1)");
  }
  const double mn = static_cast<double>(m) * static_cast<double>(n);
  const double G = static_cast<double>(g);
  const double Pm = static_cast<double>(p1 / g);  // machines: the network's pushers
  const double P2 = static_cast<double>(p2);
  const double rows = static_cast<double>(k) * (static_cast<double>(m) + static_cast<double>(n));
  CommCost c;
  c.ps_worker_floats = 2.0 * mn;
  c.ps_server_floats = 2.0 * Pm * mn / P2;
  c.ps_colocated_floats = 2.0 * mn * (Pm + P2 - 2.0) / P2;
  c.sfb_floats = 2.0 * G * (Pm - 1.0) * rows;
  c.ps_local_floats = 4.0 * mn * (G - 1.0) / G;
  c.sfb_local_floats = rows * Pm * (G - 1.0);
  return c;
}

Scheme best_scheme(LayerKind kind, uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2) {
  if (kind != LayerKind::kFullyConnected) return Scheme::kPS;
  const CommCost c = comm_cost(m, n, k, p1, p2);
  return c.sfb_floats <= c.ps_colocated_floats ? Scheme::kSFB : Scheme::kPS;
}

int64_t sfb_crossover_workers(uint64_t m, uint64_t n, uint64_t k, int64_t max_p) {
  // SFB/PS grows linearly with P (ratio K·(M+N)·P / (2·M·N)), so the winning
  // set is {2..P*}: find P* by doubling, then bisecting.
  auto sfb_wins = [&](int64_t p) {
    return best_scheme(LayerKind::kFullyConnected, m, n, k, p, p) == Scheme::kSFB;
  };
  if (!sfb_wins(2)) return 1;
  int64_t lo = 2;  // wins
  int64_t hi = 4;  // unknown
  while (hi < max_p && sfb_wins(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi >= max_p) {
    if (sfb_wins(max_p)) return max_p;
    hi = max_p;
  }
  while (hi - lo > 1) {  // invariant: wins(lo), !wins(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (sfb_wins(mid) ? lo : hi) = mid;
  }
  return lo;
}

bool scheme_applicable(Scheme scheme, LayerKind kind, uint64_t m, uint64_t n, uint64_t num_floats) {
  switch (scheme) {
    case Scheme::kPS:
    case Scheme::kBF16:
      return true;
    case Scheme::kSFB:
      return kind == LayerKind::kFullyConnected;
    case Scheme::kPowerSGD:
      // m·n <= num_floats without overflowing: m <= num_floats / n.
      return m >= 2 && n >= 2 && m <= num_floats / n;
  }
  return false;
}

bool scheme_allowed(Scheme scheme, Compression compression) {
  switch (scheme) {
    case Scheme::kPS:
    case Scheme::kSFB:
      return true;
    case Scheme::kBF16:
      return compression == Compression::kBF16 || compression == Compression::kAuto;
    case Scheme::kPowerSGD:
      return compression == Compression::kPowerSGD || compression == Compression::kAuto;
  }
  return false;
}

uint64_t powersgd_effective_rank(uint64_t rank, uint64_t m, uint64_t n) {
  return std::min({rank, m, n});
}

bool MeasuredCosts::any() const {
  return backward_s > 0 || sfb_rebuild_s > 0 || dw_s > 0 || bf16_encode_s > 0 ||
         bf16_finish_s > 0 || powersgd_encode_s > 0 || powersgd_between_s > 0 ||
         powersgd_finish_s > 0;
}

bool MeasuredCosts::operator==(const MeasuredCosts& o) const {
  return backward_s == o.backward_s && sfb_rebuild_s == o.sfb_rebuild_s && dw_s == o.dw_s &&
         bf16_encode_s == o.bf16_encode_s && bf16_finish_s == o.bf16_finish_s &&
         powersgd_encode_s == o.powersgd_encode_s && powersgd_between_s == o.powersgd_between_s &&
         powersgd_finish_s == o.powersgd_finish_s;
}

SchemeEstimate estimate_scheme(Scheme scheme, LayerKind kind, uint64_t m, uint64_t n, uint64_t k,
                               int64_t p1, int64_t p2, uint64_t rank, uint64_t num_floats,
                               const Rates& rates, const MeasuredCosts& measured, int64_t g) {
  if (rank < 1) throw ConfigError("estimate_scheme: PowerSGD rank 0 (want >= 1)");
  // The wire bytes of PS and SFB are comm_cost's floats times 4 (exact in
  // binary floating point), so ranking by them agrees with best_scheme.
  const CommCost c = comm_cost(m, n, k, p1, p2, g);
  const double M = static_cast<double>(m);
  const double N = static_cast<double>(n);
  const double mn = M * N;
  const auto over = [](double amount, double rate) { return rate > 0 ? amount / rate : 0.0; };
  const auto gemm = [&](double flops) { return over(flops, rates.gemm_flops_per_s); };
  const auto stream = [&](double bytes) { return over(bytes, rates.memory_bytes_per_s); };
  // A measured phase (Note [measured costs]) wins over the formula's.
  const auto phase = [](double timed, double modelled) { return timed > 0 ? timed : modelled; };
  SchemeEstimate e;
  e.scheme = scheme;
  e.applicable = scheme_applicable(scheme, kind, m, n, num_floats);
  switch (scheme) {
    case Scheme::kPS:
      e.wire_bytes = c.ps_bytes();
      break;
    case Scheme::kBF16:  // the local stage sums fp32; the leader converts the machine's sum
      e.wire_bytes = c.ps_colocated_floats * 2.0;
      e.memory_bytes = 12.0 * mn;
      e.encode_s = phase(measured.bf16_encode_s, stream(6.0 * mn));
      e.finish_s = phase(measured.bf16_finish_s, stream(6.0 * mn));
      break;
    case Scheme::kSFB: {
      e.wire_bytes = c.sfb_bytes();
      const double own = 2.0 * mn * static_cast<double>(k);  // the dW product SFB skips
      e.flops = own * (static_cast<double>(p1) - 1.0);
      e.encode_s = -phase(measured.dw_s, gemm(own));
      e.finish_s = phase(measured.sfb_rebuild_s, gemm(own * static_cast<double>(p1)));
      break;
    }
    case Scheme::kPowerSGD: {
      e.rank = powersgd_effective_rank(rank, m, n);
      const double r = static_cast<double>(e.rank);
      const double Pm = static_cast<double>(p1 / g);
      const double P2 = static_cast<double>(p2);
      e.wire_bytes = kBytesPerFloat * 2.0 * r * (M + N) * (Pm + P2 - 2.0) / P2;
      e.flops = 6.0 * mn * r + 4.0 * M * r * r;
      e.memory_bytes = 12.0 * mn;
      e.encode_s = phase(measured.powersgd_encode_s, gemm(2.0 * mn * r) + stream(4.0 * mn));
      e.between_s = phase(measured.powersgd_between_s, gemm(2.0 * mn * r + 4.0 * M * r * r));
      e.finish_s = phase(measured.powersgd_finish_s, gemm(2.0 * mn * r) + stream(8.0 * mn));
      break;
    }
  }
  // Note [local aggregation]: every scheme through the shards sums the fp32 layer locally.
  e.local_bytes =
      kBytesPerFloat * (scheme == Scheme::kSFB ? c.sfb_local_floats : c.ps_local_floats);
  e.wire_s = over(e.wire_bytes, rates.link_bytes_per_s);
  e.local_s = over(e.local_bytes, rates.local_bytes_per_s);
  e.seconds = e.wire_s + e.local_s + e.encode_s + e.between_s + e.finish_s;
  return e;
}

std::vector<SchemeEstimate> estimate_schemes(LayerKind kind, uint64_t m, uint64_t n, uint64_t k,
                                             int64_t p1, int64_t p2, uint64_t rank,
                                             uint64_t num_floats, const Rates& rates,
                                             const MeasuredCosts& measured, int64_t g) {
  std::vector<SchemeEstimate> out;
  for (const Scheme s : {Scheme::kPS, Scheme::kSFB, Scheme::kBF16, Scheme::kPowerSGD}) {
    out.push_back(estimate_scheme(s, kind, m, n, k, p1, p2, rank, num_floats, rates, measured, g));
  }
  return out;
}

namespace {
// Tie order: exact before lossy; SFB before PS, as best_scheme's "<=".
int tie_rank(Scheme s) {
  switch (s) {
    case Scheme::kSFB:
      return 0;
    case Scheme::kPS:
      return 1;
    case Scheme::kBF16:
      return 2;
    case Scheme::kPowerSGD:
      return 3;
  }
  return 4;
}
}  // namespace

bool ranks_before(const SchemeEstimate& a, const SchemeEstimate& b, const Rates& rates) {
  const bool timed = rates.link_bytes_per_s > 0;
  const double ka = timed ? a.seconds : a.wire_bytes;
  const double kb = timed ? b.seconds : b.wire_bytes;
  if (ka != kb) return ka < kb;
  return tie_rank(a.scheme) < tie_rank(b.scheme);
}

bool powersgd_pays(uint64_t m, uint64_t n, uint64_t rank) {
  const double r = static_cast<double>(powersgd_effective_rank(rank, m, n));
  return 2.0 * r * (static_cast<double>(m) + static_cast<double>(n)) <
         static_cast<double>(m) * static_cast<double>(n);
}

bool scheme_candidate(Scheme scheme, LayerKind kind, uint64_t m, uint64_t n, uint64_t num_floats,
                      Compression compression, uint64_t rank) {
  if (!scheme_applicable(scheme, kind, m, n, num_floats)) return false;
  if (!scheme_allowed(scheme, compression)) return false;
  return scheme != Scheme::kPowerSGD || powersgd_pays(m, n, rank);
}

Scheme choose_scheme(LayerKind kind, uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2,
                     Compression compression, uint64_t rank, uint64_t num_floats,
                     const Rates& rates, const MeasuredCosts& measured, int64_t g) {
  const SchemeEstimate* best = nullptr;
  const std::vector<SchemeEstimate> all =
      estimate_schemes(kind, m, n, k, p1, p2, rank, num_floats, rates, measured, g);
  for (const SchemeEstimate& e : all) {
    if (!scheme_candidate(e.scheme, kind, m, n, num_floats, compression, rank)) continue;
    if (best == nullptr || ranks_before(e, *best, rates)) best = &e;
  }
  return best ? best->scheme : Scheme::kPS;  // PS serves every layer: never null
}

}  // namespace poseidon
