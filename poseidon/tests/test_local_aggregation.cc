// Several workers per machine (cost_model.h, Note [local aggregation]): only
// the machines' leaders (ranks 0, G, 2G, ...) push to the shards and send
// factors; the shards answer after one push per machine. A non-leader's
// push_pull or allgather is refused before anything is sent, a shard refuses
// a push from a non-leader that reaches it anyway, and the cost model's
// network columns are the flat ones of Pm machines with G·K rows each.

#include <atomic>
#include <cmath>

#include "check.h"
#include "cluster.h"
#include "poseidon/cost_model.h"
#include "poseidon/internal/frame.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/messages.h"
#include "raw_frames.h"
#include "stderr_capture.h"

using namespace poseidon;

namespace {

constexpr size_t kChunkBytes = 4096;
constexpr size_t kFloats = 3000;  // several chunks over two shards
constexpr int kIterations = 3;

// What worker r puts in its range at iteration t (a leader: its machine's sum, as far as
// the core can tell).
float value(int rank, size_t i, int64_t t) {
  return static_cast<float>((rank + 1) * (1 + static_cast<int>(i % 7)) + t);
}

ptest::ClusterOptions two_by_two() {
  ptest::ClusterOptions o;
  o.workers = 4;
  o.servers = 2;
  o.workers_per_machine = 2;
  o.chunk_bytes = kChunkBytes;
  o.scheme = SchemeChoice::kPS;
  return o;
}

}  // namespace

