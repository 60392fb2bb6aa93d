// 100 MB tensors (25 M floats) through the PS with the default 1 MiB chunks,
// for a few worker × shard combinations over TCP and in-process, two
// iterations each: worker r pushes (r+1) + (i mod 3) + t.

#include <atomic>

#include "check.h"
#include "cluster.h"

using namespace poseidon;

namespace {

constexpr size_t kFloats = 25u * 1000 * 1000;  // 100 MB

void run(const std::string& transport, int p1, int p2) {
  ptest::ClusterOptions o;
  o.workers = p1;
  o.servers = p2;
  o.transport = transport;
  o.timeout_ms = 60000;
  // Not a fault test: filling and checking 100 MB per worker on a loaded 2-core
  // machine once starved a heartbeat past the 3 s that fault tests use.
  o.heartbeat_timeout_ms = 30000;
  ptest::LocalCluster cluster(o);
  std::atomic<int> wrong{0};
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, kFloats)});
    std::vector<float> g(kFloats);
    w.register_layer(0, g.data(), g.size());
    for (int64_t t = 0; t < 2; ++t) {
      for (size_t i = 0; i < kFloats; ++i) g[i] = static_cast<float>(rank + 1 + i % 3 + t);
      w.push_pull(0, t).wait(o.timeout_ms);
      const int s = p1 * (p1 + 1) / 2;
      for (size_t i = 0; i < kFloats; ++i) {
        if (g[i] != static_cast<float>(s + p1 * static_cast<int>(i % 3 + t))) {
          ++wrong;
          break;
        }
      }
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.coordinator_error(), std::string());
  CHECK_EQ(wrong.load(), 0);
}

}  // namespace

TEST(ps_100mb_tcp_1x1) { run("tcp", 1, 1); }
TEST(ps_100mb_tcp_2x3) { run("tcp", 2, 3); }
TEST(ps_100mb_inproc_4x2) { run("inproc", 4, 2); }

TEST_MAIN()
