#pragma once
// Bodies of the control frames. Each message has an encoder and a decoder;
// decoders bound every count and string by the bytes actually present and
// throw ProtocolError on anything malformed (they are fuzzed).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "poseidon/plan.h"
#include "poseidon/types.h"

namespace poseidon {

inline constexpr size_t kMaxTokenBytes = 256;
inline constexpr size_t kMaxAddressBytes = 256;
inline constexpr size_t kMaxNameBytes = 1024;
inline constexpr size_t kMaxReasonBytes = 16384;

// HELLO: the cluster token and the sender's listen address (role and rank
// travel in the frame header).
struct Hello {
  std::string token;
  std::string address;
};

// ADDRESS_BOOK: AddressBook (types.h).

// FAILURE / ABORT: the node at the origin and what happened.
struct Failure {
  std::string peer;    // "worker 1 (127.0.0.1:40123)"
  std::string reason;  // complete sentence naming peer, key and iteration
};

// HEARTBEAT: what the sender was last doing (-1 = nothing yet), so a dead or
// silent node can be reported with its last layer and iteration.
struct Progress {
  int64_t iteration = -1;
  int64_t layer = -1;
};

// ACTION_REQUEST / ACTION_PROPOSE / ACTION_VOTE / ACTION_DECIDE: ActionMessage
// (types.h), a training action that every worker takes at the same iteration
// (action_rounds.h, Note [agreed actions]).

std::vector<uint8_t> encode_hello(const Hello& m);
Hello decode_hello(const uint8_t* data, size_t size);

std::vector<uint8_t> encode_address_book(const AddressBook& m);
AddressBook decode_address_book(const uint8_t* data, size_t size);

std::vector<uint8_t> encode_layer_specs(const std::vector<LayerSpec>& m);
std::vector<LayerSpec> decode_layer_specs(const uint8_t* data, size_t size);

std::vector<uint8_t> encode_plan(const Plan& m);
Plan decode_plan(const uint8_t* data, size_t size);

std::vector<uint8_t> encode_failure(const Failure& m);
Failure decode_failure(const uint8_t* data, size_t size);

std::vector<uint8_t> encode_progress(const Progress& m);
Progress decode_progress(const uint8_t* data, size_t size);

std::vector<uint8_t> encode_action(const ActionMessage& m);
ActionMessage decode_action(const uint8_t* data, size_t size);

// BARRIER / BARRIER_RELEASE names and ERROR messages: one string.
std::vector<uint8_t> encode_text(const std::string& text);
std::string decode_text(const uint8_t* data, size_t size);

}  // namespace poseidon
