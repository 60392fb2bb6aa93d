// The lossy schemes end to end (issue 22): BF16 push-pull over TCP and with
// colocated shards — every worker ends with bf16(fp32 sum of the bf16-rounded
// inputs), bit for bit, and the counters show 2 bytes per float; PowerSGD's
// two parts summed over several iterations, each part alone, and a layer's
// (iteration, part) order enforced; and a shard refusing bad 16-bit and
// PowerSGD pushes (type, length, chunk out of range, odd payload) while the
// real workers' rounds go on.

#include <atomic>
#include <cmath>
#include <cstring>

#include "check.h"
#include "cluster.h"
#include "poseidon/internal/bf16.h"
#include "poseidon/internal/frame.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/messages.h"
#include "raw_frames.h"

using namespace poseidon;

namespace {

constexpr size_t kChunkBytes = 4096;  // 1024 floats a chunk: many chunks, fast
constexpr int kIterations = 3;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

LayerSpec bf16_layer(uint32_t id, uint64_t n) {
  LayerSpec s = ptest::ps_layer(id, n);
  s.force = SchemeChoice::kBF16;
  return s;
}

LayerSpec powersgd_layer(uint32_t id, uint64_t m, uint64_t n, uint64_t rest) {
  LayerSpec s = ptest::fc_layer(id, m, n, 8, rest);
  s.force = SchemeChoice::kPowerSGD;
  return s;
}

// Worker r's value at index i, iteration t: most need rounding to bf16 (they
// carry bits below bf16's 7-bit mantissa); worker 0 adds an inf now and then.
// The bf16-rounded values are multiples of 2^-7 below 16, so their fp32 sum is
// exact whatever the order the shard adds them in.
float bf16_input(int rank, size_t i, int64_t t) {
  if (rank == 0 && i % 101 == 3) return INFINITY;
  return static_cast<float>(rank + 1) * (1.0f + static_cast<float>(i % 97) / 1024.0f) +
         0.3f * static_cast<float>(t);
}

float bf16_expected(int p1, size_t i, int64_t t) {
  float sum = 0;
  for (int r = 0; r < p1; ++r) sum += round_bf16(bf16_input(r, i, t));
  return round_bf16(sum);
}

float exact_input(int rank, size_t i, int64_t t) {
  return static_cast<float>((rank + 1) * (1 + static_cast<int>(i % 5)) + t);
}

float exact_expected(int p1, size_t i, int64_t t) {
  return static_cast<float>((1 + static_cast<int>(i % 5)) * p1 * (p1 + 1) / 2 + p1 * t);
}

struct Mismatches {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    if (list.size() < 20) list.push_back(m);
  }
};

