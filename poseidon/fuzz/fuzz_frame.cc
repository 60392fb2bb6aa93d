// Fuzz target for everything that parses bytes from the network: the frame
// header decoder, every control-message decoder, and the server side of the
// handshake fed a raw byte stream. Built two ways:
//   - with libFuzzer when clang is available (POSEIDON_LIBFUZZER=ON):
//       clang++ -fsanitize=fuzzer,address -> fuzz_frame_libfuzzer
//   - with g++ and the deterministic mutation driver (driver.cc), run by
//     ctest for a bounded time under AddressSanitizer + UBSan.
// Contract checked: decoders either succeed or throw ProtocolError /
// ConfigError / TransportError — never crash, hang or throw anything else —
// and a header that decodes re-encodes to the same bytes.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "poseidon/internal/frame.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/messages.h"
#include "poseidon/internal/transport.h"

namespace {

using namespace poseidon;

[[noreturn]] void contract_broken(const char* what) {
  std::fprintf(stderr, "fuzz contract broken: %s\n", what);
  std::abort();
}

void header_case(const uint8_t* data, size_t size) {
  FrameHeader h;
  const std::string err = decode_header(data, size, kDefaultMaxFrameBytes, &h);
  if (!err.empty()) return;
  if (size != kFrameHeaderBytes) contract_broken("decoded a header of the wrong size");
  if (h.payload_bytes > kDefaultMaxFrameBytes) contract_broken("accepted an oversized payload");
  uint8_t again[kFrameHeaderBytes];
  encode_header(h, again);
  if (std::memcmp(again, data, kFrameHeaderBytes) != 0) contract_broken("header round trip");
}

void plan_case(const uint8_t* data, size_t size) {
  const Plan plan = decode_plan(data, size);
  // Walk what a server would derive from it.
  for (const LayerPlan& l : plan.layers) {
    const uint32_t n = l.num_chunks < 64 ? l.num_chunks : 64;
    for (uint32_t c = 0; c < n; ++c) {
      const int shard = plan.shard_of(l, c);
      if (shard < 0 || shard >= plan.num_servers) contract_broken("shard out of range");
      if (l.chunk_length(c) > plan.chunk_floats()) {
        contract_broken("chunk longer than chunk_bytes");
      }
    }
  }
}

// A connection whose peer sent exactly `data` and then closed; what we
// write is discarded. Keeps the handshake case free of threads and sockets.
class MemoryConnection final : public Connection {
 public:
  MemoryConnection(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  void write_frame(const uint8_t*, size_t, const void*, size_t, Deadline) override {}
  void read_exact(void* dst, size_t bytes, Deadline) override {
    if (bytes > size_ - pos_) {
      throw TransportError(
          TransportError::Kind::kClosed,
          "EOF after " + std::to_string(size_ - pos_) + " of " + std::to_string(bytes));
    }
    if (bytes > 0) std::memcpy(dst, data_ + pos_, bytes);
    pos_ += bytes;
  }
  void close_write() override {}
  void shutdown() override {}
  std::string remote_address() const override { return "fuzz"; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The listening side of a handshake reading exactly these bytes.
void handshake_case(const uint8_t* data, size_t size) {
  MemoryConnection conn(data, size);
  try {
    server_handshake(
        conn, NodeId{Role::kServer, 0, "fuzz"}, "token",
        [](const NodeId&) { return std::string(); }, Deadline::after_ms(100));
  } catch (const ProtocolError&) {
  } catch (const TransportError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  ++data;
  --size;
  try {
    switch (selector % 10) {
      case 0:
        header_case(data, size);
        break;
      case 1:
        decode_hello(data, size);
        break;
      case 2:
        decode_address_book(data, size);
        break;
      case 3:
        decode_layer_specs(data, size);
        break;
      case 4:
        plan_case(data, size);
        break;
      case 5:
        decode_failure(data, size);
        break;
      case 6:
        decode_progress(data, size);
        break;
      case 7:
        decode_text(data, size);
        break;
      case 8:
        handshake_case(data, size);
        break;
      case 9:
        decode_action(data, size);
        break;
    }
  } catch (const ProtocolError&) {
  } catch (const ConfigError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
