#pragma once
// What a KV-store shard and a worker running in the same process share
// besides their in-process connection (Config::local_server): the worker's
// registered gradient ranges, which it lends to the shard so that the shard
// sums the other workers' pushes straight into them and answers the other
// workers from them (kv_server.h, Note [in-place rounds]). The worker's own
// push and its reply then cost no copy at all.
//
// Links live in one process-wide table keyed by the shard's in-process
// address, like the in-process transport's listeners: the worker dials that
// address and finds the link under the same name.
//
// Note [lending]: a range is the worker's memory (the caller's, valid while
// the Worker lives). The shard touches it only inside a use — begin_use ..
// end_use: adding one piece of a push, or writing one reply from it — and
// starts no use once the worker has revoked the loan. The worker revokes
// when it aborts (so a failed push_pull leaves nothing writing into the
// range) and when it closes (so its destructor returns only once the shard
// let go), and revoke waits for the uses in progress.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "poseidon/internal/deadline.h"

namespace poseidon {

class ColocatedLink {
 public:
  // Creates the link of the shard whose in-process door is `address` and
  // lists it under that name. Throws ConfigError if the name is listed.
  // Thread-safe.
  static std::shared_ptr<ColocatedLink> open(const std::string& address);
  // The link listed under `address`, or nullptr. Thread-safe.
  static std::shared_ptr<ColocatedLink> find(const std::string& address);
  // Unlists the link (its shard is going away); holders keep the object.
  // Idempotent, thread-safe.
  void close();

  explicit ColocatedLink(std::string address) : address_(std::move(address)) {}
  ColocatedLink(const ColocatedLink&) = delete;
  ColocatedLink& operator=(const ColocatedLink&) = delete;

  // ---- worker side
  // Lends worker `rank`'s range of `layer_id`: `num_floats` floats at
  // `data`, valid until revoke(rank) returned true. Setup only; thread-safe.
  // Throws ConfigError if that layer is lent twice.
  void lend(int rank, uint32_t layer_id, float* data, size_t num_floats);
  // No use of worker `rank`'s ranges starts from now on (permanent). Blocks
  // until the uses in progress ended (true) or `deadline` (false).
  // Idempotent, thread-safe; never call it while holding a use.
  bool revoke(int rank, Deadline deadline);

  // ---- shard side
  struct Range {
    float* data = nullptr;
    size_t num_floats = 0;
    bool lent = false;  // false: no such range
  };
  // Worker `rank`'s range of `layer_id`. Non-blocking, thread-safe. The
  // memory may be touched only inside a use.
  Range range(int rank, uint32_t layer_id) const;
  // Starts a use of worker `rank`'s ranges; false (and no use) once revoked.
  // Non-blocking, thread-safe. Every true is paired with one end_use.
  bool begin_use(int rank);
  void end_use(int rank);

  const std::string& address() const { return address_; }

 private:
  struct Lender {
    std::map<uint32_t, Range> ranges;
    int uses = 0;
    bool revoked = false;
  };

  const std::string address_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Lender> lenders_;  // by worker rank
};

// A use for the current scope (see ColocatedLink::begin_use).
class ScopedUse {
 public:
  ScopedUse(ColocatedLink& link, int rank) : link_(link), rank_(rank), ok_(link.begin_use(rank)) {}
  ~ScopedUse() {
    if (ok_) link_.end_use(rank_);
  }
  ScopedUse(const ScopedUse&) = delete;
  ScopedUse& operator=(const ScopedUse&) = delete;
  explicit operator bool() const { return ok_; }

 private:
  ColocatedLink& link_;
  const int rank_;
  const bool ok_;
};

}  // namespace poseidon
