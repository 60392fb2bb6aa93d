// The plan: chunk counts, round-robin placement over shards, forced schemes.

#include <map>

#include "check.h"
#include "poseidon/errors.h"
#include "poseidon/plan.h"

using namespace poseidon;

namespace {
LayerSpec spec(uint32_t id, uint64_t floats, LayerKind kind = LayerKind::kOther) {
  LayerSpec s;
  s.layer_id = id;
  s.name = "l" + std::to_string(id);
  s.kind = kind;
  s.m = floats;
  s.n = 1;
  s.k = 1;
  s.num_floats = floats;
  return s;
}
}  // namespace

TEST(chunk_counts) {
  CHECK_EQ(count_chunks(0, 1024), 1u);  // an empty tensor still makes one round
  CHECK_EQ(count_chunks(1, 1024), 1u);
  CHECK_EQ(count_chunks(1023, 1024), 1u);
  CHECK_EQ(count_chunks(1024, 1024), 1u);
  CHECK_EQ(count_chunks(1025, 1024), 2u);
  Plan p = make_plan({spec(0, 2049)}, 1, 1, 4096, SchemeChoice::kAuto);
  const LayerPlan& l = p.layers[0];
  // Chunks are as equal as possible: 2049 floats in 3 chunks of 683, not 1024+1024+1.
  CHECK_EQ(l.num_chunks, 3u);
  CHECK_EQ(l.chunk_length(0), size_t{683});
  CHECK_EQ(l.chunk_length(2), size_t{683});
  CHECK_EQ(l.chunk_offset(2), size_t{1366});
  CHECK_EQ(l.chunk_length(3), size_t{0});
  // SFB factors are cut at the plan's chunk size.
  CHECK_EQ(p.chunk_length(2049, 2), size_t{1});
  CHECK_EQ(p.chunk_offset(2), size_t{2048});
}

TEST(small_tensors_still_spread_over_every_shard) {
  // 4 MiB with 4 MiB chunks and 4 shards: 4 chunks of 1 MiB, one per shard.
  const size_t mib = 1 << 20;
  Plan p = make_plan({spec(0, mib)}, 4, 4, 4 * mib, SchemeChoice::kAuto);
  CHECK_EQ(p.layers[0].num_chunks, 4u);
  CHECK_EQ(p.layers[0].chunk_floats, uint64_t{mib / 4});
  // Not below kMinSpreadChunkBytes: 100 KiB makes 1 chunk (64 KiB minimum).
  p = make_plan({spec(0, 25 * 1024)}, 4, 4, 4 * mib, SchemeChoice::kAuto);
  CHECK_EQ(p.layers[0].num_chunks, 1u);
  // 256 KiB on 3 shards: 3 chunks of 21846 floats (the last shorter).
  p = make_plan({spec(0, 64 * 1024)}, 1, 3, 4 * mib, SchemeChoice::kAuto);
  CHECK_EQ(p.layers[0].num_chunks, 3u);
  CHECK_EQ(p.layers[0].chunk_length(2), size_t{64 * 1024 - 2 * 21846});
  // Big tensors keep the configured chunk size.
  p = make_plan({spec(0, 10 * mib)}, 2, 2, 4 * mib, SchemeChoice::kAuto);
  CHECK_EQ(p.layers[0].num_chunks, 10u);
}

TEST(every_shard_owns_as_many_chunks_of_a_big_tensor) {
  // 9 MiB with 1 MiB chunks on 4 shards: 12 chunks of 0.75 MiB, 3 per shard (9 would give
  // one shard 3 and the others 2), wherever the layer's first chunk falls.
  const size_t mib = 1 << 20;
  const Plan p = make_plan({spec(0, 10), spec(1, 9 * mib / 4)}, 4, 4, mib, SchemeChoice::kAuto);
  const LayerPlan& big = *p.find(1);
  CHECK_EQ(big.num_chunks, 12u);
  CHECK_EQ(big.chunk_floats, uint64_t{9 * mib / 4 / 12});
  std::map<int, int> per_shard;
  for (uint32_t c = 0; c < big.num_chunks; ++c) ++per_shard[p.shard_of(big, c)];
  for (int shard = 0; shard < 4; ++shard) CHECK_EQ(per_shard[shard], 3);
  // A count that is already a multiple of P2 stays; so does one below P2 (200 KiB on 8
  // shards: 3 chunks of the 64 KiB spread minimum, not rounded up to 8).
  CHECK_EQ(make_plan({spec(0, 8 * mib / 4)}, 4, 4, mib, SchemeChoice::kAuto).layers[0].num_chunks,
           8u);
  CHECK_EQ(make_plan({spec(0, 50 * 1024)}, 4, 8, mib, SchemeChoice::kAuto).layers[0].num_chunks,
           3u);
}

