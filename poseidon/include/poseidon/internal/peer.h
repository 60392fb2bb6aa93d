#pragma once
// An authenticated, persistent connection to one other node, with its own
// reader thread. The reader decodes each header and hands it to the owner's
// FrameFn, which reads the payload straight into its destination
// (read_payload) — a registered gradient range, a sum buffer, a factor slot.
//
// Note [peer threads]: exactly one reader thread per peer, so frames from one
// peer are handled in order, and a slow peer never delays another. Writers
// are any threads; a timed mutex serializes them per connection, so a frame's
// bytes are never interleaved with another frame's.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "poseidon/internal/frame.h"
#include "poseidon/internal/node_id.h"
#include "poseidon/internal/transport.h"

namespace poseidon {

// How long a node that ends (normally or on abort) spends on its last words:
// one frame (ABORT, SHUTDOWN, GOODBYE) to each peer, then waiting for the
// peers to close their side, so that no unread byte turns our close into a
// reset. Every node (coordinator, shard, worker) uses the same two.
inline constexpr int kTeardownSendMs = 500;
inline constexpr int kTeardownWaitMs = 2000;

// A peer's close reasons read "worker 1 (addr): what"; this keeps only "what"
// (for messages that name the peer themselves).
inline std::string strip_peer_name(const std::string& reason, const std::string& name) {
  const std::string prefix = name + ": ";
  return reason.rfind(prefix, 0) == 0 ? reason.substr(prefix.size()) : reason;
}

class Peer {
 public:
  struct Options {
    size_t max_frame_bytes = 0;  // larger payloads end the connection
    int io_timeout_ms = 0;       // once a frame has started, the rest must come within this
  };
  // Called on the reader thread for each frame. It may call read_payload /
  // read_body for up to header.payload_bytes; whatever it leaves unread is
  // skipped. Throwing ProtocolError rejects the frame: the peer is sent ERROR
  // with the message and the connection is closed.
  using FrameFn = std::function<void(Peer&, const FrameHeader&)>;
  // Called once on the reader thread when it stops. `reason` starts with the
  // peer's name. `clean` is true when the peer said GOODBYE first or this
  // side closed the connection on purpose (close_gracefully / shutdown).
  using ClosedFn = std::function<void(Peer&, const std::string& reason, bool clean)>;

  Peer(std::unique_ptr<Connection> conn, NodeId self, NodeId remote, Options options);
  // Shuts the connection and joins the reader. Never destroy a peer from its
  // own reader thread (owners keep peers alive until they stop).
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Starts the reader thread. Call once.
  void start(FrameFn on_frame, ClosedFn on_closed);

  // Sends one frame; fills the sender fields of `header` with this node's
  // identity and payload_bytes with `bytes`. Blocks until written or
  // `deadline`. Thread-safe. `payload` stays the caller's. Throws
  // TransportError naming the peer.
  void send(FrameHeader header, const void* payload, size_t bytes, Deadline deadline);
  void send_message(FrameType type, const std::vector<uint8_t>& body, Deadline deadline);
  // Like send_message but never throws; returns false if it could not be
  // written within `timeout_ms`. For ERROR, ABORT and GOODBYE on teardown.
  bool try_send_message(FrameType type, const std::vector<uint8_t>& body, int timeout_ms) noexcept;

  // Reader thread only, inside FrameFn: reads `bytes` of the current payload
  // into `dst` (the caller's buffer). Throws ProtocolError if more than the
  // payload is requested, TransportError on I/O failure or timeout.
  void read_payload(void* dst, size_t bytes);
  // Reader thread only: reads `bytes` of the current payload in pieces (see
  // Connection::read_pieces).
  void read_payload_pieces(size_t bytes, uint8_t* bounce, size_t bounce_bytes,
                           const Connection::PieceSink& sink);
  // Reads the whole remaining payload into a vector (control messages).
  std::vector<uint8_t> read_body();

  // Sends GOODBYE and half-closes: the peer sees a clean EOF; our reader
  // keeps draining until the peer closes too. Thread-safe, best effort.
  void close_gracefully(int timeout_ms) noexcept;
  // Ends the connection now (wakes reader and writers). Thread-safe.
  void shutdown() noexcept;
  // Waits until the reader has stopped (true) or `deadline` (false). Never
  // call from the reader thread.
  bool wait_stopped(Deadline deadline);
  bool stopped() const { return stopped_.load(); }
  // True once the peer said GOODBYE.
  bool said_goodbye() const { return goodbye_.load(); }

  const NodeId& self() const { return self_; }
  const NodeId& remote() const { return remote_; }
  std::string remote_address() const { return conn_->remote_address(); }

  // Owner-defined flag (e.g. "first connection of this rank"). Set before start().
  bool primary = true;

 private:
  void reader_loop();
  void skip_rest();

  std::unique_ptr<Connection> conn_;
  const NodeId self_;
  const NodeId remote_;
  const Options options_;
  FrameFn on_frame_;
  ClosedFn on_closed_;
  std::timed_mutex send_mu_;
  std::thread reader_;
  uint64_t unread_ = 0;  // reader thread only
  std::atomic<bool> goodbye_{false};
  std::atomic<bool> closing_{false};
  std::atomic<bool> stopped_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
};

}  // namespace poseidon
