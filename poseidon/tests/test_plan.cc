// The plan: chunk counts, round-robin placement over shards, forced schemes.

#include <map>

#include "check.h"
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
  p = make_plan({conv, fc}, 16, 16, 4 << 20, SchemeChoice::kSFB);
  CHECK(p.find(1)->scheme == Scheme::kSFB);
  // A per-layer force beats the cluster-wide one.
  conv.force = SchemeChoice::kPS;
  p = make_plan({conv, fc}, 16, 16, 4 << 20, SchemeChoice::kSFB);
  CHECK(p.find(1)->scheme == Scheme::kPS);
  CHECK(p.find(5)->scheme == Scheme::kSFB);
}

TEST_MAIN()
