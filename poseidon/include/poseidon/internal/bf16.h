#pragma once
// bfloat16, the BF16 scheme's wire format (config.h, Scheme::kBF16): the top
// 16 bits of an IEEE fp32 — sign, the full 8-bit exponent, 7 mantissa bits —
// so every fp32 exponent survives and widening back is exact.
//
// Note [bf16 rounding]: fp32 -> bf16 rounds to nearest, ties to even (on the
// 16 bits dropped), as torch.bfloat16 and the hardware converters do: finite
// values too large for bf16 become ±inf, ±inf stays ±inf, subnormals round
// like any other value, and a NaN stays a NaN (its quiet bit is set, so a
// payload living only in the dropped bits cannot turn it into an inf).
//
// The BF16 scheme's one rule for the sums (kv_server.h, Note [in-place
// rounds]): a shard sums bf16 pushes in fp32 and every worker ends with
// bf16(fp32 sum of the bf16-rounded inputs), bit for bit, whether its sum came
// over the wire or was made in its own range.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace poseidon {

// Note [bf16 rounding].
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // carries into the exponent when rounding up: inf on overflow
  return static_cast<uint16_t>(u >> 16);
}

// Exact.
inline float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The nearest bf16 value, as an fp32.
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// out[i] = to_bf16(in[i]) for n values.
void floats_to_bf16(const float* in, uint16_t* out, size_t n);
// out[i] = from_bf16(in[i]) for n values.
void bf16_to_floats(const uint16_t* in, float* out, size_t n);
// wire[i] = to_bf16(data[i]) and data[i] = from_bf16(wire[i]): rounds `data`
// to bf16 precision in place and keeps the bf16 bytes of the same values.
// `wire` may be null (then only `data` is rounded).
void round_bf16_in_place(float* data, uint16_t* wire, size_t n);
// sum[i] += from_bf16(piece[i]) for n values. `piece` comes from a byte
// stream (little-endian, as every frame); read through memcpy when it is not
// 2-aligned.
void add_bf16(float* sum, const uint8_t* piece, size_t n);

}  // namespace poseidon
