// Protocol abuse against a live server shard while two real workers keep
// running push-pull rounds: garbage bytes, truncated frames (EOF and
// stall), an absurd length, a wrong token, a wrong version, and — on
// connections that did pass the handshake — pushes with an unknown key, a
// chunk of another shard, a wrong size, a wrong iteration, an oversized
// frame, an unexpected frame type, and an in-place push over TCP or for a
// range nobody lent. Each abusive connection must be dropped with a logged
// reason naming the remote address, and every round of the real workers must
// complete with the right sum.

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "check.h"
#include "cluster.h"
#include "poseidon/internal/frame.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/messages.h"
#include "raw_frames.h"
#include "stderr_capture.h"

using namespace poseidon;

namespace {

constexpr size_t kChunkBytes = 4096;
constexpr size_t kLayerFloats = 4 * 1024;  // chunks 0, 2 on shard 0; chunks 1, 3 on shard 1

struct Abuser {
  Transport& transport;
  std::string server;
  std::string token;

  std::unique_ptr<Connection> dial() { return transport.connect(server, Deadline::after_ms(5000)); }

  // Raw bytes, then whatever the server says.
  std::string raw(const std::vector<uint8_t>& bytes, bool half_close) {
    auto c = dial();
    c->write_frame(bytes.data(), bytes.size(), nullptr, 0, Deadline::after_ms(5000));
    if (half_close) c->close_write();
    return answer(*c);
  }

  // A connection that passed the handshake as worker 0 (a second link of a
  // real worker, as far as the server can tell), then one frame.
  std::string authed(FrameHeader h, size_t payload_bytes_to_write) {
    auto c = dial();
    client_handshake(*c, NodeId{Role::kWorker, 0, "abuser"}, token, Deadline::after_ms(5000));
    h.sender_role = Role::kWorker;
    h.sender_rank = 0;
    const auto hb = header_bytes(h);
    std::vector<uint8_t> payload(payload_bytes_to_write, 0);
    c->write_frame(hb.data(), hb.size(), payload.data(), payload.size(), Deadline::after_ms(5000));
    return answer(*c);
  }
};

FrameHeader push(uint32_t layer, uint32_t chunk, int64_t iteration, uint64_t bytes) {
  FrameHeader h;
  h.type = FrameType::kPush;
  h.layer = layer;
  h.chunk = chunk;
  h.iteration = iteration;
  h.payload_bytes = bytes;
  return h;
}

}  // namespace

