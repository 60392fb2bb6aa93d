#include "poseidon/internal/abort_signal.h"

namespace poseidon {

bool AbortSignal::trip(const Failure& failure) {
  std::vector<std::function<void(const Failure&)>> subs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tripped_) return false;
    tripped_ = true;
    failure_ = failure;
    subs = subscribers_;
    ++running_;
  }
  cv_.notify_all();
  for (auto& fn : subs) fn(failure);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  cv_.notify_all();
  return true;
}

bool AbortSignal::tripped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tripped_;
}

Failure AbortSignal::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void AbortSignal::subscribe(std::function<void(const Failure&)> fn) {
  Failure f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sealed_) return;
    if (!tripped_) {
      subscribers_.push_back(std::move(fn));
      return;
    }
    f = failure_;
  }
  fn(f);
}

void AbortSignal::seal(const Failure& failure) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!tripped_) {
    tripped_ = true;
    failure_ = failure;
  }
  sealed_ = true;
  subscribers_.clear();
  cv_.notify_all();
  cv_.wait(lock, [&] { return running_ == 0; });
}

bool AbortSignal::wait(Deadline deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline.time_point(), [&] { return tripped_; });
}

}  // namespace poseidon
