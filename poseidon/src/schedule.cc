#include "poseidon/schedule.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "poseidon/errors.h"

namespace poseidon {
namespace {

// One transfer waiting for the link (Note [schedule]).
struct Transfer {
  double ready = 0;  // when it may start
  size_t layer = 0;  // declaration index: lower layers go first among the ready
  int part = 0;      // PowerSGD: 0 (P) or 1 (Q); else 0
  double seconds = 0;
};

// PowerSGD's wire time is r·(M+N) floats' worth: part 0 carries r·M, part 1 r·N.
double part_share(const LayerSpec& spec, int part) {
  const double m = static_cast<double>(spec.m);
  const double n = static_cast<double>(spec.n);
  return (part == 0 ? m : n) / (m + n);
}

// The index in `pending` of the transfer the link takes when it frees at `now`.
size_t next_transfer(const std::vector<Transfer>& pending, double now) {
  size_t pick = 0;
  for (size_t i = 1; i < pending.size(); ++i) {
    const Transfer& a = pending[i];
    const Transfer& b = pending[pick];
    const bool a_ready = a.ready <= now;
    const bool b_ready = b.ready <= now;
    if (a_ready != b_ready) {
      if (a_ready) pick = i;
    } else if (a_ready ? a.layer < b.layer
                       : (a.ready != b.ready ? a.ready < b.ready : a.layer < b.layer)) {
      pick = i;
    }
  }
  return pick;
}

bool is_lossy(Scheme s) { return s == Scheme::kBF16 || s == Scheme::kPowerSGD; }

}  // namespace

double schedule_seconds(const std::vector<LayerSpec>& specs,
                        const std::vector<SchemeEstimate>& chosen) {
  if (specs.size() != chosen.size()) {
    throw ConfigError("schedule: " + std::to_string(specs.size()) + " layers, " +
                      std::to_string(chosen.size()) + " estimates");
  }
  const size_t count = specs.size();
  std::vector<Transfer> pending;
  pending.reserve(count);
  double compute = 0;  // the training thread
  for (size_t j = count; j-- > 0;) {
    // SFB's encode_s is negative (the dW it skips); a layer's backward never ends before
    // it starts, even where the timings disagree.
    compute += std::max(0.0, specs[j].measured.backward_s + chosen[j].encode_s);
    const bool two_parts = chosen[j].scheme == Scheme::kPowerSGD;
    const double share = two_parts ? part_share(specs[j], 0) : 1.0;
    // Note [local aggregation]: the machine's sum is ready for the link after the local
    // reduce, and the layer done after the local broadcast (the machine's own links).
    pending.push_back({compute + chosen[j].local_s / 2, j, 0, chosen[j].wire_s * share});
    // The continuation thread's encoding of Q runs on the same device: it takes
    // its time from the training thread's, whenever it runs.
    if (two_parts) compute += chosen[j].between_s;
  }
  std::vector<double> done(count, 0.0);
  double link = 0;
  while (!pending.empty()) {
    const size_t i = next_transfer(pending, link);
    const Transfer t = pending[i];
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    link = std::max(link, t.ready) + t.seconds;
    const SchemeEstimate& e = chosen[t.layer];
    if (e.scheme == Scheme::kPowerSGD && t.part == 0) {
      pending.push_back({link + e.between_s, t.layer, 1, e.wire_s * part_share(specs[t.layer], 1)});
    } else {
      done[t.layer] = link + e.local_s / 2;
    }
  }
  double end = compute;
  for (size_t j = 0; j < count; ++j) end = std::max(end, done[j]) + chosen[j].finish_s;
  return end;
}

std::vector<Scheme> refine_by_schedule(const std::vector<LayerSpec>& specs,
                                       std::vector<Scheme> picks, const std::vector<bool>& fixed,
                                       int num_workers, int num_servers, Compression compression,
                                       int powersgd_rank, const Rates& rates, int g) {
  const size_t count = specs.size();
  if (picks.size() != count || fixed.size() != count) {
    throw ConfigError("refine_by_schedule: one scheme and one flag per layer");
  }
  const uint64_t rank = static_cast<uint64_t>(powersgd_rank);
  // Every scheme's estimate of every layer, by Scheme value; and each free
  // layer's candidates.
  std::vector<std::vector<SchemeEstimate>> table(count);
  std::vector<std::vector<Scheme>> candidates(count);
  std::vector<Scheme> exact = picks;
  for (size_t i = 0; i < count; ++i) {
    const LayerSpec& s = specs[i];
    for (const SchemeEstimate& e :
         estimate_schemes(s.kind, s.m, s.n, s.k, num_workers, num_servers, rank,
                          s.modelled_floats(), rates, s.measured, g)) {
      table[i].push_back(e);
      if (!fixed[i] &&
          scheme_candidate(e.scheme, s.kind, s.m, s.n, s.modelled_floats(), compression, rank)) {
        candidates[i].push_back(e.scheme);
      }
    }
    if (!fixed[i]) {
      exact[i] = choose_scheme(s.kind, s.m, s.n, s.k, num_workers, num_servers, Compression::kNone,
                               rank, s.modelled_floats(), rates, s.measured, g);
    }
  }
  const auto estimate = [&](size_t i, Scheme scheme) -> const SchemeEstimate& {
    for (const SchemeEstimate& e : table[i]) {
      if (e.scheme == scheme) return e;
    }
    throw ConfigError("refine_by_schedule: no estimate for a scheme");  // unreachable
  };
  std::vector<SchemeEstimate> chosen(count);
  const auto seconds_of = [&](const std::vector<Scheme>& schemes) {
    for (size_t i = 0; i < count; ++i) chosen[i] = estimate(i, schemes[i]);
    return schedule_seconds(specs, chosen);
  };
  // Ties go to the exact plan: a lossy gradient must buy time.
  double best = seconds_of(exact);
  const double lossy_start = seconds_of(picks);
  if (lossy_start < best) {
    best = lossy_start;
  } else {
    picks = exact;
  }
  constexpr double kMinGain = 1e-9;  // relative: rounding is no improvement
  constexpr int kMaxPasses = 16;     // each pass that changes anything shortens the iteration
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool changed = false;
    for (size_t i = 0; i < count; ++i) {
      for (const Scheme c : candidates[i]) {
        if (c == picks[i]) continue;
        const Scheme before = picks[i];
        picks[i] = c;
        const double t = seconds_of(picks);
        if (t < best * (1.0 - kMinGain)) {
          best = t;
          changed = true;
        } else {
          picks[i] = before;
        }
      }
    }
    if (!changed) break;
  }
  // A lossy layer must buy time: layer by layer, the best exact candidate
  // replaces it while the iteration stays within kExactPreference of the
  // fastest plan found (a fixed bound, so the replacements together cost at
  // most that much).
  const double bound = best * (1.0 + kExactPreference);
  for (size_t i = 0; i < count; ++i) {
    if (!is_lossy(picks[i])) continue;
    const Scheme before = picks[i];
    Scheme kept = before;
    double kept_s = bound;
    for (const Scheme c : candidates[i]) {
      if (is_lossy(c)) continue;
      picks[i] = c;
      const double t = seconds_of(picks);
      if (t <= kept_s) {
        kept = c;
        kept_s = t;
      }
    }
    picks[i] = kept;
  }
  return picks;
}

}  // namespace poseidon
