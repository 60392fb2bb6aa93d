#include "poseidon/internal/acceptor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "poseidon/internal/log.h"

namespace poseidon {

// Note [silent connections]
// Every node listens (coordinator, shards, workers for higher-ranked
// workers), and anyone who can reach the port can connect. Strangers must not
// be able to keep out, or slow down, the peers that will authenticate. An
// earlier design ran each accepted connection's handshake on its own thread
// under a global cap of 64: a stranger holding 64 silent connections filled
// the cap and every other connection was refused for handshake_timeout_ms
// (5 s) at a time, which turned a 1.6 s job start into 25-70 s. A cap per
// source address does not help — behind NAT, and on loopback, strangers and
// peers share one — and any cap that refuses newcomers can be filled. So:
//
// - A connection that has sent nothing costs no thread. The accept thread
//   only accepts and hands it to the watcher thread, which waits on every
//   silent connection at once (one poll(2) over their readiness_fd()) and
//   starts the handshake thread when bytes, EOF or an error arrive. A peer
//   writes HELLO in the same breath as its connect, so that is at once.
// - A short first-bytes timeout (kFirstBytesTimeoutMs, 1 s), apart from the
//   handshake timeout (5 s): a connection silent that long is dropped. For a
//   peer that is a thousand loopback round trips; for a stranger it recycles
//   the descriptors it ties up five times faster.
// - A bound that evicts, never refuses: past max_silent silent connections
//   the watcher drops the oldest. Eviction happens only after a poll, so
//   every connection it may drop was seen silent; a newcomer's HELLO is seen
//   before anything is evicted, so a peer is never the victim. The bound
//   (sized from RLIMIT_NOFILE) keeps strangers from exhausting descriptors —
//   then accept(2) itself would fail, for everyone.
// - Past its first bytes a connection gets a thread, as before: reading the
//   HELLO is blocking code (handshake.cc), and a peer's handshake ends within
//   a round trip of its first bytes. A stranger that sends a byte and stalls
//   holds its thread until handshake_timeout_ms; past max_handshakes in
//   progress, the OLDEST is aborted (shutdown() wakes its read), never the
//   newcomer. A peer's is the oldest only if max_handshakes newer stallers
//   got their first bytes in during its round trip.
// - Refusals are logged through RejectLog: the first few per window one by
//   one with the remote address and the reason, the rest (and every silent
//   drop) summarised per host, so a flood cannot flood stderr.
//
// In-process connections (readiness_fd() == -1) go straight to a handshake
// thread: only this process can open them.

size_t default_max_silent_connections() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 4096;
  const auto eighth = static_cast<size_t>(r.rlim_cur / 8);
  return std::clamp<size_t>(eighth, 64, 4096);
}

namespace {

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace

Acceptor::Acceptor(std::unique_ptr<Listener> listener, NodeId self, std::string token,
                   int handshake_timeout_ms, AdmitFn admit, PeerFn on_peer, std::string log_who,
                   AcceptorLimits limits)
    : listener_(std::move(listener)),
      address_(listener_->address()),
      self_(std::move(self)),
      token_(std::move(token)),
      handshake_timeout_ms_(handshake_timeout_ms),
      admit_(std::move(admit)),
      on_peer_(std::move(on_peer)),
      who_(std::move(log_who)),
      limits_([&] {
        AcceptorLimits l = limits;
        l.first_bytes_timeout_ms = std::min(l.first_bytes_timeout_ms, handshake_timeout_ms);
        l.max_silent = std::max<size_t>(l.max_silent, 1);
        l.max_handshakes = std::max<size_t>(l.max_handshakes, 1);
        return l;
      }()),
      log_(who_, limits_.log_window_ms, limits_.first_bytes_timeout_ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw TransportError(TransportError::Kind::kOther,
                         who_ + ": cannot make the acceptor's pipe: " + std::strerror(errno));
  }
  wake_read_ = fds[0];
  wake_write_ = fds[1];
}

Acceptor::~Acceptor() {
  stop();
  ::close(wake_read_);
  ::close(wake_write_);
}

void Acceptor::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || accept_thread_.joinable()) return;
  watch_thread_ = std::thread([this] { watch_loop(); });
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void Acceptor::wake() {
  const char byte = 1;
  // A full pipe already holds a wake-up: EAGAIN is fine.
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &byte, 1);
}

void Acceptor::stop() {
  std::lock_guard<std::mutex> serial(stop_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (Handshake& h : handshakes_) {
      if (h.conn) h.conn->shutdown();
    }
  }
  listener_->close();
  wake();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  std::deque<Waiting> arrivals;
  std::list<Handshake> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    arrivals.swap(arrivals_);
    all.swap(handshakes_);
  }
  arrivals.clear();  // closes them
  for (Handshake& h : all) {
    if (h.thread.joinable()) h.thread.join();
  }
  log_.flush(true);
}

void Acceptor::reap_locked() {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (it->done) {
      it->thread.join();  // finished: returns at once
      it = handshakes_.erase(it);
    } else {
      ++it;
    }
  }
}

