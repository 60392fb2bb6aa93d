// BestScheme and the cost model reproduce the worked table of docs/paper.md §4
// (K = 32, P1 = P2 = 16, fp32, per node per iteration; MB = 10^6 bytes).

#include <cmath>

#include "check.h"
#include "poseidon/cost_model.h"
#include "poseidon/errors.h"

using namespace poseidon;

namespace {

double mb(double bytes) { return bytes / 1e6; }

bool near(double a, double b, double tol) { return std::fabs(a - b) <= tol; }

struct Row {
  const char* name;
  uint64_t n_in;   // N: input dimension
  uint64_t m_out;  // M: outputs
  uint64_t k;
  int64_t crossover;  // "SFB wins while P <="
  double sfb_mb;      // at P = 16
  double ps_mb;
};

}  // namespace

TEST(worked_table) {
  const Row rows[] = {
      {"VGG19 fc6 25088->4096", 25088, 4096, 32, 220, 112.0, 1541.0},
      {"VGG19 fc7 4096->4096", 4096, 4096, 32, 128, 31.5, 252.0},
      {"VGG19-22K fc8 4096->21841", 4096, 21841, 32, 215, 99.6, 1342.0},
      {"Inception-V3/ResNet fc 2048->1000", 2048, 1000, 32, 41, 11.7, 30.7},
  };
  for (const Row& r : rows) {
    const CommCost c = comm_cost(r.m_out, r.n_in, r.k, 16, 16);
    // The table rounds to 3-4 significant digits.
    if (!near(mb(c.sfb_bytes()), r.sfb_mb, 0.06 * (r.sfb_mb > 100 ? 10 : 1))) {
      ptest::fail(__FILE__, __LINE__,
                  std::string(r.name) + " SFB MB " + std::to_string(mb(c.sfb_bytes())));
    }
    if (!near(mb(c.ps_bytes()), r.ps_mb, r.ps_mb > 1000 ? 1.0 : 0.6)) {
      ptest::fail(__FILE__, __LINE__,
                  std::string(r.name) + " PS MB " + std::to_string(mb(c.ps_bytes())));
    }
    CHECK(best_scheme(LayerKind::kFullyConnected, r.m_out, r.n_in, r.k, 16, 16) == Scheme::kSFB);
    CHECK_EQ(sfb_crossover_workers(r.m_out, r.n_in, r.k), r.crossover);
    // The crossover is exact: SFB still wins at it and loses one above it.
    CHECK(best_scheme(LayerKind::kFullyConnected, r.m_out, r.n_in, r.k, r.crossover, r.crossover) ==
          Scheme::kSFB);
    CHECK(best_scheme(LayerKind::kFullyConnected, r.m_out, r.n_in, r.k, r.crossover + 1,
                      r.crossover + 1) == Scheme::kPS);
  }
  // GoogLeNet fc 1024->1000 at K = 128: SFB wins only while P <= 7, loses at 16.
  CHECK_EQ(sfb_crossover_workers(1000, 1024, 128), int64_t{7});
  CHECK(best_scheme(LayerKind::kFullyConnected, 1000, 1024, 128, 16, 16) == Scheme::kPS);
  const CommCost g = comm_cost(1000, 1024, 128, 16, 16);
  CHECK(g.sfb_bytes() > g.ps_bytes());
}

TEST(exact_formulas) {
  // Small integers so every term is exact.
  const CommCost c = comm_cost(3, 5, 7, 4, 2);
  CHECK_EQ(c.ps_worker_floats, 2.0 * 15);
  CHECK_EQ(c.ps_server_floats, 2.0 * 4 * 15 / 2);
  CHECK_EQ(c.ps_colocated_floats, 2.0 * 15 * (4 + 2 - 2) / 2);
  CHECK_EQ(c.sfb_floats, 2.0 * 7 * 3 * (3 + 5));
  CHECK_EQ(c.ps_bytes(), 4 * c.ps_colocated_floats);
  // A single worker and a single shard move nothing under either scheme.
  const CommCost one = comm_cost(100, 100, 8, 1, 1);
  CHECK_EQ(one.ps_colocated_floats, 0.0);
  CHECK_EQ(one.sfb_floats, 0.0);
}

