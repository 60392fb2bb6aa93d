// KVWorker and SFBroadcaster sequence their layers' operations alike
// (internal/layer_ops.h): one operation in flight per layer, iterations consecutive,
// and the same words when a caller breaks either rule. They keep their layers
// alike too (internal/layer_table.h), each in the words of its own Worker call.

#include <memory>
#include <mutex>
#include <string>

#include "check.h"
#include "cluster.h"
#include "poseidon/internal/layer_table.h"

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

namespace {

struct TableLayer {
  const LayerPlan* plan = nullptr;
  LayerCounters* counters = nullptr;
  std::mutex mu;
  LayerOps ops;
  int set_by_init = 0;
};

}  // namespace

TEST(layer_tables_register_and_look_up_in_the_words_of_each_scheme) {
  CounterTable counters;
  DataPlane plane;
  plane.self = NodeId{Role::kWorker, 0, "here"};
  plane.plan = make_plan({ptest::ps_layer(0, 64), ptest::sfb_layer(1)}, 2, 1, kDefaultChunkBytes,
                         SchemeChoice::kAuto);
  plane.abort = std::make_shared<AbortSignal>();
  plane.counters = &counters;
  plane.timeout_ms = 50;
  REQUIRE(plane.plan.find(0)->scheme == Scheme::kPS);
  REQUIRE(plane.plan.find(1)->scheme == Scheme::kSFB);
  LayerTable<TableLayer> ps(plane, Scheme::kPS);
  LayerTable<TableLayer> sfb(plane, Scheme::kSFB);
  const auto nothing = [](TableLayer&, const std::string&) {};

  CHECK_THROWS(ps.add(9, nothing), ConfigError,
               "worker 0 (here): register_layer(9): layer is not in the plan");
  CHECK_THROWS(sfb.add(9, nothing), ConfigError,
               "worker 0 (here): register_sfb_layer(9): layer is not in the plan");
  CHECK_THROWS(ps.add(1, nothing), ConfigError,
               "worker 0 (here): register_layer(1): layer fc1 is synchronised by SFB in the plan; "
               "use register_sfb_layer");
  CHECK_THROWS(sfb.add(0, nothing), ConfigError,
               "worker 0 (here): register_sfb_layer(0): layer layer0 is synchronised by the PS in "
               "the plan; use register_layer");
  // A failed init adds nothing (and counts nothing).
  const auto refuse = [](TableLayer&, const std::string& who) { throw ConfigError(who + ": no"); };
  CHECK_THROWS(ps.add(0, refuse), ConfigError, "worker 0 (here): register_layer(0): no");
  CHECK(ps.find(0) == nullptr);
  CHECK(counters.snapshot().empty());

  TableLayer& added = ps.add(0, [](TableLayer& l, const std::string&) { l.set_by_init = 7; });
  CHECK(ps.find(0) == &added);
  CHECK(added.plan == plane.plan.find(0));
  CHECK(added.counters == &counters.get(0));
  CHECK_EQ(added.set_by_init, 7);
  CHECK_THROWS(ps.add(0, nothing), ConfigError,
               "worker 0 (here): register_layer(0): layer registered twice");

  const auto use = ps.use("push_pull", 0, 3);
  CHECK(&use.layer == &added);
  CHECK_EQ(use.what, std::string("push_pull of layer 0 (layer0) iteration 3"));
  CHECK_THROWS(sfb.use("allgather", 1, 4), ConfigError,
               "worker 0 (here): allgather of layer 1 iteration 4: layer not registered");
  CHECK_THROWS(ps.use("push_pull", 5, 4, "layer not registered (register_layer)"), ConfigError,
               "worker 0 (here): push_pull of layer 5 iteration 4: layer not registered "
               "(register_layer)");
  CHECK(ps.wait(0, "a reply") == &added);
  CHECK_THROWS(sfb.wait(1, "factor from worker 1"), TimeoutError,
               "worker 0 (here): factor from worker 1: layer 1 was not registered here "
               "(register_sfb_layer) within 50 ms");

  // pending() names unfinished operations; fail_all() fails them.
  CHECK_EQ(ps.pending(), std::string());
  auto op =
      std::make_shared<OpState>(use.what, 0, 3, "chunks", std::vector<std::string>{"server 0"}, 1,
                                plane.abort, "worker 0 (here)");
  {
    std::lock_guard<std::mutex> lock(added.mu);
    added.ops.start(op, 3);
  }
  CHECK_EQ(ps.pending(), use.what);
  ps.fail_all(Failure{"server 0", "gone"});
  CHECK(op->finished());
  CHECK_EQ(ps.pending(), std::string());
  CHECK(!plane.abort->tripped());
  // An abort ends a wait for a registration still to come.
  plane.abort->trip(Failure{"worker 1", "died"});
  CHECK(sfb.wait(1, "factor from worker 1") == nullptr);
}

TEST_MAIN()
