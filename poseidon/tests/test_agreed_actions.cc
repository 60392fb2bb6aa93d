// Agreed actions (internal/action_rounds.h, Note [agreed actions]): the round state
// machine, and a real cluster whose workers, at different speeds, all stop at
// the same iteration when one of them is asked to.

#include <atomic>
#include <chrono>
#include <thread>

#include "check.h"
#include "cluster.h"
#include "poseidon/errors.h"
#include "poseidon/internal/action_rounds.h"

using namespace poseidon;

namespace {

ActionMessage only(const ActionRounds::Broadcast& b, FrameType type) {
  REQUIRE(b.size() == 1);
  CHECK(b[0].first == type);
  return b[0].second;
}

}  // namespace

TEST(a_round_decides_the_largest_vote) {
  ActionRounds rounds(3);
  const ActionMessage propose = only(rounds.request(1, ActionKind::kStop, 7, "SIGINT on worker 1"),
                                     FrameType::kActionPropose);
  CHECK_EQ(propose.round, uint64_t{1});
  CHECK(propose.kind == ActionKind::kStop);
  CHECK_EQ(propose.reason, std::string("SIGINT on worker 1"));
  CHECK(rounds.request(0, ActionKind::kStop, 7, "SIGINT on worker 0").empty());  // joins round 1
  CHECK(rounds.vote(0, 1, 7).empty());
  CHECK(rounds.vote(2, 1, 8).empty());
  CHECK_THROWS(rounds.vote(2, 1, 8), ProtocolError, "voted twice");
  const ActionMessage decide = only(rounds.vote(1, 1, 7), FrameType::kActionDecide);
  CHECK_EQ(decide.round, uint64_t{1});
  CHECK_EQ(decide.iteration, int64_t{9});  // one past the furthest voter
  CHECK(decide.kind == ActionKind::kStop);
  CHECK(!rounds.open());
  CHECK(rounds.vote(0, 1, 9).empty());  // late: the round is decided
  CHECK_THROWS(rounds.vote(0, 2, 9), ProtocolError, "never proposed");
  // The same signal reaching a worker later: covered until boundary 9 passes.
  CHECK(rounds.request(0, ActionKind::kStop, 8, "SIGINT on worker 0, later").empty());
  CHECK(rounds.request(0, ActionKind::kSnapshot, 8, "SIGHUP").empty());
  only(rounds.request(0, ActionKind::kStop, 9, "a new one"), FrameType::kActionPropose);
}

TEST(a_stop_asked_during_a_snapshot_round_opens_the_next) {
  ActionRounds rounds(2);
  only(rounds.request(0, ActionKind::kSnapshot, 4, "SIGHUP on worker 0"),
       FrameType::kActionPropose);
  CHECK(rounds.request(1, ActionKind::kSnapshot, 4, "again").empty());
  CHECK(rounds.request(1, ActionKind::kStop, 7, "SIGINT on worker 1").empty());
  CHECK(rounds.vote(0, 1, 4).empty());
  const ActionRounds::Broadcast out = rounds.vote(1, 1, 5);
  REQUIRE(out.size() == 2);
  CHECK(out[0].first == FrameType::kActionDecide);
  CHECK(out[0].second.kind == ActionKind::kSnapshot);
  CHECK_EQ(out[0].second.iteration, int64_t{6});
  CHECK(out[1].first == FrameType::kActionPropose);
  CHECK(out[1].second.kind == ActionKind::kStop);
  CHECK_EQ(out[1].second.round, uint64_t{2});
  CHECK_EQ(out[1].second.reason, std::string("SIGINT on worker 1"));
}

TEST(a_finished_worker_cancels_the_round_and_later_requests) {
  ActionRounds rounds(2);
  only(rounds.request(0, ActionKind::kStop, 10, "SIGTERM on worker 0"), FrameType::kActionPropose);
  CHECK(rounds.vote(0, 1, 10).empty());
  const ActionMessage decide = only(rounds.worker_finished(1), FrameType::kActionDecide);
  CHECK_EQ(decide.iteration, int64_t{-1});
  CHECK(rounds.request(0, ActionKind::kStop, 10, "again").empty());
  CHECK(rounds.worker_finished(0).empty());
}

TEST(action_messages_round_trip_and_reject_garbage) {
  const ActionMessage m{3, ActionKind::kSnapshot, 42, "SIGHUP on worker 2"};
  const std::vector<uint8_t> bytes = encode_action(m);
  const ActionMessage back = decode_action(bytes.data(), bytes.size());
  CHECK_EQ(back.round, m.round);
  CHECK(back.kind == m.kind);
  CHECK_EQ(back.iteration, m.iteration);
  CHECK_EQ(back.reason, m.reason);
  std::vector<uint8_t> bad = bytes;
  bad[8] = 9;  // the kind
  CHECK_THROWS(decode_action(bad.data(), bad.size()), ProtocolError, "unknown kind 9");
  CHECK_THROWS(decode_action(bytes.data(), bytes.size() - 1), ProtocolError, "ACTION");
}

// Three workers in bulk-synchronous rounds (a push-pull per iteration, the
// result needed before the next round, as the deferred updates need it in the
// next forward pass), the last one slower; worker 1 asks for a stop at its
// third boundary, and worker 0 is blocked waiting for worker 2's push while
// the vote goes on. Every worker must end at the same boundary, soon after
// the request.
TEST(every_worker_stops_at_the_same_iteration) {
  ptest::ClusterOptions o;
  o.workers = 3;
  o.servers = 2;
  ptest::LocalCluster cluster(o);
  std::atomic<int64_t> stopped_at[3] = {-1, -1, -1};
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, 1000)});
    std::vector<float> grad(1000, 1.0f);
    w.register_layer(0, grad.data(), grad.size());
    int64_t stop_at = -1;
    Handle previous;
    bool pending = false;
    w.reach_boundary(0, o.timeout_ms);
    for (int64_t iteration = 0; iteration < 1000; ++iteration) {
      if (pending) previous.wait(o.timeout_ms);  // "forward": the last round's sum
      if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      previous = w.push_pull(0, iteration);  // "backward"
      pending = true;
      const int64_t boundary = iteration + 1;
      if (rank == 1 && boundary == 3) w.request_action(ActionKind::kStop, "test on worker 1");
      for (const ActionMessage& decision : w.reach_boundary(boundary, o.timeout_ms)) {
        CHECK(decision.kind == ActionKind::kStop);
        CHECK(decision.iteration >= boundary);
        stop_at = decision.iteration;
      }
      if (boundary == stop_at) break;
    }
    if (pending) previous.wait(o.timeout_ms);
    stopped_at[rank] = stop_at;
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  CHECK(stopped_at[0] >= 4);
  CHECK_EQ(stopped_at[0].load(), stopped_at[1].load());
  CHECK_EQ(stopped_at[1].load(), stopped_at[2].load());
  CHECK(stopped_at[0] <= 8);  // a few round trips after the request, not the end
}

TEST_MAIN()
