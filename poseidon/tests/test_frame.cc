// The frame codec and the control-message codecs: round trips, and every
// rejection decode_header and the message decoders promise.

#include <cstring>

#include "check.h"
#include "poseidon/internal/frame.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/messages.h"
#include "poseidon/internal/wire.h"

using namespace poseidon;

namespace {

FrameHeader sample() {
  FrameHeader h;
  h.type = FrameType::kFactor;
  h.sender_role = Role::kWorker;
  h.sender_rank = 4095;
  h.layer = 0xDEADBEEF;
  h.chunk = 7;
  h.iteration = -123456789012345;
  h.total_floats = (uint64_t{1} << 40) + 3;
  h.payload_bytes = 4096;
  return h;
}

std::string decode(const uint8_t* b, size_t n, size_t max, FrameHeader* out) {
  return decode_header(b, n, max, out);
}

}  // namespace

TEST(header_round_trip) {
  uint8_t b[kFrameHeaderBytes];
  const FrameHeader h = sample();
  encode_header(h, b);
  // Magic is "PSDN" on the wire: little-endian bytes, independent of the host.
  CHECK_EQ(std::string(reinterpret_cast<char*>(b), 4), std::string("PSDN"));
  CHECK_EQ(b[4], 6);  // version 6 (chunk counts past P2 a multiple of it), little-endian
  CHECK_EQ(b[5], 0);
  FrameHeader d;
  CHECK_EQ(decode(b, sizeof b, 1 << 20, &d), std::string());
  CHECK(d.type == h.type);
  CHECK(d.sender_role == h.sender_role);
  CHECK_EQ(d.sender_rank, h.sender_rank);
  CHECK_EQ(d.layer, h.layer);
  CHECK_EQ(d.chunk, h.chunk);
  CHECK_EQ(d.iteration, h.iteration);
  CHECK_EQ(d.total_floats, h.total_floats);
  CHECK_EQ(d.payload_bytes, h.payload_bytes);
  CHECK_CONTAINS(d.debug_string(), "FACTOR from worker 4095");
}

TEST(header_rejections) {
  uint8_t b[kFrameHeaderBytes];
  FrameHeader d;
  encode_header(sample(), b);
  CHECK_CONTAINS(decode(b, 47, 1 << 20, &d), "47 bytes");

  uint8_t bad[kFrameHeaderBytes];
  std::memcpy(bad, b, sizeof b);
  bad[0] = 'X';
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "bad magic");

  std::memcpy(bad, b, sizeof b);
  bad[4] = 7;
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "unsupported protocol version 7");

  std::memcpy(bad, b, sizeof b);
  bad[6] = 99;
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "unknown frame type 99");

  std::memcpy(bad, b, sizeof b);
  bad[8] = 9;
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "unknown sender role 9");

  std::memcpy(bad, b, sizeof b);
  bad[10] = 1;
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "reserved");

  // An absurd length is refused before anything is allocated or read.
  FrameHeader big = sample();
  big.payload_bytes = ~uint64_t{0};
  encode_header(big, bad);
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "exceeds the limit");

  FrameHeader odd = sample();
  odd.payload_bytes = 4097;
  encode_header(odd, bad);
  CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "not whole floats");

  // A control frame may carry any byte count.
  odd.type = FrameType::kPlan;
  encode_header(odd, bad);
  CHECK_EQ(decode(bad, sizeof bad, 1 << 20, &d), std::string());

  // bf16 frames: whole 2-byte values, so an even count that is not whole
  // floats is fine, an odd one is not.
  for (FrameType t : {FrameType::kPush16, FrameType::kPullReply16}) {
    FrameHeader h16 = sample();
    h16.type = t;
    h16.payload_bytes = 4098;
    encode_header(h16, bad);
    CHECK_EQ(decode(bad, sizeof bad, 1 << 20, &d), std::string());
    h16.payload_bytes = 4097;
    encode_header(h16, bad);
    CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "4097 bytes is not whole bf16 values");
  }
  CHECK_EQ(frame_type_name(35), std::string("PUSH16"));
  CHECK_EQ(frame_type_name(36), std::string("PULL_REPLY16"));

  // The in-process notices carry nothing.
  for (FrameType t : {FrameType::kPushInPlace, FrameType::kPullDone}) {
    FrameHeader notice = sample();
    notice.type = t;
    notice.payload_bytes = 4;
    encode_header(notice, bad);
    CHECK_CONTAINS(decode(bad, sizeof bad, 1 << 20, &d), "with a payload of 4 bytes");
    notice.payload_bytes = 0;
    encode_header(notice, bad);
    CHECK_EQ(decode(bad, sizeof bad, 1 << 20, &d), std::string());
  }
}

