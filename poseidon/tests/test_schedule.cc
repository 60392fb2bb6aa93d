// The iteration's schedule (schedule.h, Note [schedule]): hand-computed
// timelines, the plan it picks where the per-layer model picks wrongly,
// measured costs over the formulas, and the specs' measured costs on the wire.

#include <cmath>

#include "check.h"
#include "cluster.h"
#include "poseidon/cost_model.h"
#include "poseidon/errors.h"
#include "poseidon/internal/messages.h"
#include "poseidon/plan.h"
#include "poseidon/schedule.h"

using namespace poseidon;

namespace {

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

LayerSpec fc(uint32_t id, uint64_t m, uint64_t n, double backward_s) {
  LayerSpec s = ptest::fc_layer(id, m, n, 32);
  s.measured.backward_s = backward_s;
  return s;
}

SchemeEstimate timed(Scheme scheme, double wire_s, double encode_s = 0, double between_s = 0,
                     double finish_s = 0) {
  SchemeEstimate e;
  e.scheme = scheme;
  e.applicable = true;
  e.wire_s = wire_s;
  e.encode_s = encode_s;
  e.between_s = between_s;
  e.finish_s = finish_s;
  e.seconds = wire_s + encode_s + between_s + finish_s;
  return e;
}

}  // namespace

TEST(transfers_hide_behind_the_backward_of_lower_layers) {
  // Backward: fc1 (10 s), its transfer 10..15 while fc0 computes (10..20);
  // fc0's transfer 20..25; finish in declaration order: fc0 at 25, fc1 +2.
  const std::vector<LayerSpec> specs = {fc(0, 8, 8, 10), fc(1, 8, 8, 10)};
  CHECK(near(schedule_seconds(specs, {timed(Scheme::kPS, 5), timed(Scheme::kPS, 5, 0, 0, 2)}), 27));
  // Nothing to hide behind: the transfers queue for the link.
  const std::vector<LayerSpec> flat = {fc(0, 8, 8, 0), fc(1, 8, 8, 0)};
  CHECK(near(schedule_seconds(flat, {timed(Scheme::kPS, 5), timed(Scheme::kPS, 5)}), 10));
}

TEST(powersgd_rounds_run_one_after_the_other) {
  // M = 1, N = 3: part 0 carries a quarter of the wire time. Ready at 10 + 1;
  // P 11..12, Q ready 12 + 3 = 15, 15..18; finish 1 -> 19.
  const std::vector<LayerSpec> specs = {fc(0, 1, 3, 10)};
  CHECK(near(schedule_seconds(specs, {timed(Scheme::kPowerSGD, 4, 1, 3, 1)}), 19));
  // Q's encoding shares the device: below, fc0's backward (10 s) starts only
  // after fc1's encode (1) and between (3): fc1 ready at 1, P 1..2, Q ready
  // 5, 5..8; fc0's backward 4..14, its transfer 14..15; finish fc0 15, fc1 +1.
  const std::vector<LayerSpec> two = {fc(0, 8, 8, 10), fc(1, 1, 3, 0)};
  CHECK(near(schedule_seconds(two, {timed(Scheme::kPS, 1), timed(Scheme::kPowerSGD, 4, 1, 3, 1)}),
             16));
}

TEST(the_link_takes_the_lowest_ready_layer_first) {
  // fc2 holds the link 0..10 while fc1 (ready at 1) and fc0 (ready at 2)
  // wait; then fc0 goes first (10..13), fc1 after (13..16). fc0's finish
  // (100 s) starts when its transfer is back: 113 (first come, first served
  // would give 116).
  const std::vector<LayerSpec> specs = {fc(0, 8, 8, 1), fc(1, 8, 8, 1), fc(2, 8, 8, 0)};
  const double end = schedule_seconds(
      specs, {timed(Scheme::kPS, 3, 0, 0, 100), timed(Scheme::kPS, 3), timed(Scheme::kPS, 10)});
  CHECK(near(end, 113));
  CHECK_THROWS(schedule_seconds(specs, {timed(Scheme::kPS, 1)}), ConfigError, "3 layers");
}

