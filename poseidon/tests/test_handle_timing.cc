// Handle::timing (Note [handle timing] in handle.h): every push_pull and
// allgather reports queued <= first_send <= last_receive <= done, all inside
// the interval of steady_clock readings taken around the call and the wait,
// for PS over TCP, in-process and with colocated shards, and for SFB over TCP
// and in-process (including one worker: nothing to send or receive).

#include <algorithm>

#include "check.h"
#include "cluster.h"

using namespace poseidon;

namespace {

// "" or what is wrong with `t` for an op started at `before` and waited for
// until `after`.
std::string check_timing(const HandleTiming& t, int64_t before, int64_t after,
                         const std::string& what) {
  const std::string got = what + ": queued " + std::to_string(t.queued_ns - before) +
                          " first_send " + std::to_string(t.first_send_ns - before) +
                          " last_receive " + std::to_string(t.last_receive_ns - before) + " done " +
                          std::to_string(t.done_ns - before) + " after " +
                          std::to_string(after - before) + " (ns since the call)";
  if (t.queued_ns == 0 || t.first_send_ns == 0 || t.last_receive_ns == 0 || t.done_ns == 0) {
    return got + ": a phase of a completed op is 0";
  }
  if (!(before <= t.queued_ns && t.queued_ns <= t.first_send_ns &&
        t.first_send_ns <= t.last_receive_ns && t.last_receive_ns <= t.done_ns &&
        t.done_ns <= after)) {
    return got + ": out of order";
  }
  return "";
}

struct Errors {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string& e) {
    if (e.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    list.push_back(e);
  }
};

void run_ps(const std::string& transport, int p, bool colocate) {
  ptest::ClusterOptions o;
  o.workers = p;
  o.servers = p;
  o.transport = transport;
  o.chunk_bytes = 4096;
  ptest::LocalCluster* self = nullptr;
  if (colocate) {
    o.worker_config = [&self](Config& c, int rank) {
      c.local_server = self->server(rank).local_address();
    };
  }
  ptest::LocalCluster cluster(o);
  self = &cluster;
  Errors bad;
  const std::string name = transport + (colocate ? " colocated" : "") + " P=" + std::to_string(p);
  const auto errors = cluster.run_workers([&](Worker& w, int) {
    w.plan({ptest::ps_layer(0, 10000), ptest::ps_layer(1, 3)});
    std::vector<float> a(10000, 1.0f), b(3, 1.0f);
    w.register_layer(0, a.data(), a.size());
    w.register_layer(1, b.data(), b.size());
    for (int64_t t = 0; t < 3; ++t) {
      const int64_t before = steady_clock_ns();
      Handle ha = w.push_pull(0, t);
      Handle hb = w.push_pull(1, t);
      // Read while in flight: whatever is set is already ordered.
      const HandleTiming early = ha.timing();
      if (early.queued_ns < before) bad.add(name + ": queued before the call");
      if (early.done_ns != 0 && early.last_receive_ns == 0) bad.add(name + ": done, not received");
      if (early.last_receive_ns != 0 && early.first_send_ns == 0) bad.add(name + ": unsent");
      ha.wait(o.timeout_ms);
      hb.wait(o.timeout_ms);
      const int64_t after = steady_clock_ns();
      bad.add(check_timing(ha.timing(), before, after, name + " layer 0 t=" + std::to_string(t)));
      bad.add(check_timing(hb.timing(), before, after, name + " layer 1 t=" + std::to_string(t)));
      std::fill(a.begin(), a.end(), 1.0f);
      std::fill(b.begin(), b.end(), 1.0f);
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  for (const std::string& e : bad.list) CHECK_EQ(e, std::string());
}

void run_sfb(const std::string& transport, int p) {
  ptest::ClusterOptions o;
  o.workers = p;
  o.servers = 1;
  o.transport = transport;
  o.chunk_bytes = 1024;
  ptest::LocalCluster cluster(o);
  Errors bad;
  const std::string name = transport + " SFB P=" + std::to_string(p);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::sfb_layer(3)});
    w.register_sfb_layer(3, 2000);
    for (int64_t t = 0; t < 4; ++t) {
      // Ranks take turns being late, so some ops find every peer's factor
      // already in when they start sending.
      if (t % p == rank) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::vector<float> mine(700, static_cast<float>(rank));
      const int64_t before = steady_clock_ns();
      Handle g = w.allgather(3, t, mine.data(), mine.size());
      g.wait(o.timeout_ms);
      const int64_t after = steady_clock_ns();
      bad.add(check_timing(g.timing(), before, after, name + " t=" + std::to_string(t)));
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  for (const std::string& e : bad.list) CHECK_EQ(e, std::string());
}

}  // namespace

TEST(ps_timing_tcp) {
  for (int p : {1, 3}) run_ps("tcp", p, false);
}
TEST(ps_timing_inproc) { run_ps("inproc", 2, false); }
TEST(ps_timing_colocated) {
  for (int p : {1, 3}) run_ps("tcp", p, true);
}
TEST(sfb_timing_tcp) { run_sfb("tcp", 3); }
TEST(sfb_timing_inproc) {
  for (int p : {1, 2}) run_sfb("inproc", p);
}

// A pending op reports the phases it reached and 0 for the rest.
TEST(pending_op_reports_zero_for_later_phases) {
  ptest::ClusterOptions o;
  o.workers = 2;
  o.servers = 1;
  ptest::LocalCluster cluster(o);
  const auto errors = cluster.run_workers([&](Worker& w, int rank) {
    w.plan({ptest::ps_layer(0, 8)});
    std::vector<float> a(8, 1.0f);
    w.register_layer(0, a.data(), a.size());
    if (rank == 0) {
      Handle h = w.push_pull(0, 0);
      // Worker 1 has not pushed: the shard cannot answer yet.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const HandleTiming t = h.timing();
      CHECK(t.queued_ns > 0);
      CHECK(t.first_send_ns >= t.queued_ns);  // the push went out
      CHECK_EQ(t.last_receive_ns, int64_t{0});
      CHECK_EQ(t.done_ns, int64_t{0});
      w.barrier("pushed 0", o.timeout_ms);
      h.wait(o.timeout_ms);
      CHECK(h.timing().done_ns >= h.timing().last_receive_ns);
    } else {
      w.barrier("pushed 0", o.timeout_ms);  // only after worker 0 looked
      w.push_pull(0, 0).wait(o.timeout_ms);
    }
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
}

TEST_MAIN()
