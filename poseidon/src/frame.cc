#include "poseidon/internal/frame.h"

#include <cstdio>
#include <cstring>

namespace poseidon {
namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool known_type(uint16_t t) {
  switch (static_cast<FrameType>(t)) {
    case FrameType::kHello:
    case FrameType::kHelloAck:
    case FrameType::kError:
    case FrameType::kAddressBook:
    case FrameType::kPlanRequest:
    case FrameType::kPlan:
    case FrameType::kBarrier:
    case FrameType::kBarrierRelease:
    case FrameType::kHeartbeat:
    case FrameType::kFailure:
    case FrameType::kAbort:
    case FrameType::kShutdown:
    case FrameType::kGoodbye:
    case FrameType::kActionRequest:
    case FrameType::kActionPropose:
    case FrameType::kActionVote:
    case FrameType::kActionDecide:
    case FrameType::kPush:
    case FrameType::kPullReply:
    case FrameType::kFactor:
    case FrameType::kPushInPlace:
    case FrameType::kPullDone:
    case FrameType::kPush16:
    case FrameType::kPullReply16:
      return true;
  }
  return false;
}

}  // namespace

std::string frame_type_name(uint16_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kHelloAck:
      return "HELLO_ACK";
    case FrameType::kError:
      return "ERROR";
    case FrameType::kAddressBook:
      return "ADDRESS_BOOK";
    case FrameType::kPlanRequest:
      return "PLAN_REQUEST";
    case FrameType::kPlan:
      return "PLAN";
    case FrameType::kBarrier:
      return "BARRIER";
    case FrameType::kBarrierRelease:
      return "BARRIER_RELEASE";
    case FrameType::kHeartbeat:
      return "HEARTBEAT";
    case FrameType::kFailure:
      return "FAILURE";
    case FrameType::kAbort:
      return "ABORT";
    case FrameType::kShutdown:
      return "SHUTDOWN";
    case FrameType::kGoodbye:
      return "GOODBYE";
    case FrameType::kActionRequest:
      return "ACTION_REQUEST";
    case FrameType::kActionPropose:
      return "ACTION_PROPOSE";
    case FrameType::kActionVote:
      return "ACTION_VOTE";
    case FrameType::kActionDecide:
      return "ACTION_DECIDE";
    case FrameType::kPush:
      return "PUSH";
    case FrameType::kPullReply:
      return "PULL_REPLY";
    case FrameType::kFactor:
      return "FACTOR";
    case FrameType::kPushInPlace:
      return "PUSH_IN_PLACE";
    case FrameType::kPullDone:
      return "PULL_DONE";
    case FrameType::kPush16:
      return "PUSH16";
    case FrameType::kPullReply16:
      return "PULL_REPLY16";
  }
  return "TYPE(" + std::to_string(type) + ")";
}

bool is_data_frame(FrameType type) {
  return type == FrameType::kPush || type == FrameType::kPullReply || type == FrameType::kFactor;
}

bool is_bf16_frame(FrameType type) {
  return type == FrameType::kPush16 || type == FrameType::kPullReply16;
}

std::string FrameHeader::debug_string() const {
  return frame_type_name(static_cast<uint16_t>(type)) + " from " + role_name(sender_role) + " " +
         std::to_string(sender_rank) + " layer=" + std::to_string(layer) +
         " chunk=" + std::to_string(chunk) + " iteration=" + std::to_string(iteration) +
         " total_floats=" + std::to_string(total_floats) +
         " payload=" + std::to_string(payload_bytes) + "B";
}

void encode_header(const FrameHeader& h, uint8_t* out) {
  put32(out + 0, kFrameMagic);
  put16(out + 4, kProtocolVersion);
  put16(out + 6, static_cast<uint16_t>(h.type));
  out[8] = static_cast<uint8_t>(h.sender_role);
  out[9] = 0;
  put16(out + 10, 0);
  put32(out + 12, h.sender_rank);
  put32(out + 16, h.layer);
  put32(out + 20, h.chunk);
  put64(out + 24, static_cast<uint64_t>(h.iteration));
  put64(out + 32, h.total_floats);
  put64(out + 40, h.payload_bytes);
}

std::string decode_header(const uint8_t* b, size_t size, size_t max_payload_bytes,
                          FrameHeader* out) {
  if (size != kFrameHeaderBytes) {
    return "frame header of " + std::to_string(size) + " bytes (want " +
           std::to_string(kFrameHeaderBytes) + ")";
  }
  const uint32_t magic = get32(b);
  if (magic != kFrameMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x (want 0x%08x)", magic, kFrameMagic);
    return buf;
  }
  const uint16_t version = get16(b + 4);
  if (version != kProtocolVersion) {
    return "unsupported protocol version " + std::to_string(version) + " (this node speaks " +
           std::to_string(kProtocolVersion) + ")";
  }
  const uint16_t type = get16(b + 6);
  if (!known_type(type)) return "unknown frame type " + std::to_string(type);
  const uint8_t role = b[8];
  if (role < static_cast<uint8_t>(Role::kCoordinator) || role > static_cast<uint8_t>(Role::kWorker))
    return "unknown sender role " + std::to_string(role);
  if (b[9] != 0 || get16(b + 10) != 0) return "nonzero flags/reserved bytes";
  const uint64_t payload = get64(b + 40);
  if (payload > max_payload_bytes) {
    return "payload of " + std::to_string(payload) + " bytes exceeds the limit of " +
           std::to_string(max_payload_bytes) + " bytes";
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.sender_role = static_cast<Role>(role);
  h.sender_rank = get32(b + 12);
  h.layer = get32(b + 16);
  h.chunk = get32(b + 20);
  h.iteration = static_cast<int64_t>(get64(b + 24));
  h.total_floats = get64(b + 32);
  h.payload_bytes = payload;
  if (is_data_frame(h.type) && payload % 4 != 0) {
    return "data frame payload of " + std::to_string(payload) + " bytes is not whole floats";
  }
  if (is_bf16_frame(h.type) && payload % 2 != 0) {
    return frame_type_name(type) + " payload of " + std::to_string(payload) +
           " bytes is not whole bf16 values";
  }
  if ((h.type == FrameType::kPushInPlace || h.type == FrameType::kPullDone) && payload != 0) {
    return frame_type_name(type) + " with a payload of " + std::to_string(payload) + " bytes";
  }
  *out = h;
  return "";
}

}  // namespace poseidon
