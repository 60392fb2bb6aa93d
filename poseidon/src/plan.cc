#include "poseidon/plan.h"

#include <algorithm>
#include <set>

#include "poseidon/errors.h"

namespace poseidon {

bool LayerSpec::operator==(const LayerSpec& o) const {
  return layer_id == o.layer_id && name == o.name && kind == o.kind && m == o.m && n == o.n &&
         k == o.k && num_floats == o.num_floats && force == o.force;
}

std::string LayerSpec::debug_string() const {
  return name + " (layer " + std::to_string(layer_id) + ", " + layer_kind_name(kind) + " " +
         std::to_string(m) + "x" + std::to_string(n) + ", K=" + std::to_string(k) + ", " +
         std::to_string(num_floats) + " floats)";
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

size_t LayerPlan::chunk_length(uint32_t chunk) const {
  const uint64_t begin = uint64_t{chunk} * chunk_floats;
  if (begin >= spec.num_floats) return 0;
  return static_cast<size_t>(std::min<uint64_t>(chunk_floats, spec.num_floats - begin));
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

Plan assemble_plan(const std::vector<LayerSpec>& specs, const std::vector<Scheme>& schemes,
                   int num_workers, int num_servers, size_t chunk_bytes) {
  if (num_workers < 1 || num_servers < 1 || num_workers > kMaxNodesPerRole ||
      num_servers > kMaxNodesPerRole) {
    throw ConfigError("plan for " + std::to_string(num_workers) + " workers and " +
                      std::to_string(num_servers) + " servers");
  }
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0) {
    throw ConfigError("plan chunk_bytes=" + std::to_string(chunk_bytes) +
                      " (want a positive multiple of 4)");
  }
  if (specs.size() != schemes.size()) throw ConfigError("plan: one scheme per layer");
  Plan plan;
  plan.num_workers = num_workers;
  plan.num_servers = num_servers;
  plan.chunk_bytes = chunk_bytes;
  std::set<uint32_t> seen;
  uint64_t next_chunk = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const LayerSpec& s = specs[i];
    if (!seen.insert(s.layer_id).second) {
      throw ConfigError("layer id " + std::to_string(s.layer_id) + " declared twice (" + s.name +
                        ")");
    }
    if (schemes[i] != Scheme::kPS && schemes[i] != Scheme::kSFB) {
      throw ConfigError("layer " + s.name + ": unknown scheme");
    }
    LayerPlan lp;
    lp.spec = s;
    lp.scheme = schemes[i];
    lp.cost = comm_cost(s.m, s.n, s.k, num_workers, num_servers);
    if (lp.scheme == Scheme::kPS) {
      // Note [chunk layout]: at most chunk_bytes each, and enough equal
      // chunks to reach every shard when the tensor is big enough.
      const uint64_t n = s.num_floats;
      uint64_t chunks = count_chunks(n, plan.chunk_floats());
      const uint64_t spread = std::min<uint64_t>(static_cast<uint64_t>(num_servers),
                                                 n / (min_spread_chunk_bytes(chunk_bytes) / 4));
      chunks = std::max(chunks, spread);
      lp.chunk_floats = std::max<uint64_t>(1, (n + chunks - 1) / chunks);
      lp.num_chunks = count_chunks(n, static_cast<size_t>(lp.chunk_floats));
      lp.first_chunk = next_chunk;
      next_chunk += lp.num_chunks;
    }
    plan.layers.push_back(lp);
  }
  return plan;
}

Plan make_plan(const std::vector<LayerSpec>& specs, int num_workers, int num_servers,
               size_t chunk_bytes, SchemeChoice cluster_force) {
  std::vector<Scheme> schemes;
  schemes.reserve(specs.size());
  for (const LayerSpec& s : specs) {
    SchemeChoice choice = s.force != SchemeChoice::kAuto ? s.force : cluster_force;
    if (choice == SchemeChoice::kPS) {
      schemes.push_back(Scheme::kPS);
    } else if (choice == SchemeChoice::kSFB) {
      schemes.push_back(Scheme::kSFB);
    } else {
      schemes.push_back(best_scheme(s.kind, s.m, s.n, s.k, num_workers, num_servers));
    }
  }
  return assemble_plan(specs, schemes, num_workers, num_servers, chunk_bytes);
}

}  // namespace poseidon