TEST(byte_reader_bounds) {
  ByteWriter w;
  w.u32(1000000);  // a count far larger than the bytes that follow
  const auto bytes = w.take();
  ByteReader r(bytes.data(), bytes.size(), "test");
  CHECK_THROWS(r.count(4), ProtocolError, "cannot fit");
  ByteReader r2(bytes.data(), 3, "test");
  CHECK_THROWS(r2.u32(), ProtocolError, "truncated");
  ByteWriter s;
  s.str(std::string(100, 'x'));
  const auto sb = s.take();
  ByteReader r3(sb.data(), sb.size(), "test");
  CHECK_THROWS(r3.str(10), ProtocolError, "exceeds");
}

TEST(message_round_trips) {
  const Hello hello{"secret", "10.0.0.1:4000"};
  auto hb = encode_hello(hello);
  const Hello h2 = decode_hello(hb.data(), hb.size());
  CHECK_EQ(h2.token, hello.token);
  CHECK_EQ(h2.address, hello.address);

  AddressBook book{{"a:1", "b:2", "c:3"}, {"d:4"}};
  auto bb = encode_address_book(book);
  const AddressBook b2 = decode_address_book(bb.data(), bb.size());
  CHECK(b2.workers == book.workers);
  CHECK(b2.servers == book.servers);

  LayerSpec fc;
  fc.layer_id = 6;
  fc.name = "fc6";
  fc.kind = LayerKind::kFullyConnected;
  fc.m = 4096;
  fc.n = 25088;
  fc.k = 32;
  fc.num_floats = 4096 * 25088 + 4096;
  LayerSpec conv = fc;
  conv.layer_id = 1;
  conv.name = "conv1";
  conv.kind = LayerKind::kConvolution;
  conv.num_floats = 1000;
  conv.force = SchemeChoice::kPS;
  conv.byte_scale = 8;
  auto sb = encode_layer_specs({conv, fc});
  const auto specs = decode_layer_specs(sb.data(), sb.size());
  REQUIRE(specs.size() == 2);
  CHECK(specs[0] == conv);
  CHECK(specs[1] == fc);
  CHECK_EQ(specs[0].byte_scale, 8u);
  auto zero = encode_layer_specs({fc});
  zero[4 + 4 + 4 + 3 + 1 + 1 + 8 * 4] = 0;  // count, id, name "fc6", kind, force, m n k floats
  CHECK_THROWS(decode_layer_specs(zero.data(), zero.size()), ProtocolError, "byte scale 0");

  const Plan plan = make_plan({conv, fc}, 16, 16, 1 << 20, SchemeChoice::kAuto);
  auto pb = encode_plan(plan);
  const Plan p2 = decode_plan(pb.data(), pb.size());
  REQUIRE(p2.layers.size() == 2);
  CHECK_EQ(p2.num_workers, 16);
  CHECK_EQ(p2.chunk_bytes, size_t{1} << 20);
  CHECK(p2.layers[1].scheme == Scheme::kSFB);
  CHECK(p2.layers[0].scheme == Scheme::kPS);
  CHECK_EQ(p2.layers[0].num_chunks, plan.layers[0].num_chunks);
  CHECK_EQ(p2.layers[1].cost.sfb_floats, plan.layers[1].cost.sfb_floats);

  auto fb = encode_failure(Failure{"worker 1 (x:1)", "it died"});
  const Failure f = decode_failure(fb.data(), fb.size());
  CHECK_EQ(f.peer, std::string("worker 1 (x:1)"));
  CHECK_EQ(f.reason, std::string("it died"));

  auto gb = encode_progress(Progress{-1, 42});
  const Progress g = decode_progress(gb.data(), gb.size());
  CHECK_EQ(g.iteration, int64_t{-1});
  CHECK_EQ(g.layer, int64_t{42});

  auto tb = encode_text("barrier-1");
  CHECK_EQ(decode_text(tb.data(), tb.size()), std::string("barrier-1"));
}

