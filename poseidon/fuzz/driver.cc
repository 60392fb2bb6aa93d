// A deterministic mutation fuzzer for fuzz_frame.cc when libFuzzer is not
// available (g++ builds): starts from valid encodings of every message,
// applies random mutations (bit flips, interesting integers in length and
// count fields, insertions, deletions, truncation, splices) and runs the
// target for a bounded time. Fixed seed, so a failure reproduces; on a crash
// the input being run is printed in hex.
//
//   fuzz_frame_driver [--seconds S] [--seed N] [--runs N]

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "poseidon/internal/frame.h"
#include "poseidon/internal/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using namespace poseidon;
using Bytes = std::vector<uint8_t>;

Bytes g_current;  // the input being run, for the crash report

void dump_current(int sig) {
  std::fprintf(stderr, "\nfuzz driver: crash (signal %d) on input of %zu bytes:\n", sig,
               g_current.size());
  for (uint8_t b : g_current) std::fprintf(stderr, "%02x", b);
  std::fprintf(stderr, "\n");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

Bytes with_selector(uint8_t selector, const Bytes& body) {
  Bytes b{selector};
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

std::vector<Bytes> seeds() {
  std::vector<Bytes> s;
  FrameHeader h;
  h.type = FrameType::kPush;
  h.layer = 3;
  h.chunk = 1;
  h.iteration = 7;
  h.payload_bytes = 4096;
  Bytes hb(kFrameHeaderBytes);
  encode_header(h, hb.data());
  s.push_back(with_selector(0, hb));
  s.push_back(with_selector(1, encode_hello(Hello{"token", "127.0.0.1:4000"})));
  s.push_back(with_selector(2, encode_address_book(AddressBook{{"a:1", "b:2"}, {"c:3"}})));
  LayerSpec fc;
  fc.layer_id = 6;
  fc.name = "fc6";
  fc.kind = LayerKind::kFullyConnected;
  fc.m = 4096;
  fc.n = 25088;
  fc.k = 32;
  fc.num_floats = 4096 * 25088;
  LayerSpec conv = fc;
  conv.layer_id = 1;
  conv.kind = LayerKind::kConvolution;
  conv.num_floats = 1 << 20;
  s.push_back(with_selector(3, encode_layer_specs({conv, fc})));
  s.push_back(
      with_selector(4, encode_plan(make_plan({conv, fc}, 4, 3, 1 << 16, SchemeChoice::kAuto))));
  // Every lossy scheme allowed: conv goes BF16, fc PowerSGD (two parts).
  s.push_back(with_selector(4, encode_plan(make_plan({conv, fc}, 4, 3, 1 << 16, SchemeChoice::kAuto,
                                                     Compression::kAuto, 4))));
  s.push_back(with_selector(5, encode_failure(Failure{"worker 1 (a:1)", "gone"})));
  s.push_back(with_selector(6, encode_progress(Progress{5, 2})));
  s.push_back(with_selector(7, encode_text("barrier")));
  // A whole HELLO frame for the handshake case.
  FrameHeader hello;
  hello.type = FrameType::kHello;
  const Bytes body = encode_hello(Hello{"token", "x:1"});
  hello.payload_bytes = body.size();
  Bytes frame(kFrameHeaderBytes);
  encode_header(hello, frame.data());
  frame.insert(frame.end(), body.begin(), body.end());
  s.push_back(with_selector(8, frame));
  return s;
}

const uint64_t kInteresting[] = {0,          1,          2,          3,          4,
                                 7,          0x7f,       0x80,       0xff,       0x100,
                                 0x7fff,     0xffff,     0x10000,    0x7fffffff, 0x80000000,
                                 0xffffffff, 1ull << 32, 1ull << 40, ~0ull >> 1, ~0ull};

void mutate(Bytes& b, std::mt19937_64& rng, const std::vector<Bytes>& pool) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 8) {
      case 0:  // flip a bit (never the selector byte's meaning, sometimes it)
        if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // interesting 32- or 64-bit little-endian integer
        const size_t width = rng() % 2 ? 4 : 8;
        if (b.size() > width) {
          const size_t at = 1 + pick(b.size() - width);
          const uint64_t v = kInteresting[pick(sizeof kInteresting / sizeof kInteresting[0])];
          for (size_t i = 0; i < width; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
        }
        break;
      }
      case 3: {  // insert random bytes
        const size_t at = pick(b.size() + 1);
        const size_t n = 1 + pick(16);
        Bytes ins(n);
        for (auto& x : ins) x = static_cast<uint8_t>(rng());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 4:  // delete a range
        if (b.size() > 1) {
          const size_t at = pick(b.size());
          const size_t n = 1 + pick(std::min<size_t>(16, b.size() - at));
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                  b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + n)));
        }
        break;
      case 5:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      case 6: {  // splice with another seed's tail
        const Bytes& o = pool[pick(pool.size())];
        const size_t at = pick(b.size() + 1);
        const size_t from = pick(o.size() + 1);
        b.resize(at);
        b.insert(b.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
        break;
      }
      case 7:  // duplicate a range
        if (!b.empty() && b.size() < 8192) {
          const size_t at = pick(b.size());
          const size_t n = 1 + pick(std::min<size_t>(64, b.size() - at));
          Bytes dup(b.begin() + static_cast<std::ptrdiff_t>(at),
                    b.begin() + static_cast<std::ptrdiff_t>(at + n));
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), dup.begin(), dup.end());
        }
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  uint64_t max_runs = ~0ull;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--runs") max_runs = std::strtoull(argv[i + 1], nullptr, 10);
  }
  std::signal(SIGSEGV, dump_current);
  std::signal(SIGABRT, dump_current);
  std::signal(SIGBUS, dump_current);
  std::signal(SIGFPE, dump_current);
  std::mt19937_64 rng(seed);
  const std::vector<Bytes> pool = seeds();
  std::vector<Bytes> corpus = pool;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t runs = 0;
  for (const Bytes& s : pool) {
    g_current = s;
    LLVMFuzzerTestOneInput(s.data(), s.size());
    ++runs;
  }
  while (runs < max_runs) {
    if ((runs & 255) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      break;
    }
    Bytes b = corpus[static_cast<size_t>(rng() % corpus.size())];
    mutate(b, rng, pool);
    g_current = b;
    LLVMFuzzerTestOneInput(b.data(), b.size());
    ++runs;
    // Keep some mutants as new starting points (bounded corpus).
    if (rng() % 64 == 0) {
      if (corpus.size() < 4096) {
        corpus.push_back(std::move(b));
      } else {
        corpus[pool.size() + static_cast<size_t>(rng() % (corpus.size() - pool.size()))] =
            std::move(b);
      }
    }
  }
  std::fprintf(stderr, "fuzz driver: %llu inputs, no crash (seed %llu)\n",
               static_cast<unsigned long long>(runs), static_cast<unsigned long long>(seed));
  return 0;
}
