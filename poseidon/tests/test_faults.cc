// Faults inside one process: a worker that disappears mid-round, a shard
// that aborts, a wait that times out, workers that disagree (layers,
// barriers), a wrong token, a duplicate rank, an explicit abort. In each
// case every other node must stop promptly with a message naming the peer
// at the origin and, on workers, the layer and iteration they waited on.
// (Real processes killed with SIGKILL: tests/poseidon/test_faults.py.)

#include <atomic>
#include <chrono>

#include "check.h"
#include "cluster.h"

using namespace poseidon;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ptest::ClusterOptions options(const std::string& transport, int workers, int servers) {
  ptest::ClusterOptions o;
  o.workers = workers;
  o.servers = servers;
  o.transport = transport;
  o.chunk_bytes = 4096;
  o.timeout_ms = 8000;
  return o;
}

}  // namespace

TEST(worker_disappears_mid_round) {
  for (const std::string transport : {"inproc", "tcp"}) {
    auto o = options(transport, 3, 2);
    ptest::LocalCluster cluster(o);
    const auto t0 = Clock::now();
    std::vector<std::string> caught(3);
    const auto errors = cluster.run_workers([&](Worker& w, int rank) {
      w.plan({ptest::ps_layer(0, 5000), ptest::ps_layer(1, 10)});
      std::vector<float> a(5000), b(10);
      w.register_layer(0, a.data(), a.size());
      w.register_layer(1, b.data(), b.size());
      for (int64_t t = 0; t < 3; ++t) {
        if (rank == 2 && t == 2) {
          // Leave while the others wait on iteration 2: the Worker is
          // destroyed without shutdown(), like a crashed process.
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          return;
        }
        Handle h1 = w.push_pull(1, t);
        Handle h0 = w.push_pull(0, t);
        try {
          h1.wait(o.timeout_ms);
          h0.wait(o.timeout_ms);
        } catch (const PeerFailure& e) {
          caught[static_cast<size_t>(rank)] = e.what();
          CHECK_CONTAINS(e.peer(), "worker 2");
          CHECK_EQ(e.iteration(), int64_t{2});
          throw;
        }
      }
    });
    cluster.join();
    CHECK(seconds_since(t0) < 5.0);
    for (int r = 0; r < 2; ++r) {
      CHECK_CONTAINS(errors[static_cast<size_t>(r)], "iteration 2 failed");
      CHECK_CONTAINS(errors[static_cast<size_t>(r)], "worker 2");
      CHECK_CONTAINS(caught[static_cast<size_t>(r)], "layer 1 (layer1)");
    }
    CHECK_EQ(errors[2], std::string());
    CHECK_CONTAINS(cluster.coordinator_error(), "job aborted: worker 2");
    for (int s = 0; s < 2; ++s) {
      CHECK_CONTAINS(cluster.server_error(s), "worker 2");
      // The shards say which round was left hanging.
      CHECK_CONTAINS(cluster.server_error(s), "iteration 2");
    }
  }
}

TEST(server_abort_reaches_every_worker) {
  auto o = options("tcp", 2, 2);
  ptest::LocalCluster cluster(o);
  std::atomic<int> started{0};
  std::thread killer([&] {
    while (started.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    cluster.server(1).abort("disk on fire");
  });
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, 100000)});
    std::vector<float> a(100000);
    w.register_layer(0, a.data(), a.size());
    for (int64_t t = 0;; ++t) {
      if (t == 2) ++started;
      // Worker 1 lags, so rounds stay open when the shard goes down.
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      w.push_pull(0, t).wait(o.timeout_ms);
    }
  });
  killer.join();
  cluster.join();
  for (const std::string& e : errors) {
    CHECK_CONTAINS(e, "disk on fire");
    CHECK_CONTAINS(e, "push_pull of layer 0 (layer0) iteration");
  }
  CHECK_CONTAINS(cluster.server_error(1), "disk on fire");
  CHECK_CONTAINS(cluster.server_error(0), "disk on fire");
  CHECK_CONTAINS(cluster.coordinator_error(), "disk on fire");
}

