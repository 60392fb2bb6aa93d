#include "poseidon/internal/handshake.h"

#include <cstdint>
#include <vector>

#include "poseidon/internal/frame.h"
#include "poseidon/internal/messages.h"

namespace poseidon {
namespace {

void send_frame(Connection& conn, const NodeId& self, FrameType type,
                const std::vector<uint8_t>& body, Deadline deadline) {
  FrameHeader h;
  h.type = type;
  h.sender_role = self.role;
  h.sender_rank = static_cast<uint32_t>(self.rank);
  h.payload_bytes = body.size();
  uint8_t hb[kFrameHeaderBytes];
  encode_header(h, hb);
  conn.write_frame(hb, sizeof hb, body.data(), body.size(), deadline);
}

// Best effort: the connection is about to be dropped anyway.
void send_error(Connection& conn, const NodeId& self, const std::string& reason) {
  try {
    send_frame(conn, self, FrameType::kError, encode_text(reason), Deadline::after_ms(200));
  } catch (const std::exception&) {
  }
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    const unsigned y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

NodeId client_handshake(Connection& conn, const NodeId& self, const std::string& token,
                        Deadline deadline) {
  send_frame(conn, self, FrameType::kHello, encode_hello(Hello{token, self.address}), deadline);
  uint8_t hb[kFrameHeaderBytes];
  conn.read_exact(hb, sizeof hb, deadline);
  FrameHeader h;
  const std::string err = decode_header(hb, sizeof hb, kMaxReasonBytes + 64, &h);
  const std::string who = conn.remote_address();
  if (!err.empty()) throw ProtocolError(who + " answered the handshake with a bad frame: " + err);
  std::vector<uint8_t> body(h.payload_bytes);
  conn.read_exact(body.data(), body.size(), deadline);
  if (h.type == FrameType::kError) {
    throw ProtocolError(who + " rejected the handshake: " + decode_text(body.data(), body.size()));
  }
  if (h.type != FrameType::kHelloAck) {
    throw ProtocolError(who + " answered the handshake with " +
                        frame_type_name(static_cast<uint16_t>(h.type)));
  }
  const Hello ack = decode_hello(body.data(), body.size());
  return NodeId{h.sender_role, static_cast<int>(h.sender_rank), ack.address};
}

NodeId server_handshake(Connection& conn, const NodeId& self, const std::string& token,
                        const AdmitFn& admit, Deadline deadline) {
  uint8_t hb[kFrameHeaderBytes];
  conn.read_exact(hb, sizeof hb, deadline);
  FrameHeader h;
  std::string err = decode_header(hb, sizeof hb, kMaxHelloBytes, &h);
  if (err.empty() && h.type != FrameType::kHello) {
    err = "expected HELLO first, got " + frame_type_name(static_cast<uint16_t>(h.type));
  }
  if (!err.empty()) {
    send_error(conn, self, err);
    throw ProtocolError(err);
  }
  std::vector<uint8_t> body(h.payload_bytes);
  conn.read_exact(body.data(), body.size(), deadline);
  Hello hello;
  try {
    hello = decode_hello(body.data(), body.size());
  } catch (const ProtocolError& e) {
    send_error(conn, self, e.what());
    throw;
  }
  if (!constant_time_equal(hello.token, token)) {
    send_error(conn, self, "wrong cluster token");
    throw ProtocolError("wrong cluster token");
  }
  NodeId id{h.sender_role, static_cast<int>(h.sender_rank), hello.address};
  if (h.sender_rank > static_cast<uint32_t>(kMaxNodesPerRole)) {
    err = std::string(role_name(id.role)) + " rank " + std::to_string(h.sender_rank) +
          " out of range";
  } else {
    err = admit(id);
  }
  if (!err.empty()) {
    send_error(conn, self, err);
    throw ProtocolError(err);
  }
  send_frame(conn, self, FrameType::kHelloAck, encode_hello(Hello{"", self.address}), deadline);
  return id;
}

}  // namespace poseidon
