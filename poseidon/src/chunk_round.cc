#include "poseidon/internal/chunk_round.h"

#include <cstring>

namespace poseidon {

std::string ChunkRound::key() const {
  return "layer " + std::to_string(layer->spec.layer_id) + " (" + layer->spec.name + ") chunk " +
         std::to_string(chunk);
}

std::string ChunkRound::describe_locked() const {
  std::string out = key() + " iteration " + std::to_string(round_iteration) + ": ";
  if (phase == Phase::kSending) return out + "sums being sent";
  std::string missing;
  for (size_t r = 0; r < pushed.size(); ++r) {
    if (!pushed[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
  }
  return out + std::to_string(arrived) + " of " + std::to_string(pushed.size()) +
         " pushes, waiting for worker(s) " + missing;
}

void add_floats(float* sum, const uint8_t* piece, size_t n) {
  if (reinterpret_cast<uintptr_t>(piece) % alignof(float) == 0) {
    const float* p = reinterpret_cast<const float*>(piece);
    for (size_t i = 0; i < n; ++i) sum[i] += p[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, piece + 4 * i, 4);
    sum[i] += v;
  }
}

}  // namespace poseidon
