// Closed-form sums through the parameter server: worker r fills its range
// with (r+1)·(1 + i mod 5) + t at iteration t, so after push_pull every
// worker must hold (1 + i mod 5)·P1(P1+1)/2 + P1·t at every index i, for
// 1–4 workers × 1–3 shards, over TCP and in-process, with tensors of 0, 1,
// chunk−1, chunk+1 and many chunks, several iterations in a row.

#include <cmath>
#include <random>

#include "check.h"
#include "cluster.h"

using namespace poseidon;

namespace {

constexpr size_t kChunkBytes = 4096;  // small: many chunks, fast
constexpr size_t kChunkFloats = kChunkBytes / 4;
constexpr int kIterations = 3;

float pushed(int rank, size_t i, int64_t t) {
  return static_cast<float>((rank + 1) * (1 + static_cast<int>(i % 5)) + t);
}

float expected(int p1, size_t i, int64_t t) {
  return static_cast<float>((1 + static_cast<int>(i % 5)) * p1 * (p1 + 1) / 2 + p1 * t);
}

// Returns "" or the first mismatch.
std::string check_sum(const std::vector<float>& v, int p1, int64_t t, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != expected(p1, i, t)) {
      return what + " index " + std::to_string(i) + ": got " + std::to_string(v[i]) + ", want " +
             std::to_string(expected(p1, i, t));
    }
  }
  return "";
}

// colocate: worker r reaches shard r through the in-process door
// (Config::local_server), the others over `transport`.
void run_one(const std::string& transport, int p1, int p2, bool colocate);

void run_matrix(const std::string& transport) {
  for (int p1 = 1; p1 <= 4; ++p1) {
    for (int p2 = 1; p2 <= 3; ++p2) run_one(transport, p1, p2, false);
  }
}

void run_one(const std::string& transport, int p1, int p2, bool colocate) {
  const std::vector<size_t> sizes = {0, 1, kChunkFloats - 1, kChunkFloats + 1,
                                     10 * kChunkFloats + 3};
  {
    {
      ptest::ClusterOptions o;
      o.workers = p1;
      o.servers = p2;
      o.transport = transport;
      o.chunk_bytes = kChunkBytes;
      ptest::LocalCluster* self = nullptr;
      if (colocate) {
        o.worker_config = [&self](Config& c, int rank) {
          if (rank < c.num_servers) c.local_server = self->server(rank).local_address();
        };
      }
      ptest::LocalCluster cluster(o);
      self = &cluster;
      std::mutex mu;
      std::vector<std::string> mismatches;
      const auto errors = cluster.run_workers([&](Worker& w, int rank) {
        std::vector<LayerSpec> specs;
        for (size_t l = 0; l < sizes.size(); ++l) {
          specs.push_back(ptest::ps_layer(static_cast<uint32_t>(l), sizes[l]));
        }
        const Plan& plan = w.plan(specs);
        std::vector<std::vector<float>> grads;
        for (size_t l = 0; l < sizes.size(); ++l) grads.emplace_back(sizes[l]);
        for (size_t l = 0; l < sizes.size(); ++l) {
          w.register_layer(static_cast<uint32_t>(l), grads[l].data(), grads[l].size());
        }
        for (int64_t t = 0; t < kIterations; ++t) {
          std::vector<Handle> hs;
          // Highest layer first, as backward produces them.
          for (size_t l = sizes.size(); l-- > 0;) {
            for (size_t i = 0; i < grads[l].size(); ++i) grads[l][i] = pushed(rank, i, t);
            hs.push_back(w.push_pull(static_cast<uint32_t>(l), t));
          }
          for (Handle& h : hs) h.wait(o.timeout_ms);
          for (size_t l = 0; l < sizes.size(); ++l) {
            const std::string bad =
                check_sum(grads[l], p1, t,
                          transport + " P1=" + std::to_string(p1) + " P2=" + std::to_string(p2) +
                              " layer " + std::to_string(l) + " t=" + std::to_string(t));
            if (!bad.empty()) {
              std::lock_guard<std::mutex> lock(mu);
              mismatches.push_back(bad);
            }
          }
        }
        // Counters: every layer sent and received exactly its bytes per iteration.
        const auto traffic = w.traffic();
        for (size_t l = 0; l < sizes.size(); ++l) {
          const LayerTraffic& tr = traffic.at(static_cast<uint32_t>(l));
          if (tr.bytes_sent != sizes[l] * 4 * kIterations ||
              tr.bytes_received != sizes[l] * 4 * kIterations) {
            std::lock_guard<std::mutex> lock(mu);
            mismatches.push_back("traffic of layer " + std::to_string(l) + ": " +
                                 std::to_string(tr.bytes_sent) + "/" +
                                 std::to_string(tr.bytes_received));
          }
        }
        CHECK_EQ(plan.layers.size(), sizes.size());
        w.shutdown(o.timeout_ms);
      });
      cluster.join();
      for (const std::string& e : errors) CHECK_EQ(e, std::string());
      CHECK_EQ(cluster.coordinator_error(), std::string());
      for (int s = 0; s < p2; ++s) CHECK_EQ(cluster.server_error(s), std::string());
      for (const std::string& m : mismatches) CHECK_EQ(m, std::string());
      // Every chunk of every layer made one round per iteration on some shard.
      uint64_t rounds = 0;
      uint64_t in_place = 0;
      for (int s = 0; s < p2; ++s) {
        rounds += cluster.server(s).stats().rounds_completed;
        in_place += cluster.server(s).stats().rounds_in_place;
      }
      uint64_t chunks = 0;
      uint64_t colocated_chunks = 0;  // owned by a shard that has a worker beside it
      const std::optional<Plan> plan = cluster.coordinator().plan();
      REQUIRE(plan.has_value());
      for (const LayerPlan& l : plan->layers) {
        chunks += l.num_chunks;
        for (uint32_t c = 0; c < l.num_chunks; ++c) colocated_chunks += plan->shard_of(l, c) < p1;
      }
      CHECK_EQ(rounds, chunks * kIterations);
      // Colocated, those rounds ran in place (kv_server.h, Note [in-place rounds]).
      CHECK_EQ(in_place, colocate ? colocated_chunks * kIterations : 0);
    }
  }
}

}  // namespace

