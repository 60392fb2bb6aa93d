#include "poseidon/handle.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "poseidon/internal/op_state.h"

namespace poseidon {

int64_t steady_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

OpState::OpState(std::string what, uint32_t layer, int64_t iteration, std::string piece_noun,
                 std::vector<std::string> sources, uint64_t sends, std::weak_ptr<AbortSignal> abort,
                 std::string node)
    : what_(std::move(what)),
      layer_(layer),
      iteration_(iteration),
      piece_noun_(std::move(piece_noun)),
      sources_(std::move(sources)),
      abort_(std::move(abort)),
      node_(std::move(node)),
      arrived_(sources_.size(), 0),
      pieces_left_(sources_.size()),
      sends_left_(sends),
      queued_ns_(steady_clock_ns()) {
  if (sends_left_ == 0) first_send_ns_ = queued_ns_;  // nothing to send: no sending phase
  if (pieces_left_ == 0) all_in_ns_ = queued_ns_;
  maybe_complete_locked();
}

bool OpState::piece_done(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= arrived_.size() || arrived_[i]) return false;
  arrived_[i] = 1;
  if (--pieces_left_ == 0) all_in_ns_ = steady_clock_ns();
  maybe_complete_locked();
  return true;
}

bool OpState::is_piece_done(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return i < arrived_.size() && arrived_[i];
}

void OpState::send_started() {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_send_ns_ == 0) first_send_ns_ = steady_clock_ns();
}

void OpState::send_done() {
  std::lock_guard<std::mutex> lock(mu_);
  if (sends_left_ > 0) --sends_left_;
  maybe_complete_locked();
}

void OpState::maybe_complete_locked() {
  if (!complete_ && !failed_ && pieces_left_ == 0 && sends_left_ == 0) {
    complete_ = true;
    done_ns_ = steady_clock_ns();
    cv_.notify_all();
  }
}

void OpState::fail(const Failure& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (complete_ || failed_) return;
  failed_ = true;
  failure_ = failure;
  cv_.notify_all();
}

bool OpState::complete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_;
}

bool OpState::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_ || failed_;
}

void OpState::throw_failure_locked() const {
  throw PeerFailure(what_ + " failed: " + failure_.reason, failure_.peer, layer_, iteration_);
}

bool OpState::test() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) throw_failure_locked();
  return complete_;
}

std::string OpState::missing() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::string> by_source;  // source -> "2,5"
  for (size_t i = 0; i < arrived_.size(); ++i) {
    if (arrived_[i]) continue;
    std::string& list = by_source[sources_[i]];
    if (!list.empty()) list += ",";
    list += std::to_string(i);
  }
  std::string out;
  for (const auto& [source, list] : by_source) {
    if (!out.empty()) out += "; ";
    out += piece_noun_ + " " + list + " from " + source;
  }
  if (sends_left_ > 0) {
    if (!out.empty()) out += "; ";
    out += std::to_string(sends_left_) + " frame(s) still to write";
  }
  return out.empty() ? "nothing" : out;
}

HandleTiming OpState::timing() const {
  std::lock_guard<std::mutex> lock(mu_);
  HandleTiming t;
  t.queued_ns = queued_ns_;
  t.first_send_ns = first_send_ns_;
  // Receiving ends no earlier than sending starts (Note [handle timing]).
  if (pieces_left_ == 0 && first_send_ns_ != 0) {
    t.last_receive_ns = std::max(all_in_ns_, first_send_ns_);
  }
  if (complete_) t.done_ns = done_ns_;
  return t;
}

void OpState::wait(int timeout_ms) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    cv_.wait_until(lock, deadline.time_point(), [&] { return complete_ || failed_; });
    if (failed_) throw_failure_locked();
    if (complete_) return;
  }
  const std::string message = what_ + " timed out after " + std::to_string(timeout_ms) + " ms on " +
                              node_ + "; missing: " + missing();
  if (auto abort = abort_.lock()) abort->trip(Failure{node_, message});
  throw TimeoutError(message);
}

void Handle::wait(int timeout_ms) const { state_->wait(timeout_ms); }
bool Handle::test() const { return state_->test(); }
HandleTiming Handle::timing() const { return state_->timing(); }
uint32_t Handle::layer() const { return state_->layer(); }
int64_t Handle::iteration() const { return state_->iteration(); }

}  // namespace poseidon