TEST(not_fc_means_ps) {
  CHECK(best_scheme(LayerKind::kConvolution, 4096, 25088, 1, 16, 16) == Scheme::kPS);
  CHECK(best_scheme(LayerKind::kOther, 4096, 25088, 1, 16, 16) == Scheme::kPS);
  CHECK_THROWS(comm_cost(1, 1, 1, 0, 1), ConfigError, "P1=0");
}

// Note [time model], by hand: M=3, N=5, K=7, P1=4, P2=2, rank 2 (r = 2),
// 18 floats (a bias of 3). Colocated PS factor (P1+P2−2)/P2 = 2.
TEST(time_model_hand_computed) {
  Rates rates;
  rates.link_bytes_per_s = 100;
  rates.gemm_flops_per_s = 10;
  rates.memory_bytes_per_s = 60;
  const auto est = [&](Scheme s) {
    return estimate_scheme(s, LayerKind::kFullyConnected, 3, 5, 7, 4, 2, 2, 18, rates);
  };
  const SchemeEstimate ps = est(Scheme::kPS);
  CHECK_EQ(ps.wire_bytes, 4.0 * 2 * 15 * 2);  // 240
  CHECK_EQ(ps.flops, 0.0);
  CHECK_EQ(ps.memory_bytes, 0.0);
  CHECK(near(ps.seconds, 2.4, 1e-12));
  const SchemeEstimate bf = est(Scheme::kBF16);
  CHECK_EQ(bf.wire_bytes, 120.0);
  CHECK_EQ(bf.flops, 0.0);
  CHECK_EQ(bf.memory_bytes, 12.0 * 15);  // 180
  CHECK(near(bf.seconds, 1.2 + 3.0, 1e-12));
  const SchemeEstimate sfb = est(Scheme::kSFB);
  CHECK_EQ(sfb.wire_bytes, 4.0 * 2 * 7 * 3 * 8);  // 1344
  CHECK_EQ(sfb.flops, 2.0 * 15 * 7 * 3);          // 630
  CHECK_EQ(sfb.memory_bytes, 0.0);
  CHECK(near(sfb.seconds, 13.44 + 63.0, 1e-12));
  const SchemeEstimate psgd = est(Scheme::kPowerSGD);
  CHECK_EQ(psgd.rank, uint64_t{2});
  CHECK_EQ(psgd.wire_bytes, 4.0 * 2 * 2 * 8 * 2);        // 256
  CHECK_EQ(psgd.flops, 6.0 * 15 * 2 + 4.0 * 3 * 2 * 2);  // 228
  CHECK_EQ(psgd.memory_bytes, 180.0);
  CHECK(near(psgd.seconds, 2.56 + 22.8 + 3.0, 1e-12));
  CHECK(ps.applicable && bf.applicable && sfb.applicable && psgd.applicable);
  // Timed, PS wins here; with no link rate the bytes decide: BF16.
  CHECK(choose_scheme(LayerKind::kFullyConnected, 3, 5, 7, 4, 2, Compression::kAuto, 2, 18,
                      rates) == Scheme::kPS);
  CHECK(choose_scheme(LayerKind::kFullyConnected, 3, 5, 7, 4, 2, Compression::kAuto, 2, 18,
                      Rates{}) == Scheme::kBF16);
  // Fast compute: the bytes decide again (BF16 with everything allowed), and
  // PowerSGD's 256 bytes lose to PS's 240.
  rates.gemm_flops_per_s = 1e6;
  rates.memory_bytes_per_s = 1e6;
  CHECK(choose_scheme(LayerKind::kFullyConnected, 3, 5, 7, 4, 2, Compression::kAuto, 2, 18,
                      rates) == Scheme::kBF16);
  CHECK(choose_scheme(LayerKind::kFullyConnected, 3, 5, 7, 4, 2, Compression::kPowerSGD, 2, 18,
                      rates) == Scheme::kPS);  // 2.56 s + a little vs 2.4 s
  // PowerSGD is picked only where its factors are at most half the matrix.
  CHECK(!powersgd_pays(3, 5, 2));     // 2·2·8 = 32 >= 15
  CHECK(!powersgd_pays(4, 27, 4));    // 2·4·31 = 248 >= 108
  CHECK(powersgd_pays(512, 144, 4));  // 5248 < 73728
  CHECK(!powersgd_pays(16, 16, 4));   // 256 = 256: not less
  CHECK(powersgd_pays(17, 17, 4));    // 272 < 289
  CHECK(!powersgd_pays(2, 512, 2));   // r = 2: 2056 >= 1024
  CHECK(choose_scheme(LayerKind::kConvolution, 4, 27, 1, 4, 4, Compression::kPowerSGD, 4, 112,
                      Rates{}) == Scheme::kPS);
  CHECK(choose_scheme(LayerKind::kConvolution, 512, 144, 1, 4, 4, Compression::kPowerSGD, 4,
                      512 * 144, Rates{}) == Scheme::kPowerSGD);
  // The rank is clamped to the weight; rank 0 is refused.
  CHECK_EQ(
      estimate_scheme(Scheme::kPowerSGD, LayerKind::kOther, 3, 5, 7, 4, 2, 9, 18, Rates{}).rank,
      uint64_t{3});
  CHECK_THROWS(estimate_scheme(Scheme::kPS, LayerKind::kOther, 3, 5, 7, 4, 2, 0, 18, Rates{}),
               ConfigError, "rank 0");
}