TEST(ps_sums_inproc) { run_matrix("inproc"); }
TEST(ps_sums_tcp) { run_matrix("tcp"); }

// The paper's colocated layout: each worker hosts a shard in its process and
// reaches it in-process, the other shards over TCP.
TEST(ps_sums_colocated_shards) {
  for (int p = 1; p <= 3; ++p) run_one("tcp", p, p, true);
  run_one("tcp", 3, 2, true);  // fewer shards than workers: worker 2 hosts none
}

// In place, the colocated worker's announcement may come first, last or
// between the others' pushes, even while some of them are still being read
// into the shard's sum buffer. Worker 0 announces its chunks only once shard 0
// has read every other worker's pushes (the merge path, deterministic), then
// the workers start each iteration after a random pause; every sum must be
// right and the same on every worker.
TEST(in_place_rounds_in_any_arrival_order) {
  constexpr int kWorkers = 3;
  // 7 chunks at the chunk size, rounded up to 9 over 3 shards (plan.h, Note [chunk layout])
  constexpr size_t kFloats = 6 * kChunkFloats + 5;
  constexpr int kRounds = 20;
  ptest::ClusterOptions o;
  o.workers = kWorkers;
  o.servers = kWorkers;
  o.transport = "tcp";
  o.chunk_bytes = kChunkBytes;
  ptest::LocalCluster* self = nullptr;
  o.worker_config = [&self](Config& c, int rank) {
    c.local_server = self->server(rank).local_address();
  };
  ptest::LocalCluster cluster(o);
  self = &cluster;
  std::mutex mu;
  std::vector<std::string> mismatches;
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    const Plan& plan = w.plan({ptest::ps_layer(0, kFloats)});
    uint64_t shard0_bytes = 0;  // what one other worker pushes to shard 0 per iteration
    for (uint32_t c = 0; c < plan.layers[0].num_chunks; ++c) {
      if (plan.shard_of(plan.layers[0], c) == 0) shard0_bytes += plan.layers[0].chunk_length(c) * 4;
    }
    std::vector<float> grad(kFloats);
    w.register_layer(0, grad.data(), grad.size());
    std::minstd_rand rng(static_cast<unsigned>(rank) + 1);
    for (int64_t t = 0; t < kRounds; ++t) {
      for (size_t i = 0; i < kFloats; ++i) grad[i] = pushed(rank, i, t);
      if (t == 0 && rank == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (cluster.server(0).stats().bytes_received < (kWorkers - 1) * shard0_bytes &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      } else if (t > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      }
      w.push_pull(0, t).wait(o.timeout_ms);
      const std::string bad = check_sum(
          grad, kWorkers, t, "worker " + std::to_string(rank) + " t=" + std::to_string(t));
      if (!bad.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        mismatches.push_back(bad);
      }
      w.barrier("checked " + std::to_string(t), o.timeout_ms);
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  for (const std::string& m : mismatches) CHECK_EQ(m, std::string());
  uint64_t in_place = 0;
  for (int s = 0; s < kWorkers; ++s) in_place += cluster.server(s).stats().rounds_in_place;
  CHECK_EQ(in_place, uint64_t{9} * kRounds);
  // Shard 0's first rounds had every other push in its sum buffer first.
  CHECK(cluster.server(0).stats().sums_merged >= 3);
}

// A small layer queued after a big one overtakes it: with one comm thread and
// the big layer's chunks already queued, the small layer's push completes
// while most of the big layer is still waiting.
TEST(priority_small_layer_overtakes_big_one) {
  ptest::ClusterOptions o;
  o.workers = 1;
  o.servers = 1;
  o.transport = "tcp";
  o.chunk_bytes = 64 << 10;
  o.comm_threads = 1;
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int) {
    const size_t big = 64 << 20 >> 2;  // 64 MiB: 1024 chunks
    w.plan({ptest::ps_layer(0, 16), ptest::ps_layer(9, big)});
    std::vector<float> small(16, 1.0f), large(big, 1.0f);
    w.register_layer(0, small.data(), small.size());
    w.register_layer(9, large.data(), large.size());
    Handle hb = w.push_pull(9, 0);
    Handle hs = w.push_pull(0, 0);
    hs.wait(o.timeout_ms);
    // The small layer is done; the big one cannot be, 1024 chunks later.
    CHECK(!hb.test());
    hb.wait(o.timeout_ms);
    CHECK_EQ(small[3], 1.0f);
    CHECK_EQ(large[big - 1], 1.0f);
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
}

TEST_MAIN()
