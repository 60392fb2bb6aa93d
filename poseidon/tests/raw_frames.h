#pragma once
// Raw frames for the tests that talk to a shard by hand (protocol abuse, the
// BF16 and PowerSGD frames): a header's bytes, and what the peer answers.

#include <cstdint>
#include <string>
#include <vector>

#include "poseidon/internal/deadline.h"
#include "poseidon/internal/frame.h"
#include "poseidon/internal/messages.h"
#include "poseidon/internal/transport.h"

namespace poseidon {

inline std::vector<uint8_t> header_bytes(FrameHeader h) {
  std::vector<uint8_t> b(kFrameHeaderBytes);
  encode_header(h, b.data());
  return b;
}

// What the peer answers on `c`: the ERROR text, "answer <header>" for another
// frame, "EOF", or "timeout" (after 5 s).
inline std::string answer(Connection& c) {
  try {
    uint8_t hb[kFrameHeaderBytes];
    c.read_exact(hb, sizeof hb, Deadline::after_ms(5000));
    FrameHeader h;
    const std::string err = decode_header(hb, sizeof hb, 1 << 20, &h);
    if (!err.empty()) return "bad answer: " + err;
    std::vector<uint8_t> body(h.payload_bytes);
    c.read_exact(body.data(), body.size(), Deadline::after_ms(5000));
    if (h.type != FrameType::kError) return "answer " + h.debug_string();
    return decode_text(body.data(), body.size());
  } catch (const TransportError& e) {
    return e.kind() == TransportError::Kind::kTimeout ? "timeout" : "EOF";
  }
}

}  // namespace poseidon