TEST(message_rejections) {
  auto pb = encode_plan(make_plan({}, 2, 2, 1024, SchemeChoice::kAuto));
  pb[0] = 0;  // zero workers
  CHECK_THROWS(decode_plan(pb.data(), pb.size()), ProtocolError, "0 workers");
  auto hb = encode_hello(Hello{"t", "a"});
  hb.push_back(0);
  CHECK_THROWS(decode_hello(hb.data(), hb.size()), ProtocolError, "trailing");
  LayerSpec s;
  s.kind = LayerKind::kOther;
  auto lb = encode_layer_specs({s});
  lb[4 + 4 + 4] = 9;  // count, id, empty name length, then the kind byte
  CHECK_THROWS(decode_layer_specs(lb.data(), lb.size()), ProtocolError, "unknown layer kind 9");
  // Two layers with one id: the plan refuses it.
  CHECK_THROWS(make_plan({s, s}, 1, 1, 1024, SchemeChoice::kAuto), ConfigError, "declared twice");
}

namespace {

// A plan of one conv layer per scheme the layer can take, with every setting
// away from its default.
Plan every_scheme_plan() {
  LayerSpec conv;
  conv.layer_id = 1;
  conv.name = "conv1";
  conv.kind = LayerKind::kConvolution;
  conv.m = 64;
  conv.n = 27;
  conv.k = 8;
  conv.num_floats = 64 * 27 + 64;
  conv.force = SchemeChoice::kPowerSGD;
  LayerSpec bf = conv;
  bf.layer_id = 2;
  bf.name = "conv2";
  bf.force = SchemeChoice::kBF16;
  LayerSpec ps = conv;
  ps.layer_id = 3;
  ps.name = "conv3";
  ps.force = SchemeChoice::kAuto;
  Rates rates;
  rates.link_bytes_per_s = 1.25e9;
  rates.gemm_flops_per_s = 1e13;
  rates.memory_bytes_per_s = 5e11;
  rates.local_bytes_per_s = 5e10;
  // 2 machines of 2 workers (cost_model.h, Note [local aggregation]).
  return make_plan({conv, bf, ps}, 4, 2, 4096, SchemeChoice::kAuto, Compression::kBF16, 7, rates,
                   2);
}

// Offset of the first layer's scheme byte in an encoded plan whose first
// layer is named `name` (Note [plan message]).
size_t first_scheme_byte(const std::string& name) {
  // P1, P2, G, chunk_bytes, rank, compression, four rates, the layer count.
  const size_t head = 4 + 4 + 4 + 8 + 4 + 1 + 4 * 8 + 4;
  // id, name, kind, force, m, n, k, num_floats, byte scale, eight measured costs.
  return head + 4 + 4 + name.size() + 1 + 1 + 4 * 8 + 4 + 8 * 8;
}

}  // namespace