TEST(applicability_and_allowance) {
  CHECK(scheme_applicable(Scheme::kPS, LayerKind::kOther, 1, 1, 0));
  CHECK(scheme_applicable(Scheme::kBF16, LayerKind::kOther, 0, 0, 0));
  CHECK(scheme_applicable(Scheme::kSFB, LayerKind::kFullyConnected, 1, 1, 1));
  CHECK(!scheme_applicable(Scheme::kSFB, LayerKind::kConvolution, 64, 64, 4096));
  CHECK(scheme_applicable(Scheme::kPowerSGD, LayerKind::kConvolution, 64, 27, 64 * 27 + 64));
  CHECK(!scheme_applicable(Scheme::kPowerSGD, LayerKind::kOther, 100, 1, 100));  // a vector
  CHECK(!scheme_applicable(Scheme::kPowerSGD, LayerKind::kOther, 1, 100, 100));
  CHECK(!scheme_applicable(Scheme::kPowerSGD, LayerKind::kFullyConnected, 4, 4, 15));
  // No overflow on absurd shapes.
  CHECK(!scheme_applicable(Scheme::kPowerSGD, LayerKind::kFullyConnected, uint64_t{1} << 40,
                           uint64_t{1} << 40, 1 << 20));
  for (const Scheme s : {Scheme::kPS, Scheme::kSFB}) {
    for (const Compression c :
         {Compression::kNone, Compression::kBF16, Compression::kPowerSGD, Compression::kAuto}) {
      CHECK(scheme_allowed(s, c));
    }
  }
  CHECK(!scheme_allowed(Scheme::kBF16, Compression::kNone));
  CHECK(scheme_allowed(Scheme::kBF16, Compression::kBF16));
  CHECK(!scheme_allowed(Scheme::kBF16, Compression::kPowerSGD));
  CHECK(scheme_allowed(Scheme::kBF16, Compression::kAuto));
  CHECK(!scheme_allowed(Scheme::kPowerSGD, Compression::kNone));
  CHECK(!scheme_allowed(Scheme::kPowerSGD, Compression::kBF16));
  CHECK(scheme_allowed(Scheme::kPowerSGD, Compression::kPowerSGD));
  CHECK(scheme_allowed(Scheme::kPowerSGD, Compression::kAuto));
  CHECK_EQ(std::string(scheme_name(Scheme::kBF16)), std::string("BF16"));
  CHECK_EQ(std::string(scheme_name(Scheme::kPowerSGD)), std::string("PowerSGD"));
  CHECK_EQ(std::string(compression_name(Compression::kAuto)), std::string("auto"));
}

