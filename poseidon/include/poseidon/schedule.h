#pragma once
// Note [schedule]: what an iteration's synchronisation costs is not the sum of
// each layer's cost (cost_model.h, Note [time model]): a layer's transfer
// hides behind the backward pass of the layers below it (WFBP), transfers
// queue for one link, and only the compute after the last byte adds to the
// iteration in full. So when the link rate is known, make_plan judges a plan
// by a simulation of one iteration's backward and synchronisation:
//   - backward runs the layers from the last declared to the first: the
//     training thread spends each layer's MeasuredCosts::backward_s (0 when
//     not measured) plus its scheme's encode_s (SFB's is negative: the dW
//     product it skips; the sum is at least 0), and its first transfer is
//     ready;
//   - the link carries one transfer at a time, in the order they become
//     ready (ties: lower layer first; a layer is ready local_s/2 after its
//     backward, the local reduce of cost_model.h Note [local aggregation],
//     and done local_s/2 after its last transfer), each for its share of wire_s
//     (PowerSGD: part 0 then part 1, by their floats, r·M and r·N; part 1 is
//     ready between_s after part 0 is back, encoded on a continuation thread
//     — which shares the device, so between_s also lengthens the training
//     thread's time, charged right after the layer's encode);
//   - when backward is over, the training thread finishes the layers in
//     declaration order: each waits for its last transfer, then spends its
//     finish_s (rebuild, decode, conversion back).
// The iteration's end is that thread's time after the last finish. The
// forward pass is the same under every plan and is left out.
// make_plan starts from the per-layer picks (choose_scheme), compares that
// plan with the exact per-layer picks, and from the better one changes one
// free layer's scheme at a time to another candidate (scheme_candidate)
// while that shortens the iteration, until no change does. Then each lossy
// layer goes back to its best exact candidate while the iteration stays
// within kExactPreference of the fastest found: an approximate gradient costs
// steps to a given accuracy (docs/benchmarks.md), so a lossy scheme must win
// more than rounding's worth of time.

#include <cstdint>
#include <vector>

#include "poseidon/config.h"
#include "poseidon/cost_model.h"
#include "poseidon/plan.h"

namespace poseidon {

inline constexpr double kExactPreference = 0.01;  // 1% of the simulated iteration

// The simulated backward + synchronisation seconds of one iteration, the
// layers' `specs` (declaration order) running the schemes whose estimates
// are `chosen` (one per spec, estimate_scheme's with the plan's P1, P2,
// rank and rates). Throws ConfigError when the sizes differ. Pure.
double schedule_seconds(const std::vector<LayerSpec>& specs,
                        const std::vector<SchemeEstimate>& chosen);

// make_plan's refinement: the schemes for `specs` that the schedule finds
// fastest, starting from `picks` (the per-layer ones); layers in `fixed`
// (forced) keep theirs; G workers per machine. Requires
// rates.link_bytes_per_s > 0. Pure.
std::vector<Scheme> refine_by_schedule(const std::vector<LayerSpec>& specs,
                                       std::vector<Scheme> picks, const std::vector<bool>& fixed,
                                       int num_workers, int num_servers, Compression compression,
                                       int powersgd_rank, const Rates& rates, int g = 1);

}  // namespace poseidon