TEST(layout_keeps_its_shape_when_every_size_shrinks_by_one_factor) {
  // The byte-scaled replay divides tensors and chunk_bytes by s: chunk counts stay.
  const size_t mib = 1 << 20;
  CHECK_EQ(min_spread_chunk_bytes(mib), size_t{64} << 10);
  CHECK_EQ(min_spread_chunk_bytes(4 * mib), size_t{64} << 10);
  CHECK_EQ(min_spread_chunk_bytes(mib / 32), size_t{2} << 10);
  CHECK_EQ(min_spread_chunk_bytes(8), size_t{4});
  for (const uint64_t floats : {uint64_t{1792}, uint64_t{36928}, uint64_t{295168},
                                uint64_t{2359808}, uint64_t{102764544}}) {
    const Plan real = make_plan({spec(0, floats)}, 16, 16, mib, SchemeChoice::kAuto);
    const Plan scaled = make_plan({spec(0, floats / 32)}, 16, 16, mib / 32, SchemeChoice::kAuto);
    CHECK_EQ(real.layers[0].num_chunks, scaled.layers[0].num_chunks);
  }
}

TEST(chunks_spread_evenly_over_shards) {
  // Many one-chunk layers must not all land on shard 0.
  std::vector<LayerSpec> specs;
  for (uint32_t i = 0; i < 12; ++i) specs.push_back(spec(i, 10));
  specs.push_back(spec(99, 1024 * 9));  // 9 chunks of 1024 floats (36 KiB: no extra spread)
  const Plan p = make_plan(specs, 2, 3, 4096, SchemeChoice::kAuto);
  std::map<int, int> per_shard;
  for (const LayerPlan& l : p.layers) {
    for (uint32_t c = 0; c < l.num_chunks; ++c) ++per_shard[p.shard_of(l, c)];
  }
  CHECK_EQ(per_shard[0], 7);
  CHECK_EQ(per_shard[1], 7);
  CHECK_EQ(per_shard[2], 7);
}

TEST(schemes_and_forcing) {
  LayerSpec fc = spec(5, 4096 * 4096, LayerKind::kFullyConnected);
  fc.m = 4096;
  fc.n = 4096;
  fc.k = 32;
  LayerSpec conv = spec(1, 1000, LayerKind::kConvolution);
  Plan p = make_plan({conv, fc}, 16, 16, 4 << 20, SchemeChoice::kAuto);
  CHECK(p.find(5)->scheme == Scheme::kSFB);
  CHECK(p.find(1)->scheme == Scheme::kPS);
  CHECK_EQ(p.find(5)->num_chunks, 0u);  // SFB layers have no PS chunks
  CHECK(p.find(7) == nullptr);
  p = make_plan({conv, fc}, 16, 16, 4 << 20, SchemeChoice::kPS);
  CHECK(p.find(5)->scheme == Scheme::kPS);
  // SFB serves fully-connected layers only: forcing it on a conv is an error
  // naming the layer and the setting.
  CHECK_THROWS(
      make_plan({conv, fc}, 16, 16, 4 << 20, SchemeChoice::kSFB), ConfigError,
      "layer l1 (layer 1, conv 1000x1, K=1, 1000 floats): Config.scheme (cluster-wide)=SFB "
      "cannot serve it: SFB needs a fully-connected layer, this one is conv");
  // A per-layer force beats the cluster-wide one.
  conv.force = SchemeChoice::kPS;
  p = make_plan({conv, fc}, 16, 16, 4 << 20, SchemeChoice::kSFB);
  CHECK(p.find(1)->scheme == Scheme::kPS);
  CHECK(p.find(5)->scheme == Scheme::kSFB);
}

