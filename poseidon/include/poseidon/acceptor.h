#pragma once
// Accepts connections on a listener and runs the server side of the
// handshake for each on its own short-lived thread, so one slow or hostile
// client never delays another. Nothing reaches the owner before the
// handshake succeeded; every refused connection is logged with the remote
// address and the reason, and dropped.

#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "poseidon/handshake.h"
#include "poseidon/transport.h"

namespace poseidon {

inline constexpr int kMaxPendingHandshakes = 64;

class Acceptor {
 public:
  // Receives each authenticated connection and the identity it proved.
  // Runs on the handshake thread; must not block for long.
  using PeerFn = std::function<void(std::unique_ptr<Connection>, const NodeId&)>;

  // `listener` is owned. Nothing runs before start().
  Acceptor(std::unique_ptr<Listener> listener, NodeId self, std::string token,
           int handshake_timeout_ms, AdmitFn admit, PeerFn on_peer, std::string log_who);
  ~Acceptor();  // stop()

  void start();
  // Closes the listener, aborts handshakes in progress and joins every
  // thread. Thread-safe, idempotent; not from inside on_peer.
  void stop();
  std::string address() const { return address_; }

 private:
  struct Pending {
    std::unique_ptr<Connection> conn;
    std::thread thread;
    bool done = false;
  };
  void accept_loop();
  void handshake(Pending* pending);
  void reap_locked();

  std::unique_ptr<Listener> listener_;
  const std::string address_;
  const NodeId self_;
  const std::string token_;
  const int handshake_timeout_ms_;
  const AdmitFn admit_;
  const PeerFn on_peer_;
  const std::string who_;
  std::thread accept_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Pending> pending_;
  bool stopping_ = false;
};

}  // namespace poseidon
