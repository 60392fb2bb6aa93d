#include "poseidon/plan.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "poseidon/errors.h"
#include "poseidon/schedule.h"

namespace poseidon {

bool LayerSpec::operator==(const LayerSpec& o) const {
  return layer_id == o.layer_id && name == o.name && kind == o.kind && m == o.m && n == o.n &&
         k == o.k && num_floats == o.num_floats && force == o.force && byte_scale == o.byte_scale;
}

uint64_t LayerSpec::modelled_floats() const {
  const uint64_t scale = std::max<uint64_t>(1, byte_scale);
  return num_floats > UINT64_MAX / scale ? UINT64_MAX : num_floats * scale;
}

std::string LayerSpec::debug_string() const {
  const std::string scaled =
      byte_scale > 1 ? " (1/" + std::to_string(byte_scale) + " of the real layer)" : "";
  return name + " (layer " + std::to_string(layer_id) + ", " + layer_kind_name(kind) + " " +
         std::to_string(m) + "x" + std::to_string(n) + ", K=" + std::to_string(k) + ", " +
         std::to_string(num_floats) + " floats" + scaled + ")";
}

const LayerPlan* Plan::find(uint32_t layer_id) const {
  for (const LayerPlan& l : layers) {
    if (l.spec.layer_id == layer_id) return &l;
  }
  return nullptr;
}

int Plan::shard_of(const LayerPlan& layer, uint32_t chunk) const {
  return static_cast<int>((layer.first_chunk + chunk) % static_cast<uint64_t>(num_servers));
}

size_t Plan::chunk_length(uint64_t num_floats, uint32_t chunk) const {
  const uint64_t begin = uint64_t{chunk} * chunk_floats();
  if (begin >= num_floats) return 0;
  return static_cast<size_t>(std::min<uint64_t>(chunk_floats(), num_floats - begin));
}

size_t PlanPart::chunk_length(uint32_t chunk) const {
  if (chunk >= num_chunks) return 0;
  const uint64_t begin = uint64_t{chunk} * chunk_floats;
  if (begin >= num_floats) return 0;
  return static_cast<size_t>(std::min<uint64_t>(chunk_floats, num_floats - begin));
}

int LayerPlan::part_of(uint32_t chunk) const {
  for (size_t p = 0; p < parts.size(); ++p) {
    if (chunk >= parts[p].first_chunk && chunk - parts[p].first_chunk < parts[p].num_chunks) {
      return static_cast<int>(p);
    }
  }
  return -1;
}

size_t LayerPlan::chunk_offset(uint32_t chunk) const {
  const int p = part_of(chunk);
  if (p < 0) return static_cast<size_t>(wire_floats);
  const PlanPart& part = parts[static_cast<size_t>(p)];
  return static_cast<size_t>(part.offset + uint64_t{chunk - part.first_chunk} * part.chunk_floats);
}

size_t LayerPlan::chunk_length(uint32_t chunk) const {
  const int p = part_of(chunk);
  if (p < 0) return 0;
  const PlanPart& part = parts[static_cast<size_t>(p)];
  return part.chunk_length(chunk - part.first_chunk);
}

size_t min_spread_chunk_bytes(size_t chunk_bytes) {
  const size_t floor = std::max<size_t>(4, chunk_bytes / kSpreadChunksPerChunk / 4 * 4);
  return std::min(kMinSpreadChunkBytes, floor);
}

uint32_t count_chunks(uint64_t num_floats, size_t chunk_floats) {
  if (chunk_floats == 0) throw ConfigError("chunk size of 0 floats");
  const uint64_t n = std::max<uint64_t>(1, (num_floats + chunk_floats - 1) / chunk_floats);
  if (n > UINT32_MAX) {
    throw ConfigError("tensor of " + std::to_string(num_floats) + " floats needs " +
                      std::to_string(n) + " chunks (more than 2^32): raise chunk_bytes");
  }
  return static_cast<uint32_t>(n);
}

namespace {

// Note [chunk layout]: at most chunk_bytes each, enough equal chunks to reach
// every shard when the part is big enough, and past P2 a multiple of P2.
PlanPart cut_part(uint64_t offset, uint64_t n, size_t chunk_bytes, int num_servers) {
  PlanPart part;
  part.offset = offset;
  part.num_floats = n;
  uint64_t chunks = count_chunks(n, chunk_bytes / 4);
  const uint64_t p2 = static_cast<uint64_t>(std::max(1, num_servers));
  const uint64_t spread = std::min<uint64_t>(p2, n / (min_spread_chunk_bytes(chunk_bytes) / 4));
  chunks = std::max(chunks, spread);
  // Every shard owns as many of the part's chunks: a round waits for its busiest shard's link.
  if (chunks > p2 && chunks % p2 != 0) chunks = (chunks / p2 + 1) * p2;
  part.chunk_floats = std::max<uint64_t>(1, (n + chunks - 1) / chunks);
  part.num_chunks = count_chunks(n, static_cast<size_t>(part.chunk_floats));
  return part;
}

struct PowerSGDMatrix {
  uint64_t m = 0, n = 0;       // the matrix the wire carries
  uint64_t weight_floats = 0;  // where the rest starts in the layer's range
};

// PowerSGD's matrix of a layer at rank r (applicable: r <= min(m, n), m·n <=
// modelled floats): its m × n weight, or for a byte-scaled layer (Note
// [byte-scaled layers]) the stand-in's — rows and columns / s (rounded up, at
// least r, so that the factors keep rank r) within the weight's ceil(m·n / s)
// floats. Throws ConfigError when the stand-in's buffer cannot hold that.
PowerSGDMatrix powersgd_matrix(const LayerSpec& s, uint32_t rank) {
  if (s.byte_scale <= 1) return {s.m, s.n, s.m * s.n};
  const uint64_t scale = s.byte_scale;
  const auto up = [](uint64_t a, uint64_t b) { return a / b + (a % b != 0); };
  PowerSGDMatrix w;
  // m·n <= modelled_floats() < 2^64 (applicable), so the products do not overflow.
  w.weight_floats = up(s.m * s.n, scale);
  w.m = std::max<uint64_t>(rank, up(s.m, scale));
  w.n = std::min(std::max<uint64_t>(rank, up(s.n, scale)), w.weight_floats / w.m);
  if (w.weight_floats > s.num_floats || w.n < rank) {
    throw ConfigError("layer " + s.debug_string() + ": its byte-scaled buffer cannot hold a rank-" +
                      std::to_string(rank) + " PowerSGD matrix (use a smaller byte scale)");
  }
  return w;
}

// Why `scheme` cannot serve `s` ("" if it can).
std::string cannot_serve(Scheme scheme, const LayerSpec& s) {
  if (scheme_applicable(scheme, s.kind, s.m, s.n, s.modelled_floats())) return "";
  if (scheme == Scheme::kSFB) {
    return std::string("SFB needs a fully-connected layer, this one is ") + layer_kind_name(s.kind);
  }
  if (scheme == Scheme::kPowerSGD) {
    return "PowerSGD needs an m x n weight with m >= 2 and n >= 2 within the layer's floats, "
           "this one has m=" +
           std::to_string(s.m) + " n=" + std::to_string(s.n) +
           " num_floats=" + std::to_string(s.modelled_floats());
  }
  return std::string("unknown scheme ") + std::to_string(static_cast<int>(scheme));
}

void check_settings(int powersgd_rank, const Rates& rates, Compression compression) {
  if (powersgd_rank < 1) {
    throw ConfigError("plan: powersgd_rank=" + std::to_string(powersgd_rank) + " (want >= 1)");
  }
  for (const double r : {rates.link_bytes_per_s, rates.gemm_flops_per_s, rates.memory_bytes_per_s,
                         rates.local_bytes_per_s}) {
    if (!std::isfinite(r) || r < 0) {
      throw ConfigError("plan: rate " + std::to_string(r) + " (want >= 0; 0: unknown)");
    }
  }
  if (static_cast<uint8_t>(compression) > static_cast<uint8_t>(Compression::kAuto)) {
    throw ConfigError("plan: unknown compression " + std::to_string(static_cast<int>(compression)));
  }
}

void check_machines(int num_workers, int workers_per_machine) {
  if (workers_per_machine < 1 || num_workers % workers_per_machine != 0) {
    throw ConfigError("plan: workers_per_machine=" + std::to_string(workers_per_machine) +
                      " (want a divisor of the " + std::to_string(num_workers) + " workers)");
  }
}

// A worker's timings are inputs to the plan: a negative or non-finite one is
// a bug in the measuring, named with the layer.
void check_measured(const LayerSpec& s) {
  if (s.byte_scale < 1) {
    throw ConfigError("layer " + s.debug_string() +
                      ": byte_scale 0 (want >= 1; 1 for a real layer)");
  }
  const MeasuredCosts& c = s.measured;
  for (const double v : {c.backward_s, c.sfb_rebuild_s, c.dw_s, c.bf16_encode_s, c.bf16_finish_s,
                         c.powersgd_encode_s, c.powersgd_between_s, c.powersgd_finish_s}) {
    if (!std::isfinite(v) || v < 0) {
      throw ConfigError("layer " + s.debug_string() + ": measured cost " + std::to_string(v) +
                        " s (want >= 0; 0: not measured)");
    }
  }
}

}  // namespace

Plan assemble_plan(const std::vector<LayerSpec>& specs, const std::vector<Scheme>& schemes,
                   int num_workers, int num_servers, size_t chunk_bytes, int powersgd_rank,
                   const Rates& rates, Compression compression, int workers_per_machine) {
  if (num_workers < 1 || num_servers < 1 || num_workers > kMaxNodesPerRole ||
      num_servers > kMaxNodesPerRole) {
    throw ConfigError("plan for " + std::to_string(num_workers) + " workers and " +
                      std::to_string(num_servers) + " servers");
  }
  check_machines(num_workers, workers_per_machine);
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0) {
    throw ConfigError("plan chunk_bytes=" + std::to_string(chunk_bytes) +
                      " (want a positive multiple of 4)");
  }
  if (specs.size() != schemes.size()) throw ConfigError("plan: one scheme per layer");
  check_settings(powersgd_rank, rates, compression);
  Plan plan;
  plan.num_workers = num_workers;
  plan.num_servers = num_servers;
  plan.workers_per_machine = workers_per_machine;
  plan.chunk_bytes = chunk_bytes;
  plan.compression = compression;
  plan.powersgd_rank = static_cast<uint32_t>(powersgd_rank);
  plan.rates = rates;
  std::set<uint32_t> seen;
  uint64_t next_chunk = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const LayerSpec& s = specs[i];
    if (!seen.insert(s.layer_id).second) {
      throw ConfigError("layer id " + std::to_string(s.layer_id) + " declared twice (" + s.name +
                        ")");
    }
    const std::string why = cannot_serve(schemes[i], s);
    if (!why.empty()) throw ConfigError("layer " + s.debug_string() + ": " + why);
    LayerPlan lp;
    lp.spec = s;
    lp.scheme = schemes[i];
    lp.cost = comm_cost(s.m, s.n, s.k, num_workers, num_servers, workers_per_machine);
    lp.estimate = estimate_scheme(lp.scheme, s.kind, s.m, s.n, s.k, num_workers, num_servers,
                                  plan.powersgd_rank, s.modelled_floats(), rates, s.measured,
                                  workers_per_machine);
    // Note [plan parts]
    if (lp.scheme == Scheme::kPS || lp.scheme == Scheme::kBF16) {
      lp.parts.push_back(cut_part(0, s.num_floats, chunk_bytes, num_servers));
    } else if (lp.scheme == Scheme::kPowerSGD) {
      lp.rank = static_cast<uint32_t>(lp.estimate.rank);
      const PowerSGDMatrix w = powersgd_matrix(s, lp.rank);
      lp.matrix_m = w.m;
      lp.matrix_n = w.n;
      // r <= matrix_m, matrix_n and matrix_m·matrix_n <= weight_floats <= num_floats:
      // no overflow.
      const uint64_t part0 = uint64_t{lp.rank} * w.m + (s.num_floats - w.weight_floats);
      lp.parts.push_back(cut_part(0, part0, chunk_bytes, num_servers));
      lp.parts.push_back(cut_part(part0, uint64_t{lp.rank} * w.n, chunk_bytes, num_servers));
    }
    uint64_t chunks = 0;
    for (PlanPart& part : lp.parts) {
      part.first_chunk = static_cast<uint32_t>(chunks);
      chunks += part.num_chunks;
      if (chunks > UINT32_MAX) {
        throw ConfigError("layer " + s.debug_string() +
                          ": more than 2^32 chunks: raise chunk_bytes");
      }
      if (part.offset + part.num_floats < part.offset) {
        throw ConfigError("layer " + s.debug_string() + ": size overflows");
      }
      lp.wire_floats = part.offset + part.num_floats;
    }
    if (!lp.parts.empty()) {
      lp.num_chunks = static_cast<uint32_t>(chunks);
      lp.chunk_floats = lp.parts[0].chunk_floats;
      lp.first_chunk = next_chunk;
      next_chunk += lp.num_chunks;
    }
    plan.layers.push_back(lp);
  }
  if (rates.link_bytes_per_s > 0) {
    std::vector<SchemeEstimate> chosen;
    for (const LayerPlan& lp : plan.layers) chosen.push_back(lp.estimate);
    plan.schedule_s = schedule_seconds(specs, chosen);
  }
  return plan;
}