// colocate: worker r hosts shard r (rank < P2) and reaches it in place.
void run_bf16(const std::string& transport, int p1, int p2, bool colocate) {
  const std::string where = transport + " P1=" + std::to_string(p1) + " P2=" + std::to_string(p2) +
                            (colocate ? " colocated" : "");
  const std::vector<uint64_t> sizes = {0, 1, 1023, 1025, 5 * 1024 + 3};  // BF16 layers 0..4
  const uint32_t ps_layer = static_cast<uint32_t>(sizes.size());         // PS, beside them
  const uint64_t ps_floats = 1000;
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
  Mismatches bad;
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    std::vector<LayerSpec> specs;
    for (size_t l = 0; l < sizes.size(); ++l) {
      specs.push_back(bf16_layer(static_cast<uint32_t>(l), sizes[l]));
    }
    specs.push_back(ptest::ps_layer(ps_layer, ps_floats));
    const Plan& plan = w.plan(specs);
    for (size_t l = 0; l < sizes.size(); ++l) {
      if (plan.layers[l].scheme != Scheme::kBF16) bad.add(where + ": layer not BF16");
    }
    std::vector<std::vector<float>> grads;
    for (const uint64_t n : sizes) grads.emplace_back(n);
    grads.emplace_back(ps_floats);
    for (size_t l = 0; l < grads.size(); ++l) {
      w.register_layer(static_cast<uint32_t>(l), grads[l].data(), grads[l].size());
    }
    for (int64_t t = 0; t < kIterations; ++t) {
      std::vector<Handle> hs;
      for (size_t l = grads.size(); l-- > 0;) {
        const bool bf = l < sizes.size();
        for (size_t i = 0; i < grads[l].size(); ++i) {
          grads[l][i] = bf ? bf16_input(rank, i, t) : exact_input(rank, i, t);
        }
        hs.push_back(w.push_pull(static_cast<uint32_t>(l), t));
      }
      for (Handle& h : hs) h.wait(o.timeout_ms);
      for (size_t l = 0; l < grads.size(); ++l) {
        const bool bf = l < sizes.size();
        for (size_t i = 0; i < grads[l].size(); ++i) {
          const float want = bf ? bf16_expected(p1, i, t) : exact_expected(p1, i, t);
          if (bits_of(grads[l][i]) != bits_of(want)) {
            bad.add(where + " worker " + std::to_string(rank) + " layer " + std::to_string(l) +
                    " t=" + std::to_string(t) + " index " + std::to_string(i) + ": got " +
                    std::to_string(grads[l][i]) + ", want " + std::to_string(want));
            break;
          }
        }
      }
    }
    // The real wire bytes: 2 per float under BF16, 4 under PS.
    const auto traffic = w.traffic();
    for (size_t l = 0; l < grads.size(); ++l) {
      const uint64_t want = grads[l].size() * (l < sizes.size() ? 2 : 4) * kIterations;
      const LayerTraffic& tr = traffic.at(static_cast<uint32_t>(l));
      if (tr.bytes_sent != want || tr.bytes_received != want) {
        bad.add(where + " traffic of layer " + std::to_string(l) + ": " +
                std::to_string(tr.bytes_sent) + "/" + std::to_string(tr.bytes_received) +
                ", want " + std::to_string(want));
      }
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.coordinator_error(), std::string());
  for (int s = 0; s < p2; ++s) CHECK_EQ(cluster.server_error(s), std::string());
  for (const std::string& m : bad.list) CHECK_EQ(m, std::string());
  uint64_t in = 0, out = 0, in_place = 0;
  for (int s = 0; s < p2; ++s) {
    in += cluster.server(s).stats().bytes_received;
    out += cluster.server(s).stats().bytes_sent;
    in_place += cluster.server(s).stats().rounds_in_place;
  }
  if (!colocate) {
    // Every byte crossed a connection: P1 pushes and P1 replies per float.
    uint64_t bf_floats = 0;
    for (const uint64_t n : sizes) bf_floats += n;
    const uint64_t want = uint64_t(p1) * kIterations * (2 * bf_floats + 4 * ps_floats);
    CHECK_EQ(in, want);
    CHECK_EQ(out, want);
    CHECK_EQ(in_place, uint64_t{0});
  } else {
    CHECK(in_place > 0);
  }
}

}  // namespace

TEST(bf16_sums_tcp) {
  run_bf16("tcp", 3, 2, false);
  run_bf16("tcp", 1, 1, false);
}

TEST(bf16_sums_inproc) { run_bf16("inproc", 2, 3, false); }

// In place the worker's own share and the finished sum are rounded in its
// range: the same bits as over the wire.
TEST(bf16_sums_colocated_shards) {
  run_bf16("tcp", 3, 3, true);
  run_bf16("tcp", 3, 2, true);  // worker 2 hosts no shard
  run_bf16("tcp", 1, 1, true);  // one worker: the round is its own, still rounded
}

