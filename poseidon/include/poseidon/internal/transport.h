#pragma once
// The transport: byte-stream connections between nodes, with a TCP
// implementation and an in-process one for tests (same semantics: ordered,
// reliable, bounded buffers, EOF after close). Frames, handshakes and every
// algorithm live above this interface and run unchanged on both.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "poseidon/config.h"
#include "poseidon/errors.h"
#include "poseidon/internal/deadline.h"

namespace poseidon {

class TransportError : public CommError {
 public:
  enum class Kind { kClosed, kReset, kRefused, kTimeout, kOther };
  TransportError(Kind kind, const std::string& message) : CommError(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// One end of a persistent, full-duplex connection.
class Connection {
 public:
  virtual ~Connection() = default;
  // Writes `header_bytes` of `header` then `payload_bytes` of `payload`
  // (null allowed when 0) without copying them into an intermediate buffer
  // (TCP: one sendmsg with two iovecs). Blocks until every byte is handed to
  // the transport or `deadline` passes (TransportError kTimeout). Buffers stay
  // the caller's and are not used after return. One writer at a time: callers
  // serialize (Peer holds a lock).
  virtual void write_frame(const uint8_t* header, size_t header_bytes, const void* payload,
                           size_t payload_bytes, Deadline deadline) = 0;
  // Reads exactly `bytes` into `dst` (the caller's buffer, e.g. a registered
  // gradient range). Blocks until done or `deadline`. One reader at a time.
  // Throws TransportError: kClosed on EOF (the message says after how many
  // of the expected bytes), kReset, kTimeout.
  virtual void read_exact(void* dst, size_t bytes, Deadline deadline) = 0;
  // Reads `bytes` and hands them to `sink` in order, in pieces, for callers
  // that consume data as it comes (the shards add pushes into a sum). TCP
  // reads each piece into `bounce` (the caller's, `bounce_bytes` long, small
  // enough to stay in cache); the in-process transport hands over the
  // writer's own bytes, copying nothing. Pieces are whole floats when
  // `bytes` and `bounce_bytes` are multiples of 4 and writers write whole
  // floats. `sink` must not block on this connection. Same errors as
  // read_exact.
  using PieceSink = std::function<void(const uint8_t* data, size_t size)>;
  virtual void read_pieces(size_t bytes, Deadline deadline, uint8_t* bounce, size_t bounce_bytes,
                           const PieceSink& sink) {
    while (bytes > 0) {
      const size_t n = bytes < bounce_bytes ? bytes : bounce_bytes;
      read_exact(bounce, n, deadline);
      sink(bounce, n);
      bytes -= n;
    }
  }
  // Half-close: the peer reads EOF after the bytes already written. Reads
  // continue to work. Thread-safe, idempotent.
  virtual void close_write() = 0;
  // Ends the connection both ways and wakes blocked reads and writes, which
  // throw kClosed. Thread-safe, idempotent; the object stays valid.
  virtual void shutdown() = 0;
  // Address of the other end: "127.0.0.1:45678", "inproc://name#3".
  virtual std::string remote_address() const = 0;
  // A descriptor that poll(2) reports ready (POLLIN, POLLHUP or POLLERR) once
  // bytes, EOF or an error wait on this connection, for a caller that watches
  // many connections from one thread before reading any (the Acceptor: Note
  // [silent connections] in acceptor.cc). -1 when the transport has none (the
  // in-process one, whose connections only this process can open): treat the
  // connection as ready at once. The descriptor stays the connection's, valid
  // as long as the object: poll it, never read, write or close it.
  // Thread-safe, never blocks.
  virtual int readiness_fd() const { return -1; }
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Blocks until a connection arrives; returns nullptr once close() ran.
  virtual std::unique_ptr<Connection> accept() = 0;
  // Stops accepting and wakes accept(). Thread-safe, idempotent.
  virtual void close() = 0;
  // The bound address with the port resolved: "127.0.0.1:41234".
  virtual std::string address() const = 0;
};

struct TransportOptions {
  size_t socket_buffer_bytes = 0;  // TCP SO_SNDBUF/SO_RCVBUF; 0 keeps autotuning
  size_t notsent_lowat_bytes = kDefaultNotSentLowatBytes;  // TCP_NOTSENT_LOWAT; 0: unset
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Binds and listens. TCP: "host:port" (port 0 picks a free port).
  // In-process: "inproc://name", or "inproc://" for a fresh unique name.
  // Throws TransportError when the address is taken or malformed.
  virtual std::unique_ptr<Listener> listen(const std::string& address) = 0;
  // Dials once, blocking until connected or `deadline`. Throws
  // TransportError (kRefused when nobody listens there yet).
  virtual std::unique_ptr<Connection> connect(const std::string& address, Deadline deadline) = 0;
};

// "tcp" or "inproc"; throws ConfigError for anything else. Thread-safe.
std::unique_ptr<Transport> make_transport(const std::string& kind,
                                          const TransportOptions& options = {});

// Implementations (tcp_transport.cc, inproc_transport.cc).
std::unique_ptr<Transport> make_tcp_transport(const TransportOptions& options);
std::unique_ptr<Transport> make_inproc_transport();

}  // namespace poseidon