// Note [plan parts]: PS and BF16 one part, PowerSGD two ([P | rest], [Q]),
// SFB none; chunks numbered through the layer, shards round-robin from the
// layer's first chunk.
TEST(powersgd_parts_layout) {
  LayerSpec first = spec(0, 10);
  LayerSpec fc = spec(1, 300 * 200 + 300, LayerKind::kFullyConnected);
  fc.m = 300;
  fc.n = 200;
  fc.k = 8;
  fc.force = SchemeChoice::kPowerSGD;
  LayerSpec bf = spec(2, 5000);
  bf.force = SchemeChoice::kBF16;
  // 4096-byte chunks (1024 floats); the spread floor is 256 bytes (64 floats).
  const Plan p = make_plan({first, fc, bf}, 2, 3, 4096, SchemeChoice::kAuto, Compression::kNone, 4);
  CHECK_EQ(p.powersgd_rank, 4u);
  const LayerPlan& a = *p.find(0);
  REQUIRE(a.parts.size() == 1);
  CHECK_EQ(a.wire_floats, uint64_t{10});
  CHECK_EQ(a.num_chunks, 1u);
  CHECK_EQ(a.rank, 0u);

  const LayerPlan& l = *p.find(1);
  CHECK(l.scheme == Scheme::kPowerSGD);
  CHECK_EQ(l.rank, 4u);
  REQUIRE(l.parts.size() == 2);
  // Part 0: P (4·300) and the bias (300), 1500 floats: 2 chunks by size, 3 to
  // reach the 3 shards: 500 each.
  CHECK_EQ(l.parts[0].offset, uint64_t{0});
  CHECK_EQ(l.parts[0].num_floats, uint64_t{1500});
  CHECK_EQ(l.parts[0].first_chunk, 0u);
  CHECK_EQ(l.parts[0].num_chunks, 3u);
  CHECK_EQ(l.parts[0].chunk_floats, uint64_t{500});
  // Part 1: Q (4·200 = 800): 3 chunks of 267, 267, 266.
  CHECK_EQ(l.parts[1].offset, uint64_t{1500});
  CHECK_EQ(l.parts[1].num_floats, uint64_t{800});
  CHECK_EQ(l.parts[1].first_chunk, 3u);
  CHECK_EQ(l.parts[1].num_chunks, 3u);
  CHECK_EQ(l.parts[1].chunk_floats, uint64_t{267});
  CHECK_EQ(l.wire_floats, uint64_t{2300});
  CHECK_EQ(l.num_chunks, 6u);
  CHECK_EQ(l.chunk_floats, uint64_t{500});
  CHECK_EQ(l.first_chunk, uint64_t{1});  // after layer 0's one chunk
  CHECK_EQ(l.chunk_offset(2), size_t{1000});
  CHECK_EQ(l.chunk_offset(3), size_t{1500});
  CHECK_EQ(l.chunk_offset(5), size_t{2034});
  CHECK_EQ(l.chunk_length(5), size_t{266});
  CHECK_EQ(l.chunk_length(6), size_t{0});
  CHECK_EQ(l.chunk_offset(6), size_t{2300});
  CHECK_EQ(l.part_of(2), 0);
  CHECK_EQ(l.part_of(3), 1);
  CHECK_EQ(l.part_of(6), -1);
  CHECK_EQ(l.parts[1].chunk_length(2), size_t{266});
  CHECK_EQ(l.parts[1].chunk_length(3), size_t{0});
  // Round-robin through the layer's chunks, continuing after layer 0.
  for (uint32_t c = 0; c < l.num_chunks; ++c)
    CHECK_EQ(p.shard_of(l, c), static_cast<int>((1 + c) % 3));
  // The chosen scheme's estimate rides along.
  CHECK(l.estimate.scheme == Scheme::kPowerSGD);
  CHECK_EQ(l.estimate.rank, uint64_t{4});

  const LayerPlan& b = *p.find(2);
  CHECK(b.scheme == Scheme::kBF16);
  REQUIRE(b.parts.size() == 1);
  CHECK_EQ(b.wire_floats, uint64_t{5000});  // an fp32 buffer; bf16 only on the wire
  CHECK_EQ(b.first_chunk, uint64_t{7});
  CHECK_EQ(b.num_chunks, 6u);  // 5 at the chunk size, rounded up to a multiple of P2 = 3
}