namespace {

// Two PowerSGD layers (one with a bias of m floats, one without, its rank
// clamped to n = 3), several iterations; each part summed on its own, the
// other part untouched meanwhile.
void run_powersgd(const std::string& transport, int p1, int p2, bool colocate) {
  const std::string where = transport + " P1=" + std::to_string(p1) + " P2=" + std::to_string(p2) +
                            (colocate ? " colocated" : "");
  ptest::ClusterOptions o;
  o.workers = p1;
  o.servers = p2;
  o.transport = transport;
  o.chunk_bytes = kChunkBytes;
  o.powersgd_rank = 4;
  ptest::LocalCluster* self = nullptr;
  if (colocate) {
    o.worker_config = [&self](Config& c, int rank) {
      if (rank < c.num_servers) c.local_server = self->server(rank).local_address();
    };
  }
  ptest::LocalCluster cluster(o);
  self = &cluster;
  Mismatches bad;
  constexpr float kUntouched = -7.0f;
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    const Plan& plan = w.plan({powersgd_layer(0, 300, 200, 300), powersgd_layer(1, 40, 3, 0)});
    const LayerPlan& a = plan.layers[0];
    const LayerPlan& b = plan.layers[1];
    if (a.wire_floats != 4 * 300 + 300 + 4 * 200 || b.rank != 3 || b.wire_floats != 120 + 9) {
      bad.add(where + ": unexpected layout");
      return;
    }
    std::vector<std::vector<float>> bufs = {std::vector<float>(a.wire_floats),
                                            std::vector<float>(b.wire_floats)};
    for (uint32_t l = 0; l < 2; ++l) w.register_layer(l, bufs[l].data(), bufs[l].size());
    for (int64_t t = 0; t < kIterations; ++t) {
      for (uint32_t part = 0; part < 2; ++part) {
        std::vector<Handle> hs;
        for (uint32_t l = 0; l < 2; ++l) {
          const PlanPart& pp = plan.layers[l].parts[part];
          std::vector<float>& buf = bufs[l];
          for (size_t i = 0; i < pp.num_floats; ++i) {
            buf[pp.offset + i] = exact_input(rank, i, 10 * t + part);
          }
          if (part == 0) {  // part 1 must come through part 0's round untouched
            const PlanPart& q = plan.layers[l].parts[1];
            std::fill(buf.begin() + static_cast<std::ptrdiff_t>(q.offset), buf.end(), kUntouched);
          }
          hs.push_back(w.push_pull(l, t, part));
        }
        for (Handle& h : hs) h.wait(o.timeout_ms);
        for (uint32_t l = 0; l < 2; ++l) {
          const std::vector<PlanPart>& parts = plan.layers[l].parts;
          const PlanPart& pp = parts[part];
          for (size_t i = 0; i < pp.num_floats; ++i) {
            const float want = exact_expected(p1, i, 10 * t + part);
            if (bufs[l][pp.offset + i] != want) {
              bad.add(where + " layer " + std::to_string(l) + " t=" + std::to_string(t) + " part " +
                      std::to_string(part) + " index " + std::to_string(i) + ": got " +
                      std::to_string(bufs[l][pp.offset + i]) + ", want " + std::to_string(want));
              break;
            }
          }
          if (part == 0 && bufs[l][parts[1].offset] != kUntouched) {
            bad.add(where + " layer " + std::to_string(l) + ": part 0's round changed part 1");
          }
          if (part == 1 && bufs[l][0] != exact_expected(p1, 0, 10 * t)) {
            bad.add(where + " layer " + std::to_string(l) + ": part 1's round changed part 0");
          }
        }
      }
    }
    const auto traffic = w.traffic();
    for (uint32_t l = 0; l < 2; ++l) {
      const uint64_t want = bufs[l].size() * 4 * kIterations;
      if (traffic.at(l).bytes_sent != want || traffic.at(l).bytes_received != want) {
        bad.add(where + " traffic of layer " + std::to_string(l));
      }
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.coordinator_error(), std::string());
  for (int s = 0; s < p2; ++s) CHECK_EQ(cluster.server_error(s), std::string());
  for (const std::string& m : bad.list) CHECK_EQ(m, std::string());
  // Every chunk of both parts made one round per iteration.
  uint64_t rounds = 0;
  for (int s = 0; s < p2; ++s) rounds += cluster.server(s).stats().rounds_completed;
  const std::optional<Plan> plan = cluster.coordinator().plan();
  REQUIRE(plan.has_value());
  CHECK_EQ(rounds, uint64_t(plan->layers[0].num_chunks + plan->layers[1].num_chunks) * kIterations);
}

}  // namespace

TEST(powersgd_two_parts_tcp) { run_powersgd("tcp", 3, 2, false); }
TEST(powersgd_two_parts_inproc) { run_powersgd("inproc", 2, 1, false); }
TEST(powersgd_two_parts_colocated) { run_powersgd("tcp", 3, 3, true); }