TEST(plan_round_trip_with_every_scheme) {
  const Plan plan = every_scheme_plan();
  REQUIRE(plan.layers.size() == 3);
  CHECK(plan.layers[0].scheme == Scheme::kPowerSGD);
  CHECK(plan.layers[1].scheme == Scheme::kBF16);
  CHECK(plan.layers[2].scheme == Scheme::kBF16);  // allowed, and half PS's bytes
  const auto bytes = encode_plan(plan);
  const Plan p = decode_plan(bytes.data(), bytes.size());
  CHECK_EQ(p.powersgd_rank, 7u);
  CHECK_EQ(p.workers_per_machine, 2);
  CHECK_EQ(p.num_machines(), 2);
  CHECK(p.compression == Compression::kBF16);
  CHECK(p.rates == plan.rates);
  REQUIRE(p.layers.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const LayerPlan& a = plan.layers[i];
    const LayerPlan& b = p.layers[i];
    CHECK(a.spec == b.spec);
    CHECK(a.scheme == b.scheme);
    CHECK_EQ(a.rank, b.rank);
    CHECK_EQ(a.wire_floats, b.wire_floats);
    CHECK_EQ(a.first_chunk, b.first_chunk);
    CHECK_EQ(a.num_chunks, b.num_chunks);
    REQUIRE(a.parts.size() == b.parts.size());
    for (size_t j = 0; j < a.parts.size(); ++j) {
      CHECK_EQ(a.parts[j].offset, b.parts[j].offset);
      CHECK_EQ(a.parts[j].num_chunks, b.parts[j].num_chunks);
      CHECK_EQ(a.parts[j].chunk_floats, b.parts[j].chunk_floats);
    }
    CHECK_EQ(a.estimate.seconds, b.estimate.seconds);
  }
  CHECK_EQ(p.layers[0].rank, 7u);
  CHECK_EQ(p.layers[0].wire_floats, uint64_t{7 * 64 + 64 + 7 * 27});
}

TEST(plan_rejections) {
  const Plan plan = every_scheme_plan();
  const auto good = encode_plan(plan);
  const size_t scheme_at = first_scheme_byte("conv1");
  REQUIRE(good[scheme_at] == static_cast<uint8_t>(Scheme::kPowerSGD));
  auto b = good;
  b[scheme_at] = 9;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "layer conv1: unknown scheme 9");
  b = good;
  b[scheme_at] = 0;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "unknown scheme 0");
  // SFB on a conv layer: the plan's own rules refuse it.
  b = good;
  b[scheme_at] = static_cast<uint8_t>(Scheme::kSFB);
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "SFB needs a fully-connected layer");
  // Workers per machine (the u32 after P2): 0, and one that does not divide P1.
  b = good;
  b[8] = 0;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "0 workers per machine");
  b = good;
  b[8] = static_cast<uint8_t>(plan.num_workers + 1);
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "workers per machine for");
  // Rank 0 (the u32 after chunk_bytes).
  b = good;
  b[20] = 0;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "powersgd_rank=0");
  // An unknown compression.
  b = good;
  b[24] = 4;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "unknown compression 4");
  // A negative rate: the link's, then the local one.
  b = good;
  b[25 + 7] = 0xC0;  // sign bit of the link rate
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "want >= 0");
  b = good;
  b[25 + 3 * 8 + 7] = 0xC0;  // sign bit of the local rate
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "want >= 0");
  // Sizes that do not add up: the layer's rank, then its wire_floats.
  b = good;
  b[scheme_at + 1] = 6;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError,
               "rank 6 and 701 wire floats sent, the layout gives rank 7 and 701");
  b = good;
  b[scheme_at + 5] = 0;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "the layout gives rank 7 and 701");
  // An unknown per-layer force in a spec (before m, n, k, num_floats, the byte
  // scale and the eight measured costs).
  b = good;
  b[scheme_at - 1 - 4 * 8 - 4 - 8 * 8] = 5;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "unknown scheme choice 5");
  // A negative measured cost (the sign bit of the last one, the spec's last byte).
  b = good;
  b[scheme_at - 1] = 0xC0;
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "conv1: measured cost");
  // A truncated plan.
  b = good;
  b.pop_back();
  CHECK_THROWS(decode_plan(b.data(), b.size()), ProtocolError, "PLAN");
}

TEST(constant_time_compare) {
  CHECK(constant_time_equal("abc", "abc"));
  CHECK(!constant_time_equal("abc", "abd"));
  CHECK(!constant_time_equal("abc", "abcd"));
  CHECK(!constant_time_equal("", "a"));
  CHECK(constant_time_equal("", ""));
}

TEST_MAIN()
