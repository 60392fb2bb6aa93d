#include "poseidon/internal/bf16.h"

namespace poseidon {

void floats_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

void bf16_to_floats(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = from_bf16(in[i]);
}

void round_bf16_in_place(float* data, uint16_t* wire, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = to_bf16(data[i]);
    if (wire != nullptr) wire[i] = b;
    data[i] = from_bf16(b);
  }
}

void add_bf16(float* sum, const uint8_t* piece, size_t n) {
  if (reinterpret_cast<uintptr_t>(piece) % alignof(uint16_t) == 0) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(piece);
    for (size_t i = 0; i < n; ++i) sum[i] += from_bf16(p[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, piece + 2 * i, 2);
    sum[i] += from_bf16(v);
  }
}

}  // namespace poseidon