TEST(measured_phases_replace_the_formulas) {
  Rates rates;
  rates.link_bytes_per_s = 1e6;
  rates.gemm_flops_per_s = 1e9;
  rates.memory_bytes_per_s = 1e9;
  MeasuredCosts measured;
  measured.sfb_rebuild_s = 0.5;
  measured.powersgd_between_s = 0.25;
  const SchemeEstimate sfb = estimate_scheme(Scheme::kSFB, LayerKind::kFullyConnected, 100, 200, 32,
                                             4, 4, 4, 20000, rates, measured);
  CHECK(near(sfb.finish_s, 0.5));
  // The own dW product it skips, not measured: the formula's 2·M·N·K flops.
  CHECK(near(sfb.encode_s, -2.0 * 100 * 200 * 32 / 1e9));
  CHECK(near(sfb.seconds, sfb.wire_s + 0.5 + sfb.encode_s));
  const SchemeEstimate psgd = estimate_scheme(Scheme::kPowerSGD, LayerKind::kFullyConnected, 100,
                                              200, 32, 4, 4, 4, 20000, rates, measured);
  // Unmeasured phases keep the formula: encode 2·M·N·r flops + 4·M·N bytes.
  CHECK(near(psgd.encode_s, 2.0 * 100 * 200 * 4 / 1e9 + 4.0 * 100 * 200 / 1e9));
  CHECK(near(psgd.between_s, 0.25));
  CHECK(near(psgd.seconds, psgd.wire_s + psgd.encode_s + psgd.between_s + psgd.finish_s));
}

namespace {

// Two 1000×1000 FC layers, P = 4, K = 32, on a link where SFB's factors take
// 1 s and PowerSGD's 0.0625 s; PowerSGD costs 0.3 s of encoding on the
// training thread. Alone, each layer is cheaper under PowerSGD (0.33 s
// against 1.01 s); in the iteration fc1's factors cross while fc0 computes
// its 1 s backward, so fc1 belongs to SFB.
std::vector<LayerSpec> overlap_specs() {
  std::vector<LayerSpec> specs = {fc(0, 1000, 1000, 1.0), fc(1, 1000, 1000, 0.0)};
  for (LayerSpec& s : specs) {
    s.measured.sfb_rebuild_s = 0.01;
    s.measured.powersgd_encode_s = 0.3;
    s.measured.powersgd_between_s = 0.01;
    s.measured.powersgd_finish_s = 0.01;
  }
  return specs;
}

Rates overlap_link() {
  Rates rates;
  rates.link_bytes_per_s = 4.0 * 2 * 32 * 3 * 2000;  // SFB's bytes per second
  return rates;
}

}  // namespace

