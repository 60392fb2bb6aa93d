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

TEST_MAIN()
