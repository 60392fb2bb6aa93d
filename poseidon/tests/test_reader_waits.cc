// Shard readers and parking (ServerStats.reader_waits / reader_wait_ns).
//
// A reader that parks stops reading its connection, and the sender's every
// later frame on it stalls. Worker 0 here is a raw connection that proved the
// token as worker 0, so the test can stall it mid-frame or leave its reply
// unread; worker 1 is a real Worker.
// - A slow first push must not hold up another push of the same chunk: worker
//   1's pushes (both chunks) are read while worker 0's first one stalls.
// - A push of the next iteration does wait while this round's sums are still
//   being written (the reply to worker 0 is left unread): that wait is counted
//   with its time.

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "check.h"
#include "cluster.h"
#include "poseidon/internal/frame.h"
#include "poseidon/internal/handshake.h"

using namespace poseidon;

namespace {

constexpr int kStallMs = 300;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

void wait_for(const std::atomic<bool>& flag) {
  while (!flag.load()) sleep_ms(2);
}

// Worker 0, by hand: pushes whose payload it writes in parts, replies it
// reads when it chooses.
class RawWorker {
 public:
  RawWorker(const std::string& server, const std::string& token)
      : transport_(make_transport("tcp")),
        conn_(transport_->connect(server, Deadline::after_ms(5000))) {
    client_handshake(*conn_, NodeId{Role::kWorker, 0, "raw"}, token, Deadline::after_ms(5000));
  }

  void push_header(uint32_t chunk, int64_t iteration, size_t floats) {
    FrameHeader h;
    h.type = FrameType::kPush;
    h.sender_role = Role::kWorker;
    h.sender_rank = 0;
    h.layer = 0;
    h.chunk = chunk;
    h.iteration = iteration;
    h.payload_bytes = floats * 4;
    std::vector<uint8_t> hb(kFrameHeaderBytes);
    encode_header(h, hb.data());
    conn_->write_frame(hb.data(), hb.size(), nullptr, 0, Deadline::after_ms(5000));
  }

  void payload(const std::vector<float>& values, size_t from, size_t to) {
    conn_->write_frame(nullptr, 0, values.data() + from, (to - from) * 4, Deadline::after_ms(5000));
  }

  // The next reply's chunk, with its sum in `out`.
  uint32_t read_reply(std::vector<float>& out) {
    uint8_t hb[kFrameHeaderBytes];
    conn_->read_exact(hb, sizeof hb, Deadline::after_ms(10000));
    FrameHeader h;
    CHECK_EQ(decode_header(hb, sizeof hb, 1u << 30, &h), std::string());
    CHECK_EQ(h.payload_bytes, uint64_t{out.size() * 4});
    conn_->read_exact(out.data(), out.size() * 4, Deadline::after_ms(10000));
    return h.chunk;
  }

 private:
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Connection> conn_;
};

}  // namespace

TEST(a_slow_first_push_does_not_hold_up_the_others) {
  constexpr size_t kChunkFloats = 16 * 1024;  // 64 KiB chunks, two of them
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 1;
  o.chunk_bytes = kChunkFloats * 4;
  ptest::LocalCluster cluster(o);
  std::atomic<bool> planned{false}, half_sent{false};
  uint64_t read_during_stall = 0;

  std::thread raw([&] {
    wait_for(planned);
    RawWorker w0(cluster.server(0).address(), o.token);
    const std::vector<float> ones(kChunkFloats, 1.0f);
    w0.push_header(0, 0, kChunkFloats);
    w0.payload(ones, 0, kChunkFloats / 2);
    half_sent = true;
    sleep_ms(kStallMs);
    // Worker 1 pushed both chunks meanwhile; both must have been read.
    read_during_stall = cluster.server(0).stats().bytes_received;
    w0.payload(ones, kChunkFloats / 2, kChunkFloats);
    w0.push_header(1, 0, kChunkFloats);
    w0.payload(ones, 0, kChunkFloats);
    std::vector<float> sum(kChunkFloats);
    for (int i = 0; i < 2; ++i) {
      w0.read_reply(sum);
      CHECK_EQ(sum.front(), 3.0f);
      CHECK_EQ(sum.back(), 3.0f);
    }
  });

  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, 2 * kChunkFloats)});
    std::vector<float> g(2 * kChunkFloats, 2.0f);
    w.register_layer(0, g.data(), g.size());
    if (rank == 1) {
      planned = true;
      wait_for(half_sent);
      sleep_ms(20);  // worker 0's push of chunk 0 is the round's first
      w.push_pull(0, 0).wait(o.timeout_ms);
      CHECK_EQ(g.front(), 3.0f);
      CHECK_EQ(g.back(), 3.0f);
    }
    w.barrier("end", o.timeout_ms);
    w.shutdown(o.timeout_ms);
  });
  raw.join();
  cluster.join();

  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.server_error(0), std::string());
  CHECK_EQ(read_during_stall, uint64_t{2 * kChunkFloats * 4});
  const ServerStats stats = cluster.server(0).stats();
  CHECK_EQ(stats.rounds_completed, uint64_t{2});
  CHECK_EQ(stats.reader_waits, uint64_t{0});
}

TEST(a_push_of_the_next_iteration_waits_for_the_sums_and_is_counted) {
  // Larger than the loopback socket buffers, so an unread reply blocks its send.
  constexpr size_t kChunkFloats = 16u << 20;  // 64 MiB
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 1;
  o.chunk_bytes = kChunkFloats * 4;
  ptest::LocalCluster cluster(o);
  std::atomic<bool> planned{false}, pushed{false};

  std::thread raw([&] {
    wait_for(planned);
    RawWorker w0(cluster.server(0).address(), o.token);
    const std::vector<float> ones(kChunkFloats, 1.0f);
    w0.push_header(0, 0, kChunkFloats);
    w0.payload(ones, 0, kChunkFloats);
    pushed = true;
    sleep_ms(kStallMs);  // the reply to worker 0 stays unread: the round keeps sending
    std::vector<float> sum(kChunkFloats);
    w0.read_reply(sum);
    CHECK_EQ(sum.front(), 3.0f);
    w0.push_header(0, 1, kChunkFloats);
    w0.payload(ones, 0, kChunkFloats);
    w0.read_reply(sum);
    CHECK_EQ(sum.back(), 3.0f);
  });

  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, kChunkFloats)});
    std::vector<float> g(kChunkFloats);
    w.register_layer(0, g.data(), g.size());
    if (rank == 1) {
      planned = true;
      wait_for(pushed);
      for (int64_t t = 0; t < 2; ++t) {
        std::fill(g.begin(), g.end(), 2.0f);
        w.push_pull(0, t).wait(o.timeout_ms);  // t = 1 parks at the shard
        CHECK_EQ(g.front(), 3.0f);
        CHECK_EQ(g.back(), 3.0f);
      }
    }
    w.barrier("end", o.timeout_ms);
    w.shutdown(o.timeout_ms);
  });
  raw.join();
  cluster.join();

  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.server_error(0), std::string());
  const ServerStats stats = cluster.server(0).stats();
  CHECK_EQ(stats.rounds_completed, uint64_t{2});
  // Worker 1's push of iteration 1 parked for most of the stall (worker 0's
  // own may park an instant too, between reading its reply and the send's end).
  CHECK(stats.reader_waits >= uint64_t{1});
  CHECK(stats.reader_wait_ns >= uint64_t{kStallMs - 150} * 1000000);
  CHECK(stats.reader_wait_ns < uint64_t{5000} * 1000000);
}

TEST_MAIN()