TEST(the_schedule_corrects_the_per_layer_pick) {
  const std::vector<LayerSpec> specs = overlap_specs();
  const Rates rates = overlap_link();
  for (const LayerSpec& s : specs) {
    CHECK(choose_scheme(s.kind, s.m, s.n, s.k, 4, 4, Compression::kAuto, 4, s.num_floats, rates,
                        s.measured) == Scheme::kPowerSGD);
  }
  const Plan plan =
      make_plan(specs, 4, 4, 1 << 20, SchemeChoice::kAuto, Compression::kAuto, 4, rates);
  CHECK(plan.layers[0].scheme == Scheme::kPowerSGD);
  CHECK(plan.layers[1].scheme == Scheme::kSFB);
  std::vector<SchemeEstimate> chosen;
  for (const LayerPlan& lp : plan.layers) chosen.push_back(lp.estimate);
  CHECK(near(plan.schedule_s, schedule_seconds(specs, chosen)));
  // Every other assignment of the two layers is slower.
  for (const Scheme a : {Scheme::kPS, Scheme::kSFB, Scheme::kBF16, Scheme::kPowerSGD}) {
    for (const Scheme b : {Scheme::kPS, Scheme::kSFB, Scheme::kBF16, Scheme::kPowerSGD}) {
      const std::vector<SchemeEstimate> other = {
          estimate_scheme(a, LayerKind::kFullyConnected, 1000, 1000, 32, 4, 4, 4, 1000000, rates,
                          specs[0].measured),
          estimate_scheme(b, LayerKind::kFullyConnected, 1000, 1000, 32, 4, 4, 4, 1000000, rates,
                          specs[1].measured)};
      CHECK(schedule_seconds(specs, other) >= plan.schedule_s * (1 - 1e-12));
    }
  }
  // Exact only: the same schedule among PS and SFB; no rate: no schedule.
  const Plan exact = make_plan(specs, 4, 4, 1 << 20, SchemeChoice::kAuto);
  CHECK(exact.schedule_s == 0);
  const Plan exact_timed =
      make_plan(specs, 4, 4, 1 << 20, SchemeChoice::kAuto, Compression::kNone, 4, rates);
  CHECK(exact_timed.layers[0].scheme == Scheme::kSFB);
  CHECK(exact_timed.layers[1].scheme == Scheme::kSFB);
}

TEST(forced_layers_keep_their_scheme) {
  std::vector<LayerSpec> specs = overlap_specs();
  specs[1].force = SchemeChoice::kPowerSGD;
  const Plan plan =
      make_plan(specs, 4, 4, 1 << 20, SchemeChoice::kAuto, Compression::kAuto, 4, overlap_link());
  CHECK(plan.layers[1].scheme == Scheme::kPowerSGD);
}

TEST(a_lossy_layer_must_win_more_than_the_exact_preference) {
  // BF16 halves the layer's 0.03 s of PS wire: 0.015% of an iteration with
  // 100 s of backward (stays PS), 1.5% of one with 1 s (goes BF16).
  Rates rates;
  rates.link_bytes_per_s = 1e6;
  for (const double backward_s : {100.0, 1.0}) {
    LayerSpec s = fc(0, 50, 50, backward_s);
    s.kind = LayerKind::kConvolution;  // PS or BF16
    // PS: 2·2500·(4+4−2)/4 floats · 4 B = 30 kB -> 0.03 s; BF16 half.
    const Plan plan =
        make_plan({s}, 4, 4, 1 << 20, SchemeChoice::kAuto, Compression::kBF16, 4, rates);
    const Scheme want = backward_s > 10 ? Scheme::kPS : Scheme::kBF16;
    CHECK(plan.layers[0].scheme == want);
  }
}

TEST(measured_costs_travel_with_the_spec_but_do_not_identify_it) {
  std::vector<LayerSpec> specs = overlap_specs();
  specs[0].measured.bf16_finish_s = 0.125;
  const std::vector<uint8_t> bytes = encode_layer_specs(specs);
  const std::vector<LayerSpec> back = decode_layer_specs(bytes.data(), bytes.size());
  REQUIRE(back.size() == 2);
  CHECK(back[0].measured == specs[0].measured);
  CHECK(back[1].measured == specs[1].measured);
  LayerSpec other = specs[0];
  other.measured.backward_s = 7;
  CHECK(other == specs[0]);
  // A negative time is refused: on the wire, and by make_plan.
  specs[0].measured.powersgd_encode_s = -1;
  const std::vector<uint8_t> bad = encode_layer_specs(specs);
  CHECK_THROWS(decode_layer_specs(bad.data(), bad.size()), ProtocolError, "measured cost");
  CHECK_THROWS(make_plan(specs, 4, 4, 1 << 20, SchemeChoice::kAuto), ConfigError, "fc0 (layer 0");
}

TEST_MAIN()