// A layer's (iteration, part) must go (t, 0), (t, 1), (t + 1, 0): anything else
// is a ConfigError naming the layer, the iteration and the part, raised before
// a byte is sent (the other worker's rounds are not disturbed).
TEST(powersgd_parts_in_order_only) {
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 1;
  o.transport = "inproc";
  o.chunk_bytes = kChunkBytes;
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    const Plan& plan = w.plan({powersgd_layer(0, 300, 200, 300), ptest::ps_layer(1, 10)});
    std::vector<float> buf(plan.layers[0].wire_floats, 1.0f);
    std::vector<float> ps(10, 1.0f);
    if (rank == 0) {
      CHECK_THROWS(w.register_layer(0, buf.data(), buf.size() - 1), ConfigError,
                   "register_layer(0): buffer of 2299 floats, but layer fc0 (PowerSGD, rank 4) "
                   "takes 2300: [P (4x300) | rest (300)] then [Q (4x200)]");
    }
    w.register_layer(0, buf.data(), buf.size());
    w.register_layer(1, ps.data(), ps.size());
    if (rank == 0) {
      CHECK_THROWS(w.push_pull(0, 0, 1), ConfigError,
                   "push_pull of layer 0 (fc0) iteration 0 part 1: a layer's first operation is "
                   "of part 0, not part 1");
      CHECK_THROWS(w.push_pull(1, 0, 1), ConfigError,
                   "push_pull of layer 1 (layer1) iteration 0 part 1: no part 1 (the layer has 1 "
                   "part)");
      Handle h = w.push_pull(0, 0, 0);
      // Worker 1 pushes only after the barrier: this round cannot be done yet.
      CHECK_THROWS(w.push_pull(0, 0, 1), ConfigError, "while iteration 0 is still in flight");
      w.barrier("go", o.timeout_ms);
      h.wait(o.timeout_ms);
      CHECK_THROWS(w.push_pull(0, 1, 0), ConfigError,
                   "push_pull of layer 0 (fc0) iteration 1 part 0 follows iteration 0 part 0: "
                   "expected iteration 0 part 1");
      CHECK_THROWS(w.push_pull(0, 0, 2), ConfigError, "no part 2 (the layer has 2 parts)");
      w.push_pull(0, 0, 1).wait(o.timeout_ms);
      CHECK_THROWS(w.push_pull(0, 0, 0), ConfigError, "expected iteration 1 part 0");
      CHECK_THROWS(w.push_pull(0, 2, 0), ConfigError, "expected iteration 1 part 0");
    } else {
      w.barrier("go", o.timeout_ms);
      w.push_pull(0, 0, 0).wait(o.timeout_ms);
      w.push_pull(0, 0, 1).wait(o.timeout_ms);
    }
    w.push_pull(0, 1, 0).wait(o.timeout_ms);
    w.push_pull(0, 1, 1).wait(o.timeout_ms);
    CHECK_EQ(buf[0], 4.0f);  // 1 + 1 at iteration 0, then 2 + 2
    CHECK_EQ(buf.back(), 4.0f);
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.server_error(0), std::string());
}

namespace {

// One frame on a fresh connection that passed the handshake as worker 0 (a
// second link of a real worker, as far as the shard can tell).
std::string send_one(Transport& transport, const std::string& server, const std::string& token,
                     FrameType type, uint32_t layer, uint32_t chunk, uint64_t payload_bytes) {
  auto c = transport.connect(server, Deadline::after_ms(5000));
  client_handshake(*c, NodeId{Role::kWorker, 0, "abuser"}, token, Deadline::after_ms(5000));
  FrameHeader h;
  h.type = type;
  h.sender_role = Role::kWorker;
  h.layer = layer;
  h.chunk = chunk;
  h.iteration = 0;
  h.payload_bytes = payload_bytes;
  const auto hb = header_bytes(h);
  std::vector<uint8_t> payload(payload_bytes, 0);
  c->write_frame(hb.data(), hb.size(), payload.data(), payload.size(), Deadline::after_ms(5000));
  return answer(*c);
}

}  // namespace