TEST(powersgd_rank_is_clamped_to_the_weight) {
  LayerSpec s = spec(0, 300 * 3, LayerKind::kConvolution);
  s.m = 300;
  s.n = 3;
  s.force = SchemeChoice::kPowerSGD;
  const Plan p = make_plan({s}, 2, 2, 1 << 20, SchemeChoice::kAuto, Compression::kNone, 50);
  const LayerPlan& l = p.layers[0];
  CHECK_EQ(l.rank, 3u);
  CHECK_EQ(l.parts[0].num_floats, uint64_t{900});  // P = 300×3, no rest
  CHECK_EQ(l.parts[1].num_floats, uint64_t{9});    // Q = 3×3
  CHECK_EQ(l.wire_floats, uint64_t{909});
}

// Note [byte-scaled layers]: the compute replay's stand-in of VGG's fc6 at
// byte scale 32 is planned as the real layer, and its parts are 1/32 of it.
TEST(byte_scaled_layers_are_planned_as_the_real_one_and_move_a_scaled_wire) {
  LayerSpec real = spec(6, 4096 * 25088 + 4096, LayerKind::kFullyConnected);
  real.m = 4096;
  real.n = 25088;
  real.k = 32;
  LayerSpec stand_in = real;
  stand_in.byte_scale = 32;
  stand_in.num_floats = 4096 * 25088 / 32 + 4096 / 32;  // each blob rounded up: exact here
  CHECK_EQ(stand_in.modelled_floats(), real.num_floats);
  CHECK(!(stand_in == real));  // part of the identity: every worker must declare the same
  Rates rates;
  rates.link_bytes_per_s = 2.5e8;
  rates.gemm_flops_per_s = 5e12;
  for (const Compression c : {Compression::kNone, Compression::kBF16, Compression::kAuto}) {
    const Plan a = make_plan({real}, 16, 16, 1 << 20, SchemeChoice::kAuto, c, 4, rates);
    const Plan b = make_plan({stand_in}, 16, 16, 1 << 15, SchemeChoice::kAuto, c, 4, rates);
    CHECK(a.layers[0].scheme == b.layers[0].scheme);
    CHECK_EQ(a.layers[0].estimate.wire_bytes, b.layers[0].estimate.wire_bytes);
    CHECK_EQ(a.schedule_s, b.schedule_s);
  }
  stand_in.force = SchemeChoice::kPowerSGD;
  const LayerPlan l = make_plan({stand_in}, 16, 16, 1 << 15, SchemeChoice::kAuto).layers[0];
  CHECK_EQ(l.rank, 4u);
  CHECK_EQ(l.matrix_m, uint64_t{128});  // 4096 / 32
  CHECK_EQ(l.matrix_n, uint64_t{784});  // 25088 / 32
  REQUIRE(l.parts.size() == 2);
  CHECK_EQ(l.parts[0].num_floats, uint64_t{4 * 128 + 128});  // P and the bias's 1/32
  CHECK_EQ(l.parts[1].num_floats, uint64_t{4 * 784});
  real.force = SchemeChoice::kPowerSGD;
  const LayerPlan r = make_plan({real}, 16, 16, 1 << 20, SchemeChoice::kAuto).layers[0];
  CHECK_EQ(r.matrix_m, uint64_t{4096});
  CHECK_EQ(r.matrix_n, uint64_t{25088});
  CHECK_EQ(r.wire_floats, uint64_t{32} * l.wire_floats);

  // A small conv: rows and columns round up to the rank, within the weight's floats.
  LayerSpec conv = spec(1, 64 * 27 / 32 + 2, LayerKind::kConvolution);
  conv.m = 64;
  conv.n = 27;
  conv.byte_scale = 32;
  conv.force = SchemeChoice::kPowerSGD;
  const LayerPlan c = make_plan({conv}, 4, 4, 4096, SchemeChoice::kAuto).layers[0];
  CHECK_EQ(c.matrix_m, uint64_t{4});
  CHECK_EQ(c.matrix_n, uint64_t{4});
  CHECK_EQ(c.wire_floats, uint64_t{4 * 4 + 2 + 4 * 4});  // P, the bias's 2 floats, Q
  // A rank the scaled weight's floats cannot hold (27 × 27 in 54), and byte
  // scale 0, are refused.
  CHECK_THROWS(make_plan({conv}, 4, 4, 4096, SchemeChoice::kAuto, Compression::kNone, 50),
               ConfigError, "cannot hold a rank-27 PowerSGD matrix");
  conv.byte_scale = 0;
  CHECK_THROWS(make_plan({conv}, 4, 4, 4096, SchemeChoice::kAuto), ConfigError, "byte_scale 0");
}

