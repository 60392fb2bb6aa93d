#include "poseidon/internal/send_queue.h"

namespace poseidon {

SendQueue::SendQueue(int num_threads, int io_timeout_ms) : io_timeout_ms_(io_timeout_ms) {
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { run(); });
}

SendQueue::~SendQueue() { stop(); }

void SendQueue::push(SendJob job) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      const Key key{job.header.iteration, job.header.layer, job.order, seq_++};
      jobs_.emplace(key, std::move(job));
      cv_.notify_one();
      return;
    }
    reason = cancel_reason_;
  }
  if (job.done) job.done(SendOutcome{reason, false});
}

void SendQueue::cancel_all(const std::string& reason) {
  std::map<Key, SendJob> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      cancelled_ = true;
      cancel_reason_ = reason;
    }
    dropped.swap(jobs_);
  }
  cv_.notify_all();
  for (auto& [key, job] : dropped) {
    if (job.done) job.done(SendOutcome{reason, false});
  }
}

void SendQueue::stop() {
  cancel_all("send queue stopped");
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

size_t SendQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void SendQueue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto pick = jobs_.end();
    cv_.wait(lock, [&] {
      if (stopping_) return true;
      for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
        if (!busy_.count(it->second.peer.get())) {
          pick = it;
          return true;
        }
      }
      return false;
    });
    if (stopping_) return;
    SendJob job = std::move(pick->second);
    jobs_.erase(pick);
    const Peer* peer = job.peer.get();
    busy_.insert(peer);
    lock.unlock();
    if (job.on_start) job.on_start();
    SendOutcome outcome;
    try {
      job.peer->send(job.header, job.payload, job.bytes, Deadline::after_ms(io_timeout_ms_));
    } catch (const TransportError& e) {
      outcome.error = e.what();
      outcome.connection_lost = e.kind() != TransportError::Kind::kTimeout;
    } catch (const std::exception& e) {
      outcome.error = e.what();
    }
    if (job.done) job.done(outcome);
    job = SendJob{};  // drop the peer reference outside the lock
    lock.lock();
    busy_.erase(peer);
    // A peer became free: a thread waiting only on it can go.
    cv_.notify_all();
  }
}

}  // namespace poseidon
