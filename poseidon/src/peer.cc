#include "poseidon/internal/peer.h"

#include <condition_variable>

#include "poseidon/internal/messages.h"

namespace poseidon {

Peer::Peer(std::unique_ptr<Connection> conn, NodeId self, NodeId remote, Options options)
    : conn_(std::move(conn)),
      self_(std::move(self)),
      remote_(std::move(remote)),
      options_(options) {}

Peer::~Peer() {
  shutdown();
  if (reader_.joinable()) reader_.join();
}

void Peer::start(FrameFn on_frame, ClosedFn on_closed) {
  on_frame_ = std::move(on_frame);
  on_closed_ = std::move(on_closed);
  reader_ = std::thread([this] { reader_loop(); });
}

void Peer::send(FrameHeader header, const void* payload, size_t bytes, Deadline deadline) {
  header.sender_role = self_.role;
  header.sender_rank = static_cast<uint32_t>(self_.rank);
  header.payload_bytes = bytes;
  uint8_t hb[kFrameHeaderBytes];
  encode_header(header, hb);
  std::unique_lock<std::timed_mutex> lock(send_mu_, std::defer_lock);
  if (!lock.try_lock_until(deadline.time_point())) {
    throw TransportError(TransportError::Kind::kTimeout,
                         "send to " + remote_.str() + " timed out waiting for the connection");
  }
  try {
    conn_->write_frame(hb, sizeof hb, payload, bytes, deadline);
  } catch (const TransportError& e) {
    throw TransportError(e.kind(), remote_.str() + ": " + e.what());
  }
}

void Peer::send_message(FrameType type, const std::vector<uint8_t>& body, Deadline deadline) {
  FrameHeader h;
  h.type = type;
  send(h, body.data(), body.size(), deadline);
}

bool Peer::try_send_message(FrameType type, const std::vector<uint8_t>& body,
                            int timeout_ms) noexcept {
  try {
    send_message(type, body, Deadline::after_ms(timeout_ms));
    return true;
  } catch (...) {
    return false;
  }
}

void Peer::read_payload(void* dst, size_t bytes) {
  if (bytes > unread_) {
    throw ProtocolError("read of " + std::to_string(bytes) + " bytes past the end of a " +
                        std::to_string(unread_) + "-byte payload from " + remote_.str());
  }
  conn_->read_exact(dst, bytes, Deadline::after_ms(options_.io_timeout_ms));
  unread_ -= bytes;
}

void Peer::read_payload_pieces(size_t bytes, uint8_t* bounce, size_t bounce_bytes,
                               const Connection::PieceSink& sink) {
  if (bytes > unread_) {
    throw ProtocolError("read of " + std::to_string(bytes) + " bytes past the end of a " +
                        std::to_string(unread_) + "-byte payload from " + remote_.str());
  }
  conn_->read_pieces(bytes, Deadline::after_ms(options_.io_timeout_ms), bounce, bounce_bytes, sink);
  unread_ -= bytes;
}

std::vector<uint8_t> Peer::read_body() {
  std::vector<uint8_t> body(unread_);
  read_payload(body.data(), body.size());
  return body;
}

void Peer::skip_rest() {
  uint8_t sink[4096];
  while (unread_ > 0) {
    const size_t n = unread_ < sizeof sink ? static_cast<size_t>(unread_) : sizeof sink;
    read_payload(sink, n);
  }
}

void Peer::close_gracefully(int timeout_ms) noexcept {
  closing_ = true;
  try_send_message(FrameType::kGoodbye, {}, timeout_ms);
  try {
    conn_->close_write();
  } catch (...) {
  }
}

void Peer::shutdown() noexcept {
  closing_ = true;
  try {
    conn_->shutdown();
  } catch (...) {
  }
}

bool Peer::wait_stopped(Deadline deadline) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  return stop_cv_.wait_until(lock, deadline.time_point(), [&] { return stopped_.load(); });
}

void Peer::reader_loop() {
  std::string reason;
  for (;;) {
    try {
      uint8_t hb[kFrameHeaderBytes];
      // Idle connections may wait forever for the next frame (closing the
      // connection wakes us); once a frame has begun, the rest must follow
      // within the I/O timeout, so a truncated frame cannot pin this thread.
      try {
        conn_->read_exact(hb, 1, Deadline::never());
      } catch (const TransportError& e) {
        // Between frames: the usual way a peer goes away, say it plainly.
        if (e.kind() == TransportError::Kind::kClosed && !closing_.load()) {
          throw TransportError(e.kind(), "connection closed (EOF)");
        }
        if (e.kind() == TransportError::Kind::kReset) {
          throw TransportError(e.kind(), "connection reset");
        }
        throw;
      }
      conn_->read_exact(hb + 1, sizeof hb - 1, Deadline::after_ms(options_.io_timeout_ms));
      FrameHeader h;
      const std::string err = decode_header(hb, sizeof hb, options_.max_frame_bytes, &h);
      if (!err.empty()) throw ProtocolError("bad frame: " + err);
      if (h.sender_role != remote_.role || h.sender_rank != static_cast<uint32_t>(remote_.rank)) {
        throw ProtocolError("frame claims to come from " + std::string(role_name(h.sender_role)) +
                            " " + std::to_string(h.sender_rank) + " on this connection");
      }
      unread_ = h.payload_bytes;
      if (h.type == FrameType::kGoodbye) {
        goodbye_ = true;
        skip_rest();
        continue;
      }
      if (h.type == FrameType::kError) {
        const std::vector<uint8_t> body = read_body();
        reason = remote_.str() + " reported an error: " + decode_text(body.data(), body.size());
        break;
      }
      on_frame_(*this, h);
      skip_rest();
    } catch (const ProtocolError& e) {
      reason = remote_.str() + ": " + e.what();
      try_send_message(FrameType::kError, encode_text(e.what()), 200);
      break;
    } catch (const std::exception& e) {
      reason = remote_.str() + ": " + e.what();
      break;
    }
  }
  conn_->shutdown();
  const bool clean = goodbye_.load() || closing_.load();
  if (on_closed_) on_closed_(*this, reason, clean);
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopped_ = true;
  }
  stop_cv_.notify_all();
}

}  // namespace poseidon
