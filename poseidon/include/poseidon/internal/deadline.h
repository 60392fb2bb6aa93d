#pragma once
// A point in time on the monotonic clock after which a wait gives up. Every
// blocking call in libposeidon takes one, so no wait is unbounded by accident.
// Also the one clock helper for timestamps in milliseconds (now_ms).

#include <chrono>
#include <cstdint>

namespace poseidon {

using Clock = std::chrono::steady_clock;

// Now on Clock, in ms since its (arbitrary) epoch: for timestamps compared
// with one another ("last seen 5200 ms ago"), never with wall-clock time.
inline int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

class Deadline {
 public:
  // A deadline that never expires; only for waits that something else is
  // guaranteed to end (a reader blocked for the next frame is woken by
  // closing its connection, and liveness is checked by heartbeats).
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline after_ms(int64_t ms) {
    return Deadline(Clock::now() + std::chrono::milliseconds(ms < 0 ? 0 : ms));
  }
  // `tp` itself (Clock::time_point::max(): never).
  static Deadline at(Clock::time_point tp) { return Deadline(tp); }
  bool is_never() const { return tp_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= tp_; }
  // Milliseconds left, rounded up and clamped to [0, INT32_MAX]; -1 when
  // never (poll(2)'s "infinite").
  int poll_timeout_ms() const;
  Clock::time_point time_point() const { return tp_; }
  // The earlier of the two.
  Deadline min(Deadline other) const { return other.tp_ < tp_ ? other : *this; }

 private:
  explicit Deadline(Clock::time_point tp) : tp_(tp) {}
  Clock::time_point tp_;
};

inline int Deadline::poll_timeout_ms() const {
  if (is_never()) return -1;
  const auto left = tp_ - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

}  // namespace poseidon