TEST(wait_timeout_names_missing_chunks_and_aborts_everyone) {
  auto o = options("inproc", 2, 1);
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(7, 10)});
    std::vector<float> a(10);
    w.register_layer(7, a.data(), a.size());
    if (rank == 0) {
      CHECK_THROWS(w.push_pull(7, 0).wait(300), TimeoutError, "missing: chunks 0 from server 0");
      return;
    }
    // Worker 1 never pushes; the timeout on worker 0 aborts the job, and
    // worker 1 learns it at its next call.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    CHECK_THROWS(w.push_pull(7, 0), PeerFailure, "timed out after 300 ms");
  });
  cluster.join();
  CHECK_EQ(errors[0], std::string());
  CHECK_EQ(errors[1], std::string());
  CHECK_CONTAINS(cluster.coordinator_error(),
                 "push_pull of layer 7 (layer7) iteration 0 timed out");
  CHECK_CONTAINS(cluster.server_error(0), "timed out");
}

TEST(workers_must_declare_the_same_layers) {
  auto o = options("inproc", 2, 1);
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers(
      [&](Worker& w, int rank) { w.plan({ptest::ps_layer(0, rank == 0 ? 100 : 101)}); });
  cluster.join();
  for (const std::string& e : errors) {
    CHECK_CONTAINS(e, "layer mismatch: worker 1");
    CHECK_CONTAINS(e, "101 floats");
  }
  CHECK_CONTAINS(cluster.coordinator_error(), "layer mismatch");
}

TEST(barriers_must_match) {
  auto o = options("inproc", 2, 1);
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.barrier("start", o.timeout_ms);
    w.barrier(rank == 0 ? "epoch-1" : "epoch-2", o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_CONTAINS(e, "barrier mismatch");
  CHECK_CONTAINS(cluster.coordinator_error(), "as barrier #2");
}

TEST(wrong_token_is_refused_and_rendezvous_times_out) {
  auto o = options("tcp", 2, 1);
  o.timeout_ms = 1500;
  o.worker_config = [](Config& c, int rank) {
    if (rank == 1) c.token = "guess";
  };
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker&, int) {});
  cluster.join();
  CHECK_CONTAINS(errors[1], "rejected the handshake: wrong cluster token");
  CHECK_CONTAINS(errors[0], "rendezvous timed out");
  CHECK_CONTAINS(cluster.coordinator_error(), "never registered: worker 1");
  CHECK_CONTAINS(cluster.server_error(0), "rendezvous timed out");
}

TEST(duplicate_rank_is_refused) {
  auto o = options("inproc", 2, 1);
  o.timeout_ms = 1500;
  o.worker_config = [](Config& c, int) { c.rank = 0; };
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker&, int) {});
  cluster.join();
  const std::string both = errors[0] + " | " + errors[1];
  // Refused at the handshake either way: already registered, or still
  // registering from the first connection when the second one asks.
  CHECK_CONTAINS(both, "rejected the handshake: worker 0 is ");
  CHECK(both.find("already registered from") != std::string::npos ||
        both.find("registering from another connection") != std::string::npos);
}

TEST(explicit_abort_carries_the_reason) {
  auto o = options("inproc", 3, 1);
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, 10)});
    std::vector<float> a(10);
    w.register_layer(0, a.data(), a.size());
    w.push_pull(0, 0).wait(o.timeout_ms);
    if (rank == 1) {
      w.abort("CUDA out of memory in conv3");
      return;
    }
    w.push_pull(0, 1).wait(o.timeout_ms);
  });
  cluster.join();
  CHECK_CONTAINS(errors[0], "worker 1 (");
  CHECK_CONTAINS(errors[0], "aborted the job: CUDA out of memory in conv3");
  CHECK_CONTAINS(errors[2], "CUDA out of memory in conv3");
  CHECK_CONTAINS(cluster.coordinator_error(), "CUDA out of memory in conv3");
}

