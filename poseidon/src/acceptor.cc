#include "poseidon/acceptor.h"

#include "poseidon/log.h"

namespace poseidon {

Acceptor::Acceptor(std::unique_ptr<Listener> listener, NodeId self, std::string token,
                   int handshake_timeout_ms, AdmitFn admit, PeerFn on_peer, std::string log_who)
    : listener_(std::move(listener)),
      address_(listener_->address()),
      self_(std::move(self)),
      token_(std::move(token)),
      handshake_timeout_ms_(handshake_timeout_ms),
      admit_(std::move(admit)),
      on_peer_(std::move(on_peer)),
      who_(std::move(log_who)) {}

Acceptor::~Acceptor() { stop(); }

void Acceptor::start() {
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void Acceptor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !accept_thread_.joinable()) return;
    stopping_ = true;
    for (Pending& p : pending_) {
      if (p.conn) p.conn->shutdown();
    }
  }
  listener_->close();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<Pending> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(pending_);
  }
  for (Pending& p : all) {
    if (p.thread.joinable()) p.thread.join();
  }
}

void Acceptor::reap_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->done) {
      it->thread.join();  // finished: returns at once
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void Acceptor::accept_loop() {
  for (;;) {
    std::unique_ptr<Connection> conn = listener_->accept();
    if (!conn) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    reap_locked();
    if (pending_.size() >= static_cast<size_t>(kMaxPendingHandshakes)) {
      log_line(who_, "rejected connection from " + conn->remote_address() + ": more than " +
                         std::to_string(kMaxPendingHandshakes) + " handshakes in progress");
      continue;  // dropping conn closes it
    }
    pending_.emplace_back();
    Pending* p = &pending_.back();
    p->conn = std::move(conn);
    p->thread = std::thread([this, p] { handshake(p); });
  }
}

void Acceptor::handshake(Pending* p) {
  Connection* conn = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conn = p->conn.get();
  }
  const std::string remote = conn->remote_address();
  try {
    const NodeId id =
        server_handshake(*conn, self_, token_, admit_, Deadline::after_ms(handshake_timeout_ms_));
    std::unique_ptr<Connection> owned;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) owned = std::move(p->conn);
    }
    if (owned) on_peer_(std::move(owned), id);
  } catch (const std::exception& e) {
    bool quiet = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      quiet = stopping_;
    }
    if (!quiet) log_line(who_, "rejected connection from " + remote + ": " + e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (p->conn) p->conn->shutdown();
  p->done = true;
}

}  // namespace poseidon
