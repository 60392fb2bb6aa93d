#pragma once
// A node's abort latch. The first failure a node sees — a peer's EOF, a
// protocol error, a timed-out wait, an ABORT from the coordinator or a peer —
// trips it once; every component subscribed then fails its pending work with
// that reason, so every waiting thread ends with the same message.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "poseidon/internal/deadline.h"
#include "poseidon/internal/messages.h"

namespace poseidon {

class AbortSignal {
 public:
  // Records `failure` if nothing was recorded yet and runs every subscriber
  // on this thread (outside the lock). Returns true for the first call only.
  // Thread-safe.
  bool trip(const Failure& failure);
  bool tripped() const;
  // The recorded failure; empty fields until tripped. Thread-safe.
  Failure failure() const;
  // Runs `fn` on trip (at once, on this thread, if already tripped).
  // Subscribers must not call subscribe(). Thread-safe.
  void subscribe(std::function<void(const Failure&)> fn);
  // Blocks until tripped (true) or `deadline` (false). Thread-safe.
  bool wait(Deadline deadline) const;
  // For teardown: from now on trip() records nothing and runs no subscriber
  // (records `failure` if nothing was recorded), and this call blocks until
  // subscribers already running have returned, so the components they touch
  // can be destroyed safely afterwards. Thread-safe; not from a subscriber.
  void seal(const Failure& failure);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool tripped_ = false;
  bool sealed_ = false;
  int running_ = 0;  // subscriber calls in progress
  Failure failure_;
  std::vector<std::function<void(const Failure&)>> subscribers_;
};

}  // namespace poseidon