TEST(shard_refuses_bad_bf16_and_powersgd_pushes) {
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 2;
  o.transport = "tcp";
  o.chunk_bytes = kChunkBytes;
  o.powersgd_rank = 2;
  ptest::LocalCluster cluster(o);
  std::atomic<bool> planned{false};
  std::atomic<bool> abused{false};
  std::map<std::string, std::string> answers;
  std::thread abuse([&] {
    while (!planned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto transport = make_transport("tcp");
    const std::string at = cluster.server(0).address();
    // Layer 0 (BF16, 4 chunks of 1024 floats: 0 and 2 on shard 0); layer 1
    // (PowerSGD 64x32 rank 2 + 64: chunks 4, 5 of part 0 and 6 of part 1;
    // its chunk 0 is on shard 0).
    answers["odd_bf16"] = send_one(*transport, at, o.token, FrameType::kPush16, 0, 0, 2047);
    answers["fp32_for_bf16"] = send_one(*transport, at, o.token, FrameType::kPush, 0, 0, 4096);
    answers["bf16_wrong_length"] =
        send_one(*transport, at, o.token, FrameType::kPush16, 0, 0, 4096);
    answers["bf16_for_powersgd"] = send_one(*transport, at, o.token, FrameType::kPush16, 1, 0, 192);
    answers["chunk_out_of_range"] = send_one(*transport, at, o.token, FrameType::kPush, 1, 3, 64);
    answers["reply_at_shard"] =
        send_one(*transport, at, o.token, FrameType::kPullReply16, 0, 0, 2048);
    abused = true;
  });
  std::atomic<int> wrong{0};
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    const Plan& plan = w.plan({bf16_layer(0, 4 * 1024), powersgd_layer(1, 64, 32, 64)});
    REQUIRE(plan.layers[0].num_chunks == 4 && plan.layers[1].num_chunks == 3);
    REQUIRE(plan.shard_of(plan.layers[1], 0) == 0 && plan.layers[1].chunk_length(0) == 96);
    std::vector<float> a(4 * 1024), b(plan.layers[1].wire_floats);
    w.register_layer(0, a.data(), a.size());
    w.register_layer(1, b.data(), b.size());
    w.barrier("planned", o.timeout_ms);
    if (rank == 0) planned = true;
    for (int64_t t = 0; t < 4; ++t) {
      if (t == 1) {
        while (!abused.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      std::fill(a.begin(), a.end(), static_cast<float>(rank + 1));
      std::fill(b.begin(), b.end(), static_cast<float>(rank + 1));
      Handle ha = w.push_pull(0, t);
      w.push_pull(1, t, 0).wait(o.timeout_ms);
      w.push_pull(1, t, 1).wait(o.timeout_ms);
      ha.wait(o.timeout_ms);
      if (a[5] != 3.0f || b[0] != 3.0f || b.back() != 3.0f) ++wrong;
    }
    w.shutdown(o.timeout_ms);
  });
  abuse.join();
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.server_error(0), std::string());
  CHECK_EQ(wrong.load(), 0);
  CHECK_CONTAINS(answers["odd_bf16"], "PUSH16 payload of 2047 bytes is not whole bf16 values");
  CHECK_CONTAINS(answers["fp32_for_bf16"],
                 "layer 0 chunk 0 iteration 0: layer layer0 is synchronised by BF16: want PUSH16, "
                 "got PUSH");
  CHECK_CONTAINS(answers["bf16_wrong_length"],
                 "size mismatch: 4096 bytes, the chunk is 2048 bytes (1024 floats as bf16)");
  CHECK_CONTAINS(answers["bf16_for_powersgd"], "synchronised by PowerSGD: want PUSH, got PUSH16");
  CHECK_CONTAINS(answers["chunk_out_of_range"], "chunk out of range (layer fc1 has 3 chunks)");
  CHECK_CONTAINS(answers["reply_at_shard"], "unexpected PULL_REPLY16 at a server shard");
  CHECK(cluster.server(0).stats().frames_rejected >= 5);
}

TEST_MAIN()