Plan make_plan(const std::vector<LayerSpec>& specs, int num_workers, int num_servers,
               size_t chunk_bytes, SchemeChoice cluster_force, Compression compression,
               int powersgd_rank, const Rates& rates, int workers_per_machine) {
  check_settings(powersgd_rank, rates, compression);
  if (num_workers >= 1) check_machines(num_workers, workers_per_machine);
  std::vector<Scheme> schemes;
  std::vector<bool> fixed;
  schemes.reserve(specs.size());
  for (const LayerSpec& s : specs) {
    check_measured(s);
    const bool own = s.force != SchemeChoice::kAuto;
    const SchemeChoice choice = own ? s.force : cluster_force;
    fixed.push_back(choice != SchemeChoice::kAuto);
    if (choice == SchemeChoice::kAuto) {
      schemes.push_back(choose_scheme(s.kind, s.m, s.n, s.k, num_workers, num_servers, compression,
                                      static_cast<uint64_t>(powersgd_rank), s.modelled_floats(),
                                      rates, s.measured, workers_per_machine));
      continue;
    }
    const char* setting = own ? "LayerSpec.force" : "Config.scheme (cluster-wide)";
    if (static_cast<uint8_t>(choice) > static_cast<uint8_t>(SchemeChoice::kPowerSGD)) {
      throw ConfigError("layer " + s.debug_string() + ": " + setting + "=" +
                        std::to_string(static_cast<int>(choice)) + " is no scheme");
    }
    const Scheme forced = static_cast<Scheme>(choice);  // same values
    const std::string why = cannot_serve(forced, s);
    if (!why.empty()) {
      throw ConfigError("layer " + s.debug_string() + ": " + setting + "=" + scheme_name(forced) +
                        " cannot serve it: " + why);
    }
    schemes.push_back(forced);
  }
  if (rates.link_bytes_per_s > 0 && num_workers >= 1 && num_servers >= 1) {
    schemes = refine_by_schedule(specs, std::move(schemes), fixed, num_workers, num_servers,
                                 compression, powersgd_rank, rates, workers_per_machine);
  }
  return assemble_plan(specs, schemes, num_workers, num_servers, chunk_bytes, powersgd_rank, rates,
                       compression, workers_per_machine);
}

std::vector<SchemeEstimate> layer_estimates(const LayerSpec& spec, int num_workers, int num_servers,
                                            int powersgd_rank, const Rates& rates,
                                            int workers_per_machine) {
  check_settings(powersgd_rank, rates, Compression::kNone);
  check_machines(num_workers, workers_per_machine);
  return estimate_schemes(spec.kind, spec.m, spec.n, spec.k, num_workers, num_servers,
                          static_cast<uint64_t>(powersgd_rank), spec.modelled_floats(), rates,
                          spec.measured, workers_per_machine);
}

}  // namespace poseidon