TEST(sfb_layers_have_no_parts) {
  LayerSpec fc = spec(5, 4096 * 4096, LayerKind::kFullyConnected);
  fc.m = 4096;
  fc.n = 4096;
  fc.k = 32;
  const Plan p = make_plan({fc}, 16, 16, 4 << 20, SchemeChoice::kAuto);
  CHECK(p.layers[0].scheme == Scheme::kSFB);
  CHECK(p.layers[0].parts.empty());
  CHECK_EQ(p.layers[0].wire_floats, uint64_t{0});
  CHECK_EQ(p.layers[0].num_chunks, 0u);
}

TEST(forced_schemes_must_serve_the_layer) {
  LayerSpec vec = spec(3, 100);  // a vector: m=100, n=1
  vec.force = SchemeChoice::kPowerSGD;
  CHECK_THROWS(make_plan({vec}, 2, 2, 4096, SchemeChoice::kAuto), ConfigError,
               "layer l3 (layer 3, other 100x1, K=1, 100 floats): LayerSpec.force=PowerSGD cannot "
               "serve it: PowerSGD needs an m x n weight with m >= 2 and n >= 2");
  vec.force = SchemeChoice::kAuto;
  CHECK_THROWS(make_plan({vec}, 2, 2, 4096, SchemeChoice::kPowerSGD), ConfigError,
               "Config.scheme (cluster-wide)=PowerSGD cannot serve it");
  // m·n beyond num_floats: not a weight of this layer.
  LayerSpec big = spec(4, 10, LayerKind::kFullyConnected);
  big.m = 4;
  big.n = 4;
  big.force = SchemeChoice::kPowerSGD;
  CHECK_THROWS(make_plan({big}, 2, 2, 4096, SchemeChoice::kAuto), ConfigError,
               "m=4 n=4 num_floats=10");
  // BF16 serves anything, an empty layer included.
  vec.force = SchemeChoice::kBF16;
  CHECK(make_plan({vec, spec(9, 0)}, 2, 2, 4096, SchemeChoice::kBF16).layers[1].scheme ==
        Scheme::kBF16);
  CHECK_THROWS(make_plan({spec(0, 8)}, 2, 2, 4096, SchemeChoice::kAuto, Compression::kAuto, 0),
               ConfigError, "powersgd_rank=0");
  Rates bad;
  bad.link_bytes_per_s = -1;
  CHECK_THROWS(make_plan({spec(0, 8)}, 2, 2, 4096, SchemeChoice::kAuto, Compression::kNone, 4, bad),
               ConfigError, "want >= 0");
  // assemble_plan (what a decoded plan goes through) checks too.
  CHECK_THROWS(assemble_plan({spec(0, 8)}, {Scheme::kSFB}, 2, 2, 4096), ConfigError,
               "SFB needs a fully-connected layer");
}

TEST(compression_lets_the_model_pick_lossy_schemes) {
  LayerSpec conv = spec(1, 512 * 4608 + 512, LayerKind::kConvolution);
  conv.m = 512;
  conv.n = 4608;
  conv.k = 32;
  const auto pick = [&](Compression c) {
    return make_plan({conv}, 16, 16, 1 << 20, SchemeChoice::kAuto, c).layers[0].scheme;
  };
  CHECK(pick(Compression::kNone) == Scheme::kPS);
  CHECK(pick(Compression::kBF16) == Scheme::kBF16);
  CHECK(pick(Compression::kPowerSGD) == Scheme::kPowerSGD);
  CHECK(pick(Compression::kAuto) == Scheme::kPowerSGD);
  // A forced choice beats the allowance.
  conv.force = SchemeChoice::kPS;
  CHECK(pick(Compression::kAuto) == Scheme::kPS);
  // Every scheme's estimate, for printing why.
  const std::vector<SchemeEstimate> all = layer_estimates(conv, 16, 16, 4);
  REQUIRE(all.size() == 4);
  CHECK(all[0].scheme == Scheme::kPS && all[0].applicable);
  CHECK(all[1].scheme == Scheme::kSFB && !all[1].applicable);
  CHECK(all[2].scheme == Scheme::kBF16 && all[2].applicable);
  CHECK(all[3].scheme == Scheme::kPowerSGD && all[3].applicable);
  CHECK_EQ(all[2].wire_bytes * 2, all[0].wire_bytes);
}

TEST_MAIN()
