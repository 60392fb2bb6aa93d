#include "poseidon/internal/messages.h"

#include <cmath>
#include <utility>

#include "poseidon/errors.h"
#include "poseidon/internal/wire.h"

namespace poseidon {
namespace {

// Smallest encoding of one LayerSpec: id, name length, kind, force, m, n, k,
// num_floats, then its eight measured costs.
constexpr size_t kMinLayerSpecBytes = 4 + 4 + 1 + 1 + 8 * 4 + 4 + 8 * 8;

// The measured costs in a fixed order (Note [measured costs]).
std::vector<double*> measured_fields(MeasuredCosts& c) {
  return {&c.backward_s,         &c.sfb_rebuild_s,    &c.dw_s,
          &c.bf16_encode_s,      &c.bf16_finish_s,    &c.powersgd_encode_s,
          &c.powersgd_between_s, &c.powersgd_finish_s};
}

void put_spec(ByteWriter& w, const LayerSpec& s) {
  w.u32(s.layer_id);
  w.str(s.name);
  w.u8(static_cast<uint8_t>(s.kind));
  w.u8(static_cast<uint8_t>(s.force));
  w.u64(s.m);
  w.u64(s.n);
  w.u64(s.k);
  w.u64(s.num_floats);
  w.u32(s.byte_scale);
  MeasuredCosts measured = s.measured;
  for (const double* v : measured_fields(measured)) w.f64(*v);
}

LayerSpec get_spec(ByteReader& r) {
  LayerSpec s;
  s.layer_id = r.u32();
  s.name = r.str(kMaxNameBytes);
  const uint8_t kind = r.u8();
  if (kind < 1 || kind > 3)
    throw ProtocolError("layer spec: unknown layer kind " + std::to_string(kind));
  s.kind = static_cast<LayerKind>(kind);
  const uint8_t force = r.u8();
  if (force > static_cast<uint8_t>(SchemeChoice::kPowerSGD))
    throw ProtocolError("layer spec: unknown scheme choice " + std::to_string(force));
  s.force = static_cast<SchemeChoice>(force);
  s.m = r.u64();
  s.n = r.u64();
  s.k = r.u64();
  s.num_floats = r.u64();
  s.byte_scale = r.u32();
  if (s.byte_scale < 1) throw ProtocolError("layer spec " + s.name + ": byte scale 0");
  for (double* v : measured_fields(s.measured)) {
    *v = r.f64();
    if (!std::isfinite(*v) || *v < 0) {
      throw ProtocolError("layer spec " + s.name + ": measured cost " + std::to_string(*v) + " s");
    }
  }
  return s;
}

std::vector<std::string> get_strings(ByteReader& r, size_t max_bytes) {
  const size_t n = r.count(4);
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(r.str(max_bytes));
  return out;
}

void put_strings(ByteWriter& w, const std::vector<std::string>& v) {
  w.u32(static_cast<uint32_t>(v.size()));
  for (const std::string& s : v) w.str(s);
}

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& m) {
  ByteWriter w;
  w.str(m.token);
  w.str(m.address);
  return w.take();
}

Hello decode_hello(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "HELLO");
  Hello m;
  m.token = r.str(kMaxTokenBytes);
  m.address = r.str(kMaxAddressBytes);
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode_address_book(const AddressBook& m) {
  ByteWriter w;
  put_strings(w, m.workers);
  put_strings(w, m.servers);
  return w.take();
}

AddressBook decode_address_book(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "ADDRESS_BOOK");
  AddressBook m;
  m.workers = get_strings(r, kMaxAddressBytes);
  m.servers = get_strings(r, kMaxAddressBytes);
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode_layer_specs(const std::vector<LayerSpec>& m) {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(m.size()));
  for (const LayerSpec& s : m) put_spec(w, s);
  return w.take();
}

std::vector<LayerSpec> decode_layer_specs(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "PLAN_REQUEST");
  const size_t n = r.count(kMinLayerSpecBytes);
  std::vector<LayerSpec> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(get_spec(r));
  r.expect_end();
  return out;
}

// Note [plan message]: P1, P2, G (workers per machine), chunk_bytes,
// PowerSGD's rank, the compression allowed and the four rates; then per layer its spec, its
// scheme, its rank and its wire_floats. A node rebuilds parts and chunks from
// these with assemble_plan (the coordinator's code), and the rank and
// wire_floats sent must equal the rebuilt ones: a plan that does not add up
// is refused rather than trusted.
std::vector<uint8_t> encode_plan(const Plan& m) {
  ByteWriter w;
  w.u32(static_cast<uint32_t>(m.num_workers));
  w.u32(static_cast<uint32_t>(m.num_servers));
  w.u32(static_cast<uint32_t>(m.workers_per_machine));
  w.u64(m.chunk_bytes);
  w.u32(m.powersgd_rank);
  w.u8(static_cast<uint8_t>(m.compression));
  w.f64(m.rates.link_bytes_per_s);
  w.f64(m.rates.gemm_flops_per_s);
  w.f64(m.rates.memory_bytes_per_s);
  w.f64(m.rates.local_bytes_per_s);
  w.u32(static_cast<uint32_t>(m.layers.size()));
  for (const LayerPlan& l : m.layers) {
    put_spec(w, l.spec);
    w.u8(static_cast<uint8_t>(l.scheme));
    w.u32(l.rank);
    w.u64(l.wire_floats);
  }
  return w.take();
}

