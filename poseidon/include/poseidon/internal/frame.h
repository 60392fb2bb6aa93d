#pragma once
// The wire frame: a fixed 48-byte little-endian header followed by
// `payload_bytes` of payload. Data payloads (pushes, sums, factors) are raw
// float32 arrays written straight from and read straight into registered
// buffers, or bfloat16 arrays for the BF16 scheme (internal/bf16.h);
// control payloads are small messages (messages.h).
//
//   offset size field
//        0    4 magic          kFrameMagic ("PSDN")
//        4    2 version        kProtocolVersion
//        6    2 type           FrameType
//        8    1 sender_role    Role
//        9    1 flags          must be 0
//       10    2 reserved       must be 0
//       12    4 sender_rank
//       16    4 layer          key: layer id
//       20    4 chunk          key: chunk index within the layer
//       24    8 iteration      key: iteration (signed)
//       32    8 total_floats   kFactor: length of the whole factor; else 0
//       40    8 payload_bytes
//
// Decoding never trusts a field: every check below runs before a payload
// byte is read, so a bad header costs nothing but the header.

#include <cstddef>
#include <cstdint>
#include <string>

#include "poseidon/config.h"

namespace poseidon {

inline constexpr uint32_t kFrameMagic = 0x4E445350;  // bytes "PSDN" on the wire
// 2: PUSH16 / PULL_REPLY16, and the plan carries parts, PowerSGD ranks and rates.
// 3: a layer spec carries the declaring worker's measured costs.
// 4: a layer spec carries its byte scale (plan.h, Note [byte-scaled layers]).
// 5: the plan carries workers per machine and the local rate (Note [local aggregation]).
// 6: a part of more than P2 chunks is cut into a multiple of P2 (plan.h, Note [chunk layout]).
inline constexpr uint16_t kProtocolVersion = 6;
inline constexpr size_t kFrameHeaderBytes = 48;
// Limit for frames a connection may send before it has been authenticated.
inline constexpr size_t kMaxHelloBytes = 1024;

enum class FrameType : uint16_t {
  kHello = 1,     // first frame of every connection: token + listen address
  kHelloAck = 2,  // handshake accepted
  kError = 3,     // the sender rejects something and closes; payload: message
  kAddressBook = 10,
  kPlanRequest = 11,
  kPlan = 12,
  kBarrier = 13,
  kBarrierRelease = 14,
  kHeartbeat = 15,
  kFailure = 16,   // node -> coordinator: this node failed; payload: Failure
  kAbort = 17,     // coordinator/node -> node: the job is aborted; payload: Failure
  kShutdown = 18,  // worker -> coordinator: done; coordinator -> all: exit
  kGoodbye = 19,   // the sender closes this connection on purpose
  // An action every worker takes at one agreed iteration (action_rounds.h,
  // Note [agreed actions]); payload: ActionMessage.
  kActionRequest = 20,  // worker -> coordinator: stop or snapshot, please
  kActionPropose = 21,  // coordinator -> workers: say where you are
  kActionVote = 22,     // worker -> coordinator: my iteration
  kActionDecide = 23,   // coordinator -> workers: act at this iteration (or not at all)
  kPush = 30,           // worker -> server: chunk of a gradient
  kPullReply = 31,      // server -> worker: sum of a chunk over all workers
  kFactor = 32,         // worker -> worker: chunk of a sufficient factor
  // In-process only (kv_server.h, Note [in-place rounds]): a worker tells the
  // shard running in its own process that a chunk is ready in the range it
  // lent (no payload), and the shard tells it that the range holds the sum.
  // Refused on any connection but a shard's in-process door.
  kPushInPlace = 33,  // worker -> its colocated shard
  kPullDone = 34,     // colocated shard -> its worker
  // The BF16 scheme's PUSH and PULL_REPLY: the same chunks, bfloat16 on the
  // wire (2 bytes per float; internal/bf16.h).
  kPush16 = 35,       // worker -> server: chunk of a gradient, bf16
  kPullReply16 = 36,  // server -> worker: bf16 of the fp32 sum of a chunk
};

// "PUSH", "PULL_REPLY", ...; "TYPE(n)" for unknown values.
std::string frame_type_name(uint16_t type);
// True for kPush, kPullReply and kFactor: payload is float32, bytes % 4 == 0.
// (kPushInPlace and kPullDone carry no payload: the decoder rejects one.)
bool is_data_frame(FrameType type);
// True for kPush16 and kPullReply16: payload is bfloat16, bytes % 2 == 0.
bool is_bf16_frame(FrameType type);

struct FrameHeader {
  FrameType type = FrameType::kHello;
  Role sender_role = Role::kWorker;
  uint32_t sender_rank = 0;
  uint32_t layer = 0;
  uint32_t chunk = 0;
  int64_t iteration = 0;
  uint64_t total_floats = 0;
  uint64_t payload_bytes = 0;

  // "PUSH from worker 1 layer=3 chunk=0 iteration=7 payload=4096B".
  std::string debug_string() const;
};

// Writes the 48 header bytes (version = kProtocolVersion) to `out`.
// Non-blocking, thread-safe; `out` must hold kFrameHeaderBytes.
void encode_header(const FrameHeader& header, uint8_t* out);

// Parses and validates `size` bytes at `bytes` into `*out`. Returns "" on
// success, else the reason ("bad magic 0x...", "unsupported protocol version
// 7 (this node speaks 1)", "payload of N bytes exceeds the limit of M",
// ...). Rejects: size != kFrameHeaderBytes, wrong magic or version, nonzero
// flags/reserved, unknown type or role, payload_bytes > max_payload_bytes,
// data frames whose payload is not a whole number of floats (of bf16 values
// for PUSH16 / PULL_REPLY16).
// Non-blocking, thread-safe, never reads outside [bytes, bytes + size).
std::string decode_header(const uint8_t* bytes, size_t size, size_t max_payload_bytes,
                          FrameHeader* out);

}  // namespace poseidon
