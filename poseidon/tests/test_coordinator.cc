// Rendezvous, address book, plan agreement and barriers through the
// coordinator, and the send queue's priority order.

#include <array>
#include <atomic>

#include "check.h"
#include "cluster.h"
#include "poseidon/internal/send_queue.h"

using namespace poseidon;

TEST(every_worker_gets_the_same_plan_and_address_book) {
  ptest::ClusterOptions o;
  o.workers = 3;
  o.servers = 2;
  o.transport = "tcp";
  o.chunk_bytes = 1 << 20;
  ptest::LocalCluster cluster(o);
  std::mutex mu;
  std::vector<std::vector<int>> schemes;
  std::vector<std::vector<std::string>> books;
  LayerSpec fc;
  fc.layer_id = 2;
  fc.name = "fc7";
  fc.kind = LayerKind::kFullyConnected;
  fc.m = 4096;
  fc.n = 4096;
  fc.k = 32;
  fc.num_floats = 4096 * 4096 + 4096;
  LayerSpec small_fc = fc;  // 10x10 with K=32: PS moves fewer bytes
  small_fc.layer_id = 3;
  small_fc.name = "fc8";
  small_fc.m = small_fc.n = 10;
  small_fc.num_floats = 110;
  LayerSpec conv = ptest::ps_layer(1, 1000);
  conv.kind = LayerKind::kConvolution;
  conv.force = SchemeChoice::kAuto;
  const auto errors = cluster.run_workers([&](Worker& w, int) {
    const Plan& p = w.plan({conv, fc, small_fc});
    std::vector<int> s;
    for (const LayerPlan& l : p.layers) s.push_back(static_cast<int>(l.scheme));
    std::vector<std::string> b = w.address_book().workers;
    b.insert(b.end(), w.address_book().servers.begin(), w.address_book().servers.end());
    {
      std::lock_guard<std::mutex> lock(mu);
      schemes.push_back(s);
      books.push_back(b);
    }
    CHECK_EQ(p.chunk_bytes, size_t{1} << 20);
    CHECK_EQ(w.address_book().workers[static_cast<size_t>(w.rank())], w.address());
    w.barrier("a", o.timeout_ms);
    w.barrier("b", o.timeout_ms);
    w.shutdown(o.timeout_ms);
  });
  cluster.join();
  for (const std::string& e : errors) CHECK_EQ(e, std::string());
  REQUIRE(schemes.size() == 3);
  CHECK(schemes[0] == schemes[1] && schemes[1] == schemes[2]);
  CHECK(books[0] == books[1] && books[1] == books[2]);
  CHECK_EQ(schemes[0][0], static_cast<int>(Scheme::kPS));   // conv
  CHECK_EQ(schemes[0][1], static_cast<int>(Scheme::kSFB));  // fc7 at P=3
  CHECK_EQ(schemes[0][2], static_cast<int>(Scheme::kPS));   // tiny FC
  CHECK(cluster.coordinator().plan().has_value());
}

TEST(cluster_wide_forced_scheme) {
  for (const SchemeChoice force : {SchemeChoice::kPS, SchemeChoice::kSFB}) {
    ptest::ClusterOptions o;
    o.workers = 2;
    o.transport = "inproc";
    o.scheme = force;
    ptest::LocalCluster cluster(o);
    const auto errors = cluster.run_workers([&](Worker& w, int) {
      LayerSpec s = ptest::sfb_layer(0);  // FC: every scheme can serve it
      s.force = SchemeChoice::kAuto;
      const Plan& p = w.plan({s});
      CHECK_EQ(static_cast<int>(p.layers[0].scheme), static_cast<int>(force));
      w.shutdown(o.timeout_ms);
    });
    cluster.join();
    for (const std::string& e : errors) CHECK_EQ(e, std::string());
  }
}

TEST(send_queue_orders_by_iteration_layer_order) {
  auto transport = make_transport("inproc");
  auto listener = transport->listen("inproc://");
  auto client = transport->connect(listener->address(), Deadline::after_ms(1000));
  auto server_end = listener->accept();
  auto peer = std::make_shared<Peer>(std::move(client), NodeId{Role::kWorker, 0, "a"},
                                     NodeId{Role::kServer, 0, "b"}, Peer::Options{1 << 20, 1000});
  SendQueue queue(1, 1000);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  // The first job holds the only comm thread in its completion callback
  // until every other job is queued, so the order below is the queue's.
  SendJob blocker;
  blocker.peer = peer;
  blocker.header.type = FrameType::kPush;
  blocker.header.layer = 100;
  blocker.done = [&](const SendOutcome&) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  };
  queue.push(std::move(blocker));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::vector<std::array<int64_t, 3>> keys = {{1, 5, 0}, {0, 9, 2}, {0, 9, 1},
                                                    {0, 2, 7}, {1, 0, 0}, {0, 2, 3}};
  for (const auto& k : keys) {
    SendJob j;
    j.peer = peer;
    j.header.type = FrameType::kPush;
    j.header.iteration = k[0];
    j.header.layer = static_cast<uint32_t>(k[1]);
    j.header.chunk = static_cast<uint32_t>(k[2]);
    j.order = static_cast<uint64_t>(k[2]);
    queue.push(std::move(j));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  std::vector<std::array<int64_t, 3>> got;
  for (size_t i = 0; i < keys.size() + 1; ++i) {
    uint8_t hb[kFrameHeaderBytes];
    server_end->read_exact(hb, sizeof hb, Deadline::after_ms(2000));
    FrameHeader h;
    REQUIRE(decode_header(hb, sizeof hb, 1 << 20, &h).empty());
    if (i > 0) got.push_back({h.iteration, h.layer, h.chunk});
  }
  const std::vector<std::array<int64_t, 3>> want = {{0, 2, 3}, {0, 2, 7}, {0, 9, 1},
                                                    {0, 9, 2}, {1, 0, 0}, {1, 5, 0}};
  CHECK(got == want);
  queue.stop();
  // After stop, a job fails at once with the reason instead of hanging.
  std::string err;
  SendJob late;
  late.peer = peer;
  late.done = [&](const SendOutcome& e) { err = e.error; };
  queue.push(std::move(late));
  CHECK_CONTAINS(err, "stopped");
}

TEST_MAIN()