TEST(ties_go_to_exact_schemes) {
  // One worker and one shard: nothing crosses the wire under any scheme.
  // FC: SFB, as best_scheme's "<="; other kinds: PS, never a lossy scheme.
  for (const Compression c :
       {Compression::kNone, Compression::kBF16, Compression::kPowerSGD, Compression::kAuto}) {
    CHECK(choose_scheme(LayerKind::kFullyConnected, 64, 64, 8, 1, 1, c, 4, 4096, Rates{}) ==
          Scheme::kSFB);
    CHECK(choose_scheme(LayerKind::kConvolution, 64, 64, 8, 1, 1, c, 4, 4096, Rates{}) ==
          Scheme::kPS);
  }
  // PS and SFB exactly equal (P = 2: K·(M+N) = M·N): SFB.
  CHECK(comm_cost(4, 4, 2, 2, 2).sfb_floats == comm_cost(4, 4, 2, 2, 2).ps_colocated_floats);
  CHECK(choose_scheme(LayerKind::kFullyConnected, 4, 4, 2, 2, 2, Compression::kNone, 4, 16,
                      Rates{}) == Scheme::kSFB);
  Rates link;
  link.link_bytes_per_s = 1e9;
  CHECK(choose_scheme(LayerKind::kFullyConnected, 4, 4, 2, 2, 2, Compression::kNone, 4, 16, link) ==
        Scheme::kSFB);
  // Known rates: SFB's rebuild GEMM now counts, and PS wins the tie on bytes.
  link.gemm_flops_per_s = 1e9;
  CHECK(choose_scheme(LayerKind::kFullyConnected, 4, 4, 2, 2, 2, Compression::kNone, 4, 16, link) ==
        Scheme::kPS);
  // A lossy scheme never wins a tie against an exact one.
  SchemeEstimate a;
  a.scheme = Scheme::kBF16;
  SchemeEstimate b;
  b.scheme = Scheme::kPS;
  CHECK(!ranks_before(a, b, Rates{}));
  CHECK(ranks_before(b, a, Rates{}));
}

TEST(no_rates_and_exact_schemes_is_best_scheme) {
  // Unknown link rate: ranked by wire bytes alone, whatever the other rates.
  Rates compute_only;
  compute_only.gemm_flops_per_s = 1e12;
  compute_only.memory_bytes_per_s = 1e11;
  const uint64_t dims[] = {1, 2, 3, 7, 64, 100, 1000, 4096, 25088};
  const uint64_t ks[] = {1, 8, 32, 128};
  int compared = 0;
  for (const LayerKind kind : {LayerKind::kFullyConnected, LayerKind::kConvolution}) {
    for (const uint64_t m : dims) {
      for (const uint64_t n : dims) {
        for (const uint64_t k : ks) {
          for (int64_t p1 = 1; p1 <= 9; ++p1) {
            for (int64_t p2 = 1; p2 <= 9; p2 += 2) {
              const Scheme want = best_scheme(kind, m, n, k, p1, p2);
              for (const Rates& r : {Rates{}, compute_only}) {
                if (choose_scheme(kind, m, n, k, p1, p2, Compression::kNone, 4, m * n, r) != want) {
                  ptest::fail(__FILE__, __LINE__,
                              "differs from best_scheme at m=" + std::to_string(m) +
                                  " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                  " P1=" + std::to_string(p1) + " P2=" + std::to_string(p2));
                }
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  CHECK(compared > 10000);
}

TEST_MAIN()
