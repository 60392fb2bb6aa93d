#pragma once
// The errors the communication core throws. Every message is complete on its
// own: it names this node, the peer (role, rank, address), the layer key and
// the iteration wherever they are known, so a log line alone says what broke.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace poseidon {

// Base of every error thrown by libposeidon.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait ran past its deadline. Thrown by Handle::wait, barrier, connect...
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// Bytes that break the protocol: bad frame, wrong token or version, a message
// with the wrong iteration, key or size.
class ProtocolError : public CommError {
 public:
  using CommError::CommError;
};

// Invalid settings or misuse of the API, detected before anything is sent.
class ConfigError : public CommError {
 public:
  using CommError::CommError;
};

// The job is aborted: a peer died or failed, or the coordinator broadcast an
// abort. peer() names the node at the origin ("worker 1 (10.0.0.2:4100)");
// layer() and iteration() are the operation this node was waiting on, or -1.
class PeerFailure : public CommError {
 public:
  PeerFailure(const std::string& message, std::string peer, int64_t layer, int64_t iteration)
      : CommError(message), peer_(std::move(peer)), layer_(layer), iteration_(iteration) {}
  const std::string& peer() const { return peer_; }
  int64_t layer() const { return layer_; }
  int64_t iteration() const { return iteration_; }

 private:
  std::string peer_;
  int64_t layer_;
  int64_t iteration_;
};

}  // namespace poseidon
