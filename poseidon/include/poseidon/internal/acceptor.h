#pragma once
// Accepts connections on a listener and runs the server side of the
// handshake for each, so that no stranger — silent, slow or hostile, one or
// thousands — keeps a real peer out or delays it. A connection that has sent
// nothing yet costs no thread: one watcher thread polls them all, and drops
// those silent past a short first-bytes timeout, or the oldest when too many
// wait. Once a connection's first bytes arrive, its handshake runs on a
// short-lived thread of its own. Nothing reaches the owner before the
// handshake succeeded; refused connections are logged with the remote address
// and the reason, rate-limited (reject_log.h), and dropped. Note [silent
// connections] in acceptor.cc says why.

#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "poseidon/internal/deadline.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/reject_log.h"
#include "poseidon/internal/transport.h"

namespace poseidon {

// A real peer sends HELLO in the same breath as its connect
// (client_handshake), so its first bytes arrive within a round trip.
inline constexpr int kFirstBytesTimeoutMs = 1000;
// Handshakes past their first bytes, each on its thread, at most at once.
inline constexpr size_t kMaxHandshakesInProgress = 128;

// Silent connections one acceptor keeps at most: an eighth of this process's
// descriptor limit (RLIMIT_NOFILE, soft), within [64, 4096], so that the
// three acceptors a process may hold never run it out of descriptors.
size_t default_max_silent_connections();

struct AcceptorLimits {
  // A connection must send its first byte within this (never longer than
  // the handshake timeout).
  int first_bytes_timeout_ms = kFirstBytesTimeoutMs;
  // Beyond this many silent connections, the oldest is dropped.
  size_t max_silent = default_max_silent_connections();
  // Beyond this many handshakes in progress, the oldest is aborted.
  size_t max_handshakes = kMaxHandshakesInProgress;
  int log_window_ms = kRejectLogWindowMs;  // RejectLog's summary window
};

class Acceptor {
 public:
  // Receives each authenticated connection and the identity it proved.
  // Runs on the handshake thread; must not block for long.
  using PeerFn = std::function<void(std::unique_ptr<Connection>, const NodeId&)>;

  // `listener` is owned. `handshake_timeout_ms` bounds a handshake from the
  // connection's accept to HELLO_ACK. Nothing runs before start(). Throws
  // TransportError when the watcher's wake-up pipe cannot be made.
  Acceptor(std::unique_ptr<Listener> listener, NodeId self, std::string token,
           int handshake_timeout_ms, AdmitFn admit, PeerFn on_peer, std::string log_who,
           AcceptorLimits limits = {});
  ~Acceptor();  // stop()

  // Starts the accept and watcher threads; returns at once. Call once, from
  // the owner's thread, before stop().
  void start();
  // Closes the listener, drops the silent connections, aborts handshakes in
  // progress, joins every thread and writes the pending log summaries.
  // Blocks until then (a handshake thread in on_peer is waited for).
  // Thread-safe, idempotent; not from inside on_peer.
  void stop();
  // The listener's bound address. Thread-safe, never blocks.
  std::string address() const { return address_; }

 private:
  struct Waiting {  // silent: accepted, nothing received yet (watcher's own)
    std::unique_ptr<Connection> conn;
    Clock::time_point accepted;
  };
  struct Handshake {
    std::unique_ptr<Connection> conn;  // null once handed to on_peer
    Clock::time_point accepted;
    std::thread thread;
    bool aborted = false;  // shut down to make room for newer handshakes
    bool done = false;
  };
  void accept_loop();
  void watch_loop();
  void handshake(Handshake* h);
  void start_handshake_locked(std::unique_ptr<Connection> conn, Clock::time_point accepted);
  void reap_locked();
  void wake();

  std::unique_ptr<Listener> listener_;
  const std::string address_;
  const NodeId self_;
  const std::string token_;
  const int handshake_timeout_ms_;
  const AdmitFn admit_;
  const PeerFn on_peer_;
  const std::string who_;
  const AcceptorLimits limits_;
  RejectLog log_;
  int wake_read_ = -1;  // self-pipe: wake() ends the watcher's poll
  int wake_write_ = -1;
  std::mutex stop_mu_;  // serializes stop()
  std::thread accept_thread_;
  std::thread watch_thread_;
  std::mutex mu_;                    // guards everything below
  std::deque<Waiting> arrivals_;     // accept thread -> watcher
  std::list<Handshake> handshakes_;  // oldest first
  bool stopping_ = false;
};

}  // namespace poseidon
