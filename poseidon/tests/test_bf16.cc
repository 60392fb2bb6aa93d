// bfloat16 conversion (internal/bf16.h, Note [bf16 rounding]): round to
// nearest even, NaN stays NaN, ±inf stays ±inf, overflow to inf, subnormals,
// the largest finite value; and a sweep against an independent reference.

#include <cmath>
#include <cstring>
#include <random>

#include "check.h"
#include "poseidon/internal/bf16.h"

using namespace poseidon;

namespace {

float bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The reference: of the two bf16 values around a finite f (truncation and
// one step away from zero), the one nearer in exact (double) arithmetic, the
// even one on a tie.
uint16_t reference(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double x = std::fabs(static_cast<double>(f));
  const double a = std::fabs(static_cast<double>(from_bf16(lo)));
  const double b = std::fabs(static_cast<double>(bits(uint32_t{hi} << 16)));  // may be inf
  const double da = x - a;
  const double db = std::isinf(b) ? std::ldexp(1.0, 128) - x : b - x;  // inf: as if 2^128
  if (da != db) return da < db ? lo : hi;
  return (lo & 1) == 0 ? lo : hi;
}

}  // namespace

TEST(round_to_nearest_even) {
  CHECK_EQ(to_bf16(1.0f), uint16_t{0x3f80});
  CHECK_EQ(to_bf16(bits(0x3f807fff)), uint16_t{0x3f80});  // below half: down
  CHECK_EQ(to_bf16(bits(0x3f808000)), uint16_t{0x3f80});  // tie, 0x3f80 is even: down
  CHECK_EQ(to_bf16(bits(0x3f808001)), uint16_t{0x3f81});  // above half: up
  CHECK_EQ(to_bf16(bits(0x3f818000)), uint16_t{0x3f82});  // tie, 0x3f81 is odd: up
  CHECK_EQ(to_bf16(bits(0xbf808000)), uint16_t{0xbf80});  // signs round the same way
  CHECK_EQ(to_bf16(bits(0xbf818000)), uint16_t{0xbf82});
  CHECK_EQ(to_bf16(bits(0x3fffffff)), uint16_t{0x4000});  // carries into the exponent
  CHECK_EQ(to_bf16(0.0f), uint16_t{0x0000});
  CHECK_EQ(to_bf16(-0.0f), uint16_t{0x8000});
  // 1 + 2^-10 is not a bf16 (7 mantissa bits): it rounds to 1.
  CHECK_EQ(round_bf16(1.0f + 1.0f / 1024), 1.0f);
  // In [2, 4) a bf16 step is 2^-6: 3 + 2^-7 is a tie down to 3 (even), 3 + 3·2^-7
  // a tie up to 3 + 2^-5 (3 + 2^-6 is odd).
  CHECK_EQ(round_bf16(3.0f + 1.0f / 128), 3.0f);
  CHECK_EQ(round_bf16(3.0f + 3.0f / 128), 3.0f + 1.0f / 32);
}

TEST(nan_inf_and_the_largest_values) {
  CHECK_EQ(to_bf16(INFINITY), uint16_t{0x7f80});
  CHECK_EQ(to_bf16(-INFINITY), uint16_t{0xff80});
  CHECK_EQ(to_bf16(bits(0x7fc00000)), uint16_t{0x7fc0});  // quiet NaN
  // A NaN whose payload lies only in the dropped bits stays a NaN, not inf.
  CHECK_EQ(to_bf16(bits(0x7f800001)), uint16_t{0x7fc0});
  CHECK_EQ(to_bf16(bits(0xff800001)), uint16_t{0xffc0});
  CHECK(std::isnan(round_bf16(bits(0x7fbfffff))));
  CHECK(std::isnan(round_bf16(std::nanf(""))));
  // The largest finite bf16, 0x7f7f (about 3.39e38), is kept; values past
  // the halfway point to the next step (2^128) become inf, as FLT_MAX does.
  CHECK_EQ(to_bf16(bits(0x7f7f0000)), uint16_t{0x7f7f});
  CHECK_EQ(to_bf16(bits(0x7f7f7fff)), uint16_t{0x7f7f});
  CHECK_EQ(to_bf16(bits(0x7f7f8000)), uint16_t{0x7f80});  // tie, 0x7f7f odd: up, to inf
  CHECK_EQ(to_bf16(bits(0x7f7fffff)), uint16_t{0x7f80});  // FLT_MAX
  CHECK_EQ(to_bf16(bits(0xff7fffff)), uint16_t{0xff80});
  CHECK_EQ(from_bf16(0x7f7f), bits(0x7f7f0000));
}

TEST(subnormals) {
  CHECK_EQ(to_bf16(bits(0x00000001)), uint16_t{0x0000});  // the smallest fp32: to +0
  CHECK_EQ(to_bf16(bits(0x00008000)), uint16_t{0x0000});  // tie: even (0)
  CHECK_EQ(to_bf16(bits(0x00008001)), uint16_t{0x0001});  // the smallest bf16 subnormal
  CHECK_EQ(to_bf16(bits(0x00018000)), uint16_t{0x0002});  // tie: even (2)
  CHECK_EQ(to_bf16(bits(0x807fffff)), uint16_t{0x8080});  // up into the smallest normal
  CHECK_EQ(from_bf16(0x0001), bits(0x00010000));
}

TEST(every_bf16_value_survives_a_round_trip) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t v = static_cast<uint16_t>(b);
    const float f = from_bf16(v);
    if (std::isnan(f)) {
      CHECK(std::isnan(from_bf16(to_bf16(f))));
    } else if (to_bf16(f) != v) {
      ptest::fail(__FILE__, __LINE__, "bf16 " + std::to_string(b) + " changed");
      break;
    }
  }
}