TEST(leaders_alone_push_and_each_round_sums_one_push_per_machine) {
  ptest::ClusterOptions o = two_by_two();
  ptest::LocalCluster cluster(o);
  std::atomic<int> wrong{0};
  std::vector<std::string> refusals(4);
  std::vector<uint64_t> sent(4, 0);
  const auto errors = cluster.run_workers([&](Worker& w, int r) {
    const Plan& plan = w.plan({ptest::ps_layer(1, kFloats)});
    CHECK_EQ(plan.workers_per_machine, 2);
    CHECK_EQ(plan.num_machines(), 2);
    CHECK_EQ(plan.is_leader(r), r % 2 == 0);
    std::vector<float> grad(kFloats);
    w.register_layer(1, grad.data(), grad.size());
    for (int64_t t = 0; t < kIterations; ++t) {
      if (r % 2 != 0) {
        try {
          w.push_pull(1, t);
        } catch (const ConfigError& e) {
          refusals[static_cast<size_t>(r)] = e.what();
        }
        continue;
      }
      for (size_t i = 0; i < kFloats; ++i) grad[i] = value(r, i, t);
      w.push_pull(1, t).wait(o.timeout_ms);
      for (size_t i = 0; i < kFloats; ++i) {
        if (grad[i] != value(0, i, t) + value(2, i, t)) ++wrong;
      }
    }
    sent[static_cast<size_t>(r)] = w.traffic()[1].bytes_sent;
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, "");
  CHECK_EQ(wrong.load(), 0);
  CHECK_CONTAINS(refusals[1], "only each machine's leader pushes to the shards");
  CHECK_CONTAINS(refusals[3], "machine 1's is worker 2");
  // The network carries the leaders' bytes alone.
  CHECK_EQ(sent[0], uint64_t{kFloats} * 4 * kIterations);
  CHECK_EQ(sent[1], 0u);
  CHECK_EQ(sent[3], 0u);
}

TEST(factors_go_between_leaders) {
  ptest::ClusterOptions o = two_by_two();
  o.scheme = SchemeChoice::kSFB;
  ptest::LocalCluster cluster(o);
  std::vector<std::string> refusals(4);
  std::atomic<int> wrong{0};
  const auto errors = cluster.run_workers([&](Worker& w, int r) {
    w.plan({ptest::fc_layer(1, 8, 6, 4)});
    // A machine's factors: its two workers' rows, so twice one worker's capacity.
    w.register_sfb_layer(1, 2 * 4 * 14);
    for (int64_t t = 0; t < kIterations; ++t) {
      std::vector<float> mine(static_cast<size_t>(14 * (r + 1)), static_cast<float>(r + t));
      if (r % 2 != 0) {
        try {
          w.allgather(1, t, mine.data(), mine.size());
        } catch (const ConfigError& e) {
          refusals[static_cast<size_t>(r)] = e.what();
        }
        continue;
      }
      w.allgather(1, t, mine.data(), mine.size()).wait(o.timeout_ms);
      for (int leader : {0, 2}) {
        const FactorView f = w.factor(1, t, leader);
        if (f.num_floats != static_cast<size_t>(14 * (leader + 1))) ++wrong;
        for (size_t i = 0; i < f.num_floats; ++i) {
          if (f.data[i] != static_cast<float>(leader + t)) ++wrong;
        }
      }
      try {
        w.factor(1, t, 1);
        ++wrong;
      } catch (const ConfigError& e) {
        CHECK_CONTAINS(std::string(e.what()), "only machines' leaders send factors");
      }
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, "");
  CHECK_EQ(wrong.load(), 0);
  CHECK_CONTAINS(refusals[1], "only each machine's leader sends factors");
}

TEST(a_shard_refuses_a_push_from_a_worker_that_is_no_leader) {
  ptest::ClusterOptions o = two_by_two();
  ptest::StderrCapture capture;
  ptest::LocalCluster cluster(o);
  std::string answered;
  const auto errors = cluster.run_workers([&](Worker& w, int r) {
    w.plan({ptest::ps_layer(1, kFloats)});
    if (r == 1) {
      // Worker 1's second connection (it proves the token) pushes chunk 0 of layer 1.
      auto transport = make_transport("tcp");
      auto c = transport->connect(cluster.server(0).address(), Deadline::after_ms(5000));
      client_handshake(*c, NodeId{Role::kWorker, 1, "abuser"}, o.token, Deadline::after_ms(5000));
      FrameHeader h;
      h.type = FrameType::kPush;
      h.layer = 1;
      h.chunk = 0;
      h.iteration = 0;
      h.payload_bytes = kChunkBytes;
      h.sender_role = Role::kWorker;
      h.sender_rank = 1;
      const auto hb = header_bytes(h);
      std::vector<uint8_t> payload(kChunkBytes, 0);
      c->write_frame(hb.data(), hb.size(), payload.data(), payload.size(),
                     Deadline::after_ms(5000));
      answered = answer(*c);
    }
    w.barrier("pushed", o.timeout_ms);
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  capture.finish();
  for (const std::string& e : errors) CHECK_EQ(e, "");
  CHECK_CONTAINS(answered, "worker 1 is not its machine's leader");
  CHECK_CONTAINS(answered, "machine 0 pushes through worker 0");
  CHECK_EQ(cluster.server(0).stats().frames_rejected, 1u);
}

TEST(the_cost_model_counts_machines_on_the_network_and_the_local_stage_inside) {
  // 4 machines of 4 workers against 16 machines of 1: PS moves what 4 workers would.
  const CommCost local = comm_cost(4096, 25088, 32, 16, 4, 4);
  const CommCost four = comm_cost(4096, 25088, 32, 4, 4);
  CHECK_EQ(local.ps_colocated_floats, four.ps_colocated_floats);
  CHECK_EQ(local.ps_server_floats, four.ps_server_floats);
  // SFB: each machine sends its 4·32 rows to 3 machines and receives theirs.
  CHECK_EQ(local.sfb_floats, comm_cost(4096, 25088, 4 * 32, 4, 4).sfb_floats);
  CHECK_EQ(local.ps_local_floats, 4.0 * 4096 * 25088 * 3 / 4);
  CHECK_EQ(local.sfb_local_floats, 32.0 * (4096 + 25088) * 4 * 3);
  const CommCost flat = comm_cost(4096, 25088, 32, 16, 16);
  CHECK_EQ(flat.ps_local_floats, 0.0);
  CHECK_EQ(flat.sfb_local_floats, 0.0);
  CHECK_THROWS(comm_cost(10, 10, 1, 6, 2, 4), ConfigError, "G a divisor of P1");
  // The time model: the local stage at its rate, on top of the wire.
  Rates rates;
  rates.link_bytes_per_s = 2.5e9;
  rates.local_bytes_per_s = 1e11;
  const SchemeEstimate ps = estimate_scheme(Scheme::kPS, LayerKind::kFullyConnected, 4096, 25088,
                                            32, 16, 4, 4, 4096 * 25088, rates, {}, 4);
  CHECK_EQ(ps.local_bytes, 4.0 * local.ps_local_floats);
  CHECK(std::abs(ps.local_s - ps.local_bytes / 1e11) < 1e-12);
  CHECK(std::abs(ps.seconds - (ps.wire_s + ps.local_s)) < 1e-12);
  // SFB's rebuild still covers every worker's rows: 2·M·N·K·(P1−1) flops.
  const SchemeEstimate sfb = estimate_scheme(Scheme::kSFB, LayerKind::kFullyConnected, 4096, 25088,
                                             32, 16, 4, 4, 4096 * 25088, rates, {}, 4);
  CHECK_EQ(sfb.flops, 2.0 * 4096 * 25088 * 32 * 15);
}

TEST(a_plan_of_machines_picks_as_the_flat_plan_of_their_leaders) {
  // VGG's fc6 at K = 32: on 16 flat workers SFB loses to PS; on 4 machines of 4 the
  // network sees 4 pushers of 128 rows each, and the pick follows those numbers.
  const LayerSpec fc6 = ptest::fc_layer(1, 4096, 25088, 32);
  const Plan local = make_plan({fc6}, 16, 4, kDefaultChunkBytes, SchemeChoice::kAuto,
                               Compression::kNone, kDefaultPowerSGDRank, {}, 4);
  const CommCost c = comm_cost(4096, 25088, 32, 16, 4, 4);
  const Scheme want = c.sfb_floats <= c.ps_colocated_floats ? Scheme::kSFB : Scheme::kPS;
  CHECK(local.layers[0].scheme == want);
  CHECK_EQ(local.num_machines(), 4);
  CHECK_THROWS(make_plan({fc6}, 6, 2, kDefaultChunkBytes, SchemeChoice::kAuto, Compression::kNone,
                         kDefaultPowerSGDRank, {}, 4),
               ConfigError, "workers_per_machine=4");
  Config bad;
  bad.token = "t";
  bad.num_workers = 6;
  bad.workers_per_machine = 4;
  CHECK_THROWS(bad.validate(), ConfigError, "want a divisor of num_workers=6");
}

TEST_MAIN()