Plan decode_plan(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "PLAN");
  const uint32_t p1 = r.u32();
  const uint32_t p2 = r.u32();
  const uint32_t g = r.u32();
  const uint64_t chunk_bytes = r.u64();
  if (p1 < 1 || p1 > kMaxNodesPerRole || p2 < 1 || p2 > kMaxNodesPerRole) {
    throw ProtocolError("PLAN: " + std::to_string(p1) + " workers, " + std::to_string(p2) +
                        " servers");
  }
  if (g < 1 || p1 % g != 0) {
    throw ProtocolError("PLAN: " + std::to_string(g) + " workers per machine for " +
                        std::to_string(p1) + " workers");
  }
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0 || chunk_bytes > (uint64_t{1} << 40)) {
    throw ProtocolError("PLAN: chunk_bytes=" + std::to_string(chunk_bytes));
  }
  const uint32_t rank = r.u32();
  if (rank < 1 || rank > INT32_MAX) {
    throw ProtocolError("PLAN: powersgd_rank=" + std::to_string(rank) + " (want >= 1)");
  }
  const uint8_t compression = r.u8();
  if (compression > static_cast<uint8_t>(Compression::kAuto)) {
    throw ProtocolError("PLAN: unknown compression " + std::to_string(compression));
  }
  Rates rates;
  rates.link_bytes_per_s = r.f64();
  rates.gemm_flops_per_s = r.f64();
  rates.memory_bytes_per_s = r.f64();
  rates.local_bytes_per_s = r.f64();
  const size_t n = r.count(kMinLayerSpecBytes + 1 + 4 + 8);
  std::vector<LayerSpec> specs;
  std::vector<Scheme> schemes;
  std::vector<std::pair<uint32_t, uint64_t>> sizes;  // rank, wire_floats as sent
  for (size_t i = 0; i < n; ++i) {
    specs.push_back(get_spec(r));
    const uint8_t scheme = r.u8();
    if (scheme < static_cast<uint8_t>(Scheme::kPS) ||
        scheme > static_cast<uint8_t>(Scheme::kPowerSGD)) {
      throw ProtocolError("PLAN: layer " + specs.back().name + ": unknown scheme " +
                          std::to_string(scheme));
    }
    schemes.push_back(static_cast<Scheme>(scheme));
    const uint32_t layer_rank = r.u32();
    const uint64_t wire_floats = r.u64();
    sizes.emplace_back(layer_rank, wire_floats);
  }
  r.expect_end();
  Plan plan;
  try {
    plan = assemble_plan(specs, schemes, static_cast<int>(p1), static_cast<int>(p2),
                         static_cast<size_t>(chunk_bytes), static_cast<int>(rank), rates,
                         static_cast<Compression>(compression), static_cast<int>(g));
  } catch (const ConfigError& e) {
    throw ProtocolError(std::string("PLAN: ") + e.what());
  }
  for (size_t i = 0; i < n; ++i) {
    const LayerPlan& l = plan.layers[i];
    if (l.rank != sizes[i].first || l.wire_floats != sizes[i].second) {
      throw ProtocolError("PLAN: layer " + l.spec.debug_string() + " (" + scheme_name(l.scheme) +
                          "): rank " + std::to_string(sizes[i].first) + " and " +
                          std::to_string(sizes[i].second) + " wire floats sent, the layout gives " +
                          "rank " + std::to_string(l.rank) + " and " +
                          std::to_string(l.wire_floats));
    }
  }
  return plan;
}

std::vector<uint8_t> encode_failure(const Failure& m) {
  ByteWriter w;
  w.str(m.peer);
  w.str(m.reason);
  return w.take();
}

Failure decode_failure(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "FAILURE");
  Failure m;
  m.peer = r.str(kMaxAddressBytes + kMaxNameBytes);
  m.reason = r.str(kMaxReasonBytes);
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode_progress(const Progress& m) {
  ByteWriter w;
  w.i64(m.iteration);
  w.i64(m.layer);
  return w.take();
}

Progress decode_progress(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "HEARTBEAT");
  Progress m;
  m.iteration = r.i64();
  m.layer = r.i64();
  r.expect_end();
  return m;
}

const char* action_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kNone:
      return "none";
    case ActionKind::kSnapshot:
      return "snapshot";
    case ActionKind::kStop:
      return "stop";
  }
  return "action?";
}

std::vector<uint8_t> encode_action(const ActionMessage& m) {
  ByteWriter w;
  w.u64(m.round);
  w.u8(static_cast<uint8_t>(m.kind));
  w.i64(m.iteration);
  w.str(m.reason.size() > kMaxReasonBytes ? m.reason.substr(0, kMaxReasonBytes) : m.reason);
  return w.take();
}

ActionMessage decode_action(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "ACTION");
  ActionMessage m;
  m.round = r.u64();
  const uint8_t kind = r.u8();
  if (kind > static_cast<uint8_t>(ActionKind::kStop)) {
    throw ProtocolError("action: unknown kind " + std::to_string(kind));
  }
  m.kind = static_cast<ActionKind>(kind);
  m.iteration = r.i64();
  m.reason = r.str(kMaxReasonBytes);
  r.expect_end();
  return m;
}

std::vector<uint8_t> encode_text(const std::string& text) {
  ByteWriter w;
  w.str(text.size() > kMaxReasonBytes ? text.substr(0, kMaxReasonBytes) : text);
  return w.take();
}

std::string decode_text(const uint8_t* data, size_t size) {
  ByteReader r(data, size, "text");
  std::string s = r.str(kMaxReasonBytes);
  r.expect_end();
  return s;
}

}  // namespace poseidon