void Acceptor::accept_loop() {
  for (;;) {
    std::unique_ptr<Connection> conn = listener_->accept();
    if (!conn) return;
    const Clock::time_point accepted = Clock::now();
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      if (conn->readiness_fd() < 0) {
        start_handshake_locked(std::move(conn), accepted);
        continue;
      }
      first = arrivals_.empty();  // else the watcher has a wake-up coming
      arrivals_.push_back(Waiting{std::move(conn), accepted});
    }
    if (first) wake();
  }
}

void Acceptor::watch_loop() {
  const auto first_bytes = std::chrono::milliseconds(limits_.first_bytes_timeout_ms);
  std::deque<Waiting> silent;  // oldest first, so the front's timeout is the nearest
  std::deque<Waiting> still;
  std::vector<Waiting> ready;
  std::vector<pollfd> fds;
  Clock::time_point flush_at = log_.flush(false);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      reap_locked();
      for (Waiting& w : arrivals_) silent.push_back(std::move(w));
      arrivals_.clear();
    }
    fds.clear();
    fds.push_back(pollfd{wake_read_, POLLIN, 0});
    for (const Waiting& w : silent) fds.push_back(pollfd{w.conn->readiness_fd(), POLLIN, 0});
    Clock::time_point until = flush_at;
    if (!silent.empty()) until = std::min(until, silent.front().accepted + first_bytes);
    // Over the bound: only look for who is ready, then make room.
    if (silent.size() > limits_.max_silent) until = Clock::now();
    const int rc = ::poll(fds.data(), fds.size(), Deadline::at(until).poll_timeout_ms());
    if (rc < 0 && errno != EINTR) {
      log_line(who_, std::string("acceptor: poll failed: ") + std::strerror(errno));
      ::poll(nullptr, 0, 10);  // back off instead of spinning
      continue;
    }
    if (rc > 0 && fds[0].revents != 0) {
      char buf[256];
      while (::read(wake_read_, buf, sizeof buf) > 0) {
      }
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < silent.size(); ++i) {
      Waiting& w = silent[i];
      if (rc > 0 && fds[i + 1].revents != 0) {
        ready.push_back(std::move(w));
      } else if (now >= w.accepted + first_bytes) {
        log_.dropped_silent(w.conn->remote_address(), false);  // w.conn closes below
      } else {
        still.push_back(std::move(w));
      }
    }
    silent.swap(still);
    still.clear();
    // Every one left was silent at this poll: make room by dropping the oldest.
    while (silent.size() > limits_.max_silent) {
      log_.dropped_silent(silent.front().conn->remote_address(), true);
      silent.pop_front();
    }
    if (!ready.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      for (Waiting& w : ready) start_handshake_locked(std::move(w.conn), w.accepted);
    }
    ready.clear();
    flush_at = log_.flush(false);
  }
}

void Acceptor::start_handshake_locked(std::unique_ptr<Connection> conn,
                                      Clock::time_point accepted) {
  reap_locked();
  size_t live = 0;
  for (const Handshake& h : handshakes_) live += h.conn && !h.aborted ? 1 : 0;
  // Make room by aborting the oldest (Note [silent connections]).
  for (auto it = handshakes_.begin(); live >= limits_.max_handshakes; ++it) {
    if (!it->conn || it->aborted) continue;
    it->aborted = true;
    it->conn->shutdown();  // its thread wakes, logs and ends
    --live;
  }
  handshakes_.emplace_back();
  Handshake* h = &handshakes_.back();
  h->conn = std::move(conn);
  h->accepted = accepted;
  try {
    h->thread = std::thread([this, h] { handshake(h); });
  } catch (const std::system_error& e) {  // out of threads: this one waits no longer
    log_.rejected(h->conn->remote_address(),
                  std::string("no thread for its handshake: ") + e.what());
    handshakes_.pop_back();
  }
}

void Acceptor::handshake(Handshake* h) {
  Connection* conn = nullptr;
  Clock::time_point accepted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conn = h->conn.get();
    accepted = h->accepted;
  }
  const std::string remote = conn->remote_address();
  const auto aborted_reason = [&] {
    return "aborted after " + std::to_string(ms_since(accepted)) + " ms to make room: more than " +
           std::to_string(limits_.max_handshakes) + " handshakes in progress";
  };
  try {
    const Deadline deadline = Deadline::after_ms(handshake_timeout_ms_ - ms_since(accepted));
    const NodeId id = server_handshake(*conn, self_, token_, admit_, deadline);
    std::unique_ptr<Connection> owned;
    bool aborted = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      aborted = h->aborted;
      if (!stopping_ && !aborted) owned = std::move(h->conn);
    }
    if (owned) {
      on_peer_(std::move(owned), id);
    } else if (aborted) {
      log_.rejected(remote, aborted_reason());
    }
  } catch (const std::exception& e) {
    bool quiet = false;
    bool aborted = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      quiet = stopping_;
      aborted = h->aborted;
    }
    if (!quiet) log_.rejected(remote, aborted ? aborted_reason() : e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (h->conn) h->conn->shutdown();
  h->done = true;
}

}  // namespace poseidon
