// ColocatedLink (internal/colocated.h): the process-wide table of links, the ranges a
// worker lends, and the uses a revoke waits for and then refuses.

#include <atomic>
#include <chrono>
#include <thread>

#include "check.h"
#include "poseidon/errors.h"
#include "poseidon/internal/colocated.h"

using namespace poseidon;

TEST(links_are_found_by_address_until_closed) {
  auto link = ColocatedLink::open("inproc://test-link-a");
  CHECK(ColocatedLink::find("inproc://test-link-a") == link);
  CHECK(ColocatedLink::find("inproc://test-link-b") == nullptr);
  CHECK_THROWS(ColocatedLink::open("inproc://test-link-a"), ConfigError, "already open");
  link->close();
  CHECK(ColocatedLink::find("inproc://test-link-a") == nullptr);
  // A holder keeps the object; the name can be reused.
  auto again = ColocatedLink::open("inproc://test-link-a");
  CHECK(again != link);
  again->close();
}

TEST(ranges_are_lent_per_worker_and_layer) {
  ColocatedLink link("inproc://test-ranges");
  float a[4] = {0, 0, 0, 0};
  link.lend(1, 7, a, 4);
  CHECK(link.range(1, 7).lent);
  CHECK(link.range(1, 7).data == a);
  CHECK_EQ(link.range(1, 7).num_floats, size_t{4});
  CHECK(!link.range(1, 8).lent);
  CHECK(!link.range(0, 7).lent);
  link.lend(2, 0, nullptr, 0);  // an empty layer is lent too
  CHECK(link.range(2, 0).lent);
  CHECK_THROWS(link.lend(1, 7, a, 4), ConfigError, "twice");
}

TEST(revoke_waits_for_the_uses_in_progress_then_refuses_new_ones) {
  ColocatedLink link("inproc://test-revoke");
  CHECK(link.begin_use(3));
  CHECK(link.begin_use(3));
  // Another worker's loan is independent.
  CHECK(link.begin_use(4));
  link.end_use(4);
  std::atomic<bool> revoked{false};
  std::thread t([&] {
    CHECK(link.revoke(3, Deadline::after_ms(10000)));
    revoked = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(!revoked.load());  // two uses still in progress
  link.end_use(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!revoked.load());
  link.end_use(3);
  t.join();
  CHECK(revoked.load());
  CHECK(!link.begin_use(3));                     // permanent
  CHECK(link.revoke(3, Deadline::after_ms(0)));  // idempotent
  {
    ScopedUse use(link, 3);
    CHECK(!use);
  }
  CHECK(link.begin_use(4));
  link.end_use(4);
}

TEST(revoke_gives_up_at_its_deadline) {
  ColocatedLink link("inproc://test-deadline");
  {
    ScopedUse use(link, 0);
    CHECK(static_cast<bool>(use));
    CHECK(!link.revoke(0, Deadline::after_ms(30)));  // the use outlives the deadline
  }
  CHECK(link.revoke(0, Deadline::after_ms(0)));  // ended with the scope
}

TEST_MAIN()
