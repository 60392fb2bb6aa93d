#include "poseidon/internal/wire.h"

#include <cstring>

#include "poseidon/errors.h"

namespace poseidon {

void ByteWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void ByteWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void ByteWriter::f64(double v) {
  uint64_t bits = 0;
  static_assert(sizeof bits == sizeof v, "double is 64 bits");
  std::memcpy(&bits, &v, sizeof bits);
  u64(bits);
}

void ByteWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}

void ByteReader::need(size_t n) const {
  if (remaining() < n) {
    throw ProtocolError(what_ + ": truncated message (needed " + std::to_string(n) +
                        " more bytes, " + std::to_string(remaining()) + " left)");
  }
}

uint8_t ByteReader::u8() {
  need(1);
  return *p_++;
}

uint32_t ByteReader::u32() {
  need(4);
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p_[i];
  p_ += 4;
  return v;
}

uint64_t ByteReader::u64() {
  need(8);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p_[i];
  p_ += 8;
  return v;
}

double ByteReader::f64() {
  const uint64_t bits = u64();
  double v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::string ByteReader::str(size_t max_bytes) {
  const uint32_t n = u32();
  if (n > max_bytes) {
    throw ProtocolError(what_ + ": string of " + std::to_string(n) + " bytes exceeds " +
                        std::to_string(max_bytes));
  }
  need(n);
  std::string s(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return s;
}

size_t ByteReader::count(size_t min_element_bytes) {
  const uint32_t n = u32();
  if (min_element_bytes > 0 && n > remaining() / min_element_bytes) {
    throw ProtocolError(what_ + ": count " + std::to_string(n) + " cannot fit in " +
                        std::to_string(remaining()) + " remaining bytes");
  }
  return n;
}

void ByteReader::expect_end() const {
  if (p_ != end_) {
    throw ProtocolError(what_ + ": " + std::to_string(remaining()) + " trailing bytes");
  }
}

}  // namespace poseidon