// A colocated worker whose range its shard is summing into aborts, or
// vanishes (destroyed without shutdown), mid-round: every other node stops
// with the reason. The range is freed the moment ~Worker returns, so a use
// by the shard after that (internal/colocated.h, Note [lending]) would show under
// AddressSanitizer; test_colocated checks the revoke mechanism itself.
TEST(colocated_worker_fails_while_its_range_is_summed_into) {
  for (const bool vanish : {false, true}) {
    auto o = options("tcp", 3, 3);
    ptest::LocalCluster cluster(o);
    const auto t0 = Clock::now();
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 3; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          // Declared before the worker: freed the moment ~Worker returns.
          auto grad = std::make_unique<std::vector<float>>(200000, 1.0f);
          Config c = ptest::make_config(o, Role::kWorker, rank, cluster.coordinator_address());
          c.local_server = cluster.server(rank).local_address();
          Worker w(c);
          w.connect();
          w.plan({ptest::ps_layer(0, 200000)});  // 49 chunks of 4 KiB over 3 shards
          w.register_layer(0, grad->data(), grad->size());
          for (int64_t t = 0; t < 4; ++t) {
            Handle h = w.push_pull(0, t);
            if (rank == 0 && t == 2) {
              if (!vanish) {
                w.abort("out of memory in fc6");
                CHECK_THROWS(h.wait(o.timeout_ms), PeerFailure, "out of memory in fc6");
              }
              return;  // ~Worker, then ~grad
            }
            h.wait(o.timeout_ms);
            std::fill(grad->begin(), grad->end(), 1.0f);
          }
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(rank)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    cluster.join();
    CHECK(seconds_since(t0) < 5.0);
    CHECK_EQ(errors[0], std::string());
    for (int r = 1; r < 3; ++r) {
      // Iteration 1 or 2: worker 0 may be one ahead of the others' last reads.
      CHECK_CONTAINS(errors[static_cast<size_t>(r)], "push_pull of layer 0 (layer0) iteration ");
      CHECK_CONTAINS(errors[static_cast<size_t>(r)], vanish ? "worker 0" : "out of memory in fc6");
    }
    for (int s = 0; s < 3; ++s) {
      CHECK_CONTAINS(cluster.server_error(s), vanish ? "worker 0" : "out of memory in fc6");
    }
  }
}

TEST(api_misuse_is_caught_before_sending) {
  auto o = options("inproc", 1, 1);
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int) {
    CHECK_THROWS(w.push_pull(0, 0), ConfigError, "too early");
    w.plan({ptest::ps_layer(0, 10), ptest::ps_layer(1, 10)});
    std::vector<float> a(10);
    CHECK_THROWS(w.register_layer(0, a.data(), 9), ConfigError, "declared with 10");
    CHECK_THROWS(w.register_layer(5, a.data(), 10), ConfigError, "not in the plan");
    CHECK_THROWS(w.register_sfb_layer(0, 10), ConfigError, "use register_layer");
    w.register_layer(0, a.data(), 10);
    CHECK_THROWS(w.register_layer(0, a.data(), 10), ConfigError, "registered twice");
    CHECK_THROWS(w.push_pull(1, 0), ConfigError, "not registered");
    w.push_pull(0, 4).wait(o.timeout_ms);
    CHECK_THROWS(w.push_pull(0, 6), ConfigError, "must be consecutive");
    w.shutdown(o.timeout_ms);
    CHECK_THROWS(w.push_pull(0, 5), ConfigError, "after shutdown");
  });
  cluster.join();
  CHECK_EQ(errors[0], std::string());
  CHECK_EQ(cluster.coordinator_error(), std::string());
}

TEST_MAIN()