TEST(sweep_against_the_reference) {
  std::mt19937 rng(22);
  int bad = 0;
  for (int i = 0; i < 2000000 && bad < 5; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // many exact ties
    const float f = bits(u);
    if (std::isnan(f) || std::isinf(f)) continue;
    if (to_bf16(f) != reference(f)) {
      ++bad;
      ptest::fail(__FILE__, __LINE__, "bits " + std::to_string(u));
    }
  }
}

TEST(array_helpers) {
  const float in[5] = {1.0f, bits(0x3f818000), -2.5f, INFINITY, bits(0x00018000)};
  uint16_t wire[5];
  floats_to_bf16(in, wire, 5);
  CHECK_EQ(wire[1], uint16_t{0x3f82});
  CHECK_EQ(wire[3], uint16_t{0x7f80});
  float back[5];
  bf16_to_floats(wire, back, 5);
  CHECK_EQ(back[2], -2.5f);
  CHECK_EQ(back[1], bits(0x3f820000));
  float data[5];
  std::memcpy(data, in, sizeof in);
  uint16_t kept[5];
  round_bf16_in_place(data, kept, 5);
  for (int i = 0; i < 5; ++i) {
    CHECK_EQ(kept[i], wire[i]);
    CHECK_EQ(bits_of(data[i]), bits_of(back[i]));
  }
  std::memcpy(data, in, sizeof in);
  round_bf16_in_place(data, nullptr, 5);
  CHECK_EQ(bits_of(data[1]), bits_of(back[1]));
  // add_bf16 from an odd address (a byte stream) and an aligned one.
  uint8_t bytes[1 + sizeof wire];
  std::memcpy(bytes + 1, wire, sizeof wire);
  float sum[3] = {1.0f, 1.0f, 1.0f};
  add_bf16(sum, bytes + 1, 3);
  CHECK_EQ(sum[0], 2.0f);
  CHECK_EQ(sum[1], 1.0f + bits(0x3f820000));
  CHECK_EQ(sum[2], -1.5f);
  add_bf16(sum, reinterpret_cast<const uint8_t*>(wire), 1);
  CHECK_EQ(sum[0], 3.0f);
}

TEST_MAIN()
