// ServerStats.reader_waits / reader_wait_ns: a push whose reader must park is
// counted with the time it parked. Here worker 0's push (a raw connection
// that proved the token as worker 0) sends its header and half its payload,
// then stalls; worker 1's push of the same chunk must wait for it, because
// later pushes are added into the sum the first one is read into. The round
// still ends with the right sum for both.

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "check.h"
#include "cluster.h"
#include "poseidon/frame.h"
#include "poseidon/handshake.h"

using namespace poseidon;

namespace {

constexpr size_t kFloats = 16 * 1024;  // one 64 KiB chunk
constexpr int kStallMs = 300;

}  // namespace

TEST(a_push_parked_behind_a_slow_first_push_is_counted) {
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 1;
  o.transport = "tcp";
  o.chunk_bytes = kFloats * 4;
  ptest::LocalCluster cluster(o);
  std::atomic<bool> planned{false};
  std::atomic<bool> half_sent{false};
  std::vector<float> slow_sum(kFloats, 0.0f);

  std::thread slow([&] {
    while (!planned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto transport = make_transport("tcp");
    auto c = transport->connect(cluster.server(0).address(), Deadline::after_ms(5000));
    client_handshake(*c, NodeId{Role::kWorker, 0, "slow"}, o.token, Deadline::after_ms(5000));
    FrameHeader h;
    h.type = FrameType::kPush;
    h.sender_role = Role::kWorker;
    h.sender_rank = 0;
    h.layer = 0;
    h.chunk = 0;
    h.iteration = 0;
    h.payload_bytes = kFloats * 4;
    std::vector<uint8_t> hb(kFrameHeaderBytes);
    encode_header(h, hb.data());
    const std::vector<float> ones(kFloats, 1.0f);
    const size_t half = kFloats / 2;
    c->write_frame(hb.data(), hb.size(), ones.data(), half * 4, Deadline::after_ms(5000));
    half_sent = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(kStallMs));
    c->write_frame(nullptr, 0, ones.data() + half, (kFloats - half) * 4, Deadline::after_ms(5000));
    uint8_t rb[kFrameHeaderBytes];
    c->read_exact(rb, sizeof rb, Deadline::after_ms(5000));
    FrameHeader reply;
    CHECK_EQ(decode_header(rb, sizeof rb, 1 << 20, &reply), std::string());
    CHECK_EQ(reply.payload_bytes, uint64_t{kFloats * 4});
    c->read_exact(slow_sum.data(), kFloats * 4, Deadline::after_ms(5000));
  });

  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, kFloats)});
    std::vector<float> g(kFloats, 2.0f);
    w.register_layer(0, g.data(), g.size());
    if (rank == 1) {
      planned = true;
      while (!half_sent.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the slow push is first
      w.push_pull(0, 0).wait(o.timeout_ms);
      CHECK_EQ(g.front(), 3.0f);
      CHECK_EQ(g.back(), 3.0f);
    }
    w.barrier("end", o.timeout_ms);
    w.shutdown(o.timeout_ms);
  });
  slow.join();
  cluster.join();

  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.server_error(0), std::string());
  CHECK_EQ(slow_sum.front(), 3.0f);
  CHECK_EQ(slow_sum.back(), 3.0f);
  const ServerStats stats = cluster.server(0).stats();
  CHECK_EQ(stats.rounds_completed, uint64_t{1});
  CHECK_EQ(stats.reader_waits, uint64_t{1});
  // Parked from shortly after the stall began until the slow payload ended.
  CHECK(stats.reader_wait_ns >= uint64_t{kStallMs - 100} * 1000000);
  CHECK(stats.reader_wait_ns < uint64_t{5000} * 1000000);
}

TEST_MAIN()