TEST(server_survives_abuse_without_losing_a_round) {
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 2;
  o.transport = "tcp";
  o.chunk_bytes = kChunkBytes;
  o.handshake_timeout_ms = 400;
  ptest::StderrCapture capture;
  ptest::LocalCluster cluster(o);
  std::atomic<int64_t> rounds_done{0};
  std::atomic<bool> abuse_done{false};
  // Both workers must run the same rounds: rank 0 fixes the last one (5
  // after it sees the abuse end); rank 1 is never more than one round ahead.
  std::atomic<int64_t> stop_at{1000000};
  std::atomic<int> wrong_sums{0};
  std::map<std::string, std::string> answers;

  std::thread abuse([&] {
    while (rounds_done.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto transport = make_transport("tcp");
    Abuser a{*transport, cluster.server(0).address(), o.token};
    FrameHeader hello;
    hello.type = FrameType::kHello;
    hello.sender_role = Role::kWorker;
    const auto body = encode_hello(Hello{o.token, "abuser"});
    hello.payload_bytes = body.size();
    auto good_hello = header_bytes(hello);

    std::vector<uint8_t> garbage(64);
    for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 37 + 11);
    answers["garbage"] = a.raw(garbage, false);
    answers["truncated_eof"] = a.raw({good_hello.begin(), good_hello.begin() + 20}, true);
    answers["truncated_stall"] = a.raw({good_hello.begin(), good_hello.begin() + 20}, false);
    FrameHeader huge = hello;
    huge.payload_bytes = uint64_t{1} << 62;
    answers["absurd_length"] = a.raw(header_bytes(huge), false);
    auto wrong_token = header_bytes(hello);
    const auto bad_body = encode_hello(Hello{"not-the-token", "abuser"});
    FrameHeader wt = hello;
    wt.payload_bytes = bad_body.size();
    wrong_token = header_bytes(wt);
    wrong_token.insert(wrong_token.end(), bad_body.begin(), bad_body.end());
    answers["wrong_token"] = a.raw(wrong_token, false);
    auto wrong_version = good_hello;
    wrong_version[4] = 99;
    wrong_version.insert(wrong_version.end(), body.begin(), body.end());
    answers["wrong_version"] = a.raw(wrong_version, false);

    answers["unknown_layer"] = a.authed(push(999, 0, 0, 16), 16);
    answers["chunk_of_other_shard"] = a.authed(push(0, 1, 0, kChunkBytes), kChunkBytes);
    answers["wrong_size"] = a.authed(push(0, 0, 0, kChunkBytes - 8), kChunkBytes - 8);
    answers["wrong_iteration"] = a.authed(push(0, 0, 1000000, kChunkBytes), kChunkBytes);
    answers["oversized_frame"] = a.authed(push(0, 0, 0, kDefaultMaxFrameBytes + 4), 0);
    FrameHeader again = hello;
    answers["unexpected_type"] = a.authed(again, 0);
    // "Sum my range in place" is for a worker of the shard's own process.
    FrameHeader in_place = push(0, 0, 0, 0);
    in_place.type = FrameType::kPushInPlace;
    answers["in_place_over_tcp"] = a.authed(in_place, 0);
    auto inproc = make_transport("inproc");
    Abuser local{*inproc, cluster.server(0).local_address(), o.token};
    answers["in_place_not_lent"] = local.authed(in_place, 0);
    abuse_done = true;
  });

  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, kLayerFloats)});
    std::vector<float> g(kLayerFloats);
    w.register_layer(0, g.data(), g.size());
    for (int64_t t = 0; t < stop_at.load(); ++t) {
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(rank + 1 + i % 3);
      w.push_pull(0, t).wait(o.timeout_ms);
      for (size_t i = 0; i < g.size(); ++i) {
        if (g[i] != static_cast<float>(3 + 2 * (i % 3))) {
          ++wrong_sums;
          break;
        }
      }
      if (rank == 0) {
        rounds_done = t + 1;
        if (abuse_done.load() && stop_at.load() == 1000000) stop_at = t + 6;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    w.barrier("end", o.timeout_ms);
    w.shutdown(o.timeout_ms);
  });
  abuse.join();
  cluster.join();
  const std::string log = capture.finish();

  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK_EQ(cluster.coordinator_error(), std::string());
  CHECK_EQ(cluster.server_error(0), std::string());
  CHECK_EQ(wrong_sums.load(), 0);
  CHECK(cluster.server(0).stats().frames_rejected >= 4);

  CHECK_CONTAINS(answers["garbage"], "bad magic");
  CHECK_EQ(answers["truncated_eof"], std::string("EOF"));
  CHECK_EQ(answers["truncated_stall"], std::string("EOF"));
  CHECK_CONTAINS(answers["absurd_length"], "exceeds the limit");
  CHECK_CONTAINS(answers["wrong_token"], "wrong cluster token");
  CHECK_CONTAINS(answers["wrong_version"], "unsupported protocol version 99");
  CHECK_CONTAINS(answers["unknown_layer"], "layer 999 is not in the plan");
  CHECK_CONTAINS(answers["chunk_of_other_shard"], "belongs to server 1");
  CHECK_CONTAINS(answers["wrong_size"], "size mismatch: 4088 bytes");
  CHECK_CONTAINS(answers["wrong_iteration"], "iteration 1000000: iteration mismatch");
  CHECK_CONTAINS(answers["oversized_frame"], "exceeds the limit");
  CHECK_CONTAINS(answers["unexpected_type"], "unexpected HELLO");
  CHECK_CONTAINS(answers["in_place_over_tcp"], "PUSH_IN_PLACE from worker 0 (abuser) outside");
  CHECK_CONTAINS(answers["in_place_not_lent"], "has not lent this layer's range");

  // Every drop is logged with its reason and the remote address.
  CHECK_CONTAINS(log, "rejected connection from 127.0.0.1:");
  for (const char* reason :
       {"bad magic", "(EOF) after 20 of 48", "timed out after 20 of 48", "exceeds the limit",
        "wrong cluster token", "unsupported protocol version 99", "not in the plan",
        "size mismatch", "iteration mismatch", "belongs to server 1", "unexpected HELLO"}) {
    CHECK_CONTAINS(log, reason);
  }
  CHECK_CONTAINS(log, "dropped connection from worker 0 (abuser) [127.0.0.1:");
  if (ptest::failures() > 0) std::fprintf(stderr, "--- captured log ---\n%s", log.c_str());
}

TEST_MAIN()
