#pragma once
// Little-endian encoding of control-message bodies. ByteReader is the only
// code that parses bytes from the network besides decode_header: every read
// is bounds-checked and a short or oversized field throws ProtocolError.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace poseidon {

// Appends fields to an owned byte vector. Not thread-safe (one per message).
class ByteWriter {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v);
  void str(const std::string& s);  // u32 length + bytes
  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

// Reads fields from a borrowed byte range that must outlive the reader.
// Not thread-safe. Every getter throws ProtocolError("<what>: ...") when the
// field runs past the end.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string what)
      : p_(data), end_(data + size), what_(std::move(what)) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64();
  std::string str(size_t max_bytes);
  // A count of elements that each take at least `min_element_bytes`: rejects
  // counts that could not fit in the remaining bytes (no huge allocations).
  size_t count(size_t min_element_bytes);
  // Throws unless every byte was consumed.
  void expect_end() const;
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

 private:
  void need(size_t n) const;
  const uint8_t* p_;
  const uint8_t* end_;
  std::string what_;
};

}  // namespace poseidon
