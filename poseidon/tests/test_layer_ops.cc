// KVWorker and SFBroadcaster sequence their layers' operations alike
// (layer_ops.h): one operation in flight per layer, iterations consecutive,
// and the same words when a caller breaks either rule.

#include "check.h"
#include "cluster.h"

using namespace poseidon;

TEST(push_pull_and_allgather_refuse_the_same_misuse_in_the_same_words) {
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 1;
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, 64), ptest::sfb_layer(1)});
    std::vector<float> grad(64, 1.0f);
    std::vector<float> factor(16, 1.0f);
    w.register_layer(0, grad.data(), grad.size());
    w.register_sfb_layer(1, factor.size());
    if (rank == 1) w.barrier("checked", o.timeout_ms);  // worker 0's rounds stay open till then
    Handle pushed = w.push_pull(0, 0);
    Handle gathered = w.allgather(1, 0, factor.data(), factor.size());
    if (rank == 0) {
      const char* in_flight = "while iteration 0 is still in flight (wait for its handle first)";
      CHECK_THROWS(w.push_pull(0, 1), ConfigError, in_flight);
      CHECK_THROWS(w.allgather(1, 1, factor.data(), factor.size()), ConfigError, in_flight);
      w.barrier("checked", o.timeout_ms);
    }
    pushed.wait(o.timeout_ms);
    gathered.wait(o.timeout_ms);
    const char* gap = "follows iteration 0: a layer's iterations must be consecutive";
    CHECK_THROWS(w.push_pull(0, 5), ConfigError, gap);
    CHECK_THROWS(w.allgather(1, 5, factor.data(), factor.size()), ConfigError, gap);
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
}

TEST_MAIN()
