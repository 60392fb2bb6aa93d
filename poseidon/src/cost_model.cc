#include "poseidon/cost_model.h"

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

CommCost comm_cost(uint64_t m, uint64_t n, uint64_t k, int64_t p1, int64_t p2) {
  if (p1 < 1 || p2 < 1) {
    throw ConfigError("comm_cost: P1=" + std::to_string(p1) + " P2=" + std::to_string(p2) +
                      " (want >= 1)");
  }
  const double mn = static_cast<double>(m) * static_cast<double>(n);
  const double P1 = static_cast<double>(p1);
  const double P2 = static_cast<double>(p2);
  CommCost c;
  c.ps_worker_floats = 2.0 * mn;
  c.ps_server_floats = 2.0 * P1 * mn / P2;
  c.ps_colocated_floats = 2.0 * mn * (P1 + P2 - 2.0) / P2;
  c.sfb_floats =
      2.0 * static_cast<double>(k) * (P1 - 1.0) * (static_cast<double>(m) + static_cast<double>(n));
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

}  // namespace poseidon
