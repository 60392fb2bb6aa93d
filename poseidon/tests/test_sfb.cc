// Sufficient-factor all-gather among 2–4 workers, peer to peer: worker r
// sends a factor of size(r, t) floats with value 1000·r + i + t at index i
// (sizes differ per worker, one is empty, some span several chunks); after
// each allgather every worker must read every peer's factor, rank-ordered.
// SFB layers run beside PS layers in the same plan.

#include "check.h"
#include "cluster.h"

using namespace poseidon;

namespace {

constexpr size_t kChunkBytes = 1024;  // 256 floats: factors span several chunks

size_t factor_size(int rank, int64_t t) {
  if (rank == 1) return 0;  // an empty factor is still a piece of the gather
  return static_cast<size_t>(37 * (rank + 1) + 300 * rank + t);
}

float factor_value(int rank, size_t i, int64_t t) {
  return static_cast<float>(1000 * rank + static_cast<int64_t>(i) + t);
}

void run(const std::string& transport, int p1) {
  ptest::ClusterOptions o;
  o.workers = p1;
  o.servers = 1;
  o.transport = transport;
  o.chunk_bytes = kChunkBytes;
  ptest::LocalCluster cluster(o);
  std::mutex mu;
  std::vector<std::string> bad;
  auto report = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    bad.push_back(s);
  };
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    const Plan& plan = w.plan({ptest::ps_layer(0, 100), ptest::sfb_layer(3), ptest::sfb_layer(4)});
    CHECK(plan.find(3)->scheme == Scheme::kSFB);
    const size_t max_floats = 2000;
    w.register_sfb_layer(3, max_floats);
    // Layer 4 reserves 64 floats and grows its buffers (Note [factor slots]) to the
    // factors of up to ~700 floats that each step brings, sizes changing every step.
    w.register_sfb_layer(4, 64, max_floats);
    std::vector<float> grad(100);
    w.register_layer(0, grad.data(), grad.size());
    for (int64_t t = 5; t < 9; ++t) {  // need not start at 0
      std::vector<float> mine(factor_size(rank, t));
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = factor_value(rank, i, t);
      Handle g4 = w.allgather(4, t, mine.data(), mine.size());
      std::fill(grad.begin(), grad.end(), 1.0f);
      Handle h0 = w.push_pull(0, t);
      Handle g3 = w.allgather(3, t, mine.data(), mine.size());
      std::fill(mine.begin(), mine.end(), -1.0f);  // send was copied: reuse is safe
      g3.wait(o.timeout_ms);
      g4.wait(o.timeout_ms);
      h0.wait(o.timeout_ms);
      if (grad[99] != static_cast<float>(p1)) report("PS layer beside SFB is wrong");
      for (uint32_t layer : {3u, 4u}) {
        for (int r = 0; r < p1; ++r) {
          const FactorView v = w.factor(layer, t, r);
          if (v.num_floats != factor_size(r, t)) {
            report("worker " + std::to_string(rank) + " sees " + std::to_string(v.num_floats) +
                   " floats from " + std::to_string(r));
            continue;
          }
          for (size_t i = 0; i < v.num_floats; ++i) {
            if (v.data[i] != factor_value(r, i, t)) {
              report("worker " + std::to_string(rank) + " layer " + std::to_string(layer) +
                     " factor of " + std::to_string(r) + " index " + std::to_string(i));
              break;
            }
          }
        }
      }
    }
    // The previous iteration's factors stay readable until the next allgather.
    CHECK_EQ(w.factor(3, 7, 0).num_floats, factor_size(0, 7));
    CHECK_THROWS(w.factor(3, 6, 0), ConfigError, "not available");
    CHECK_THROWS(w.allgather(3, 10, nullptr, 0), ConfigError, "consecutive");
    std::vector<float> huge(max_floats + 1);
    CHECK_THROWS(w.allgather(3, 9, huge.data(), huge.size()), ConfigError, "exceeds");
    CHECK_THROWS(w.allgather(4, 9, huge.data(), huge.size()), ConfigError, "exceeds");
    // SFB traffic is counted per layer: sent to every peer, received from them.
    const LayerTraffic tr = w.traffic().at(3);
    uint64_t sent = 0, received = 0;
    for (int64_t t = 5; t < 9; ++t) {
      sent += factor_size(rank, t) * 4 * static_cast<uint64_t>(p1 - 1);
      for (int r = 0; r < p1; ++r) {
        if (r != rank) received += factor_size(r, t) * 4;
      }
    }
    CHECK_EQ(tr.bytes_sent, sent);
    CHECK_EQ(tr.bytes_received, received);
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.coordinator_error(), std::string());
  for (const std::string& b : bad) CHECK_EQ(b, std::string());
}

}  // namespace

TEST(sfb_allgather_inproc) {
  for (int p1 = 2; p1 <= 4; ++p1) run("inproc", p1);
}

TEST(sfb_allgather_tcp) {
  for (int p1 = 2; p1 <= 4; ++p1) run("tcp", p1);
}

TEST_MAIN()
