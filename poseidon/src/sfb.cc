#include "poseidon/internal/sfb.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace poseidon {
namespace {
constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
}  // namespace

SFBroadcaster::Slot& SFBroadcaster::slot_for(Layer& layer, int64_t iteration) {
  return layer.slots[static_cast<uint64_t>(iteration) & 1u];
}

void SFBroadcaster::reset_slot(Slot& slot, int64_t iteration) const {
  slot.iteration = iteration;
  slot.used = true;
  std::fill(slot.total.begin(), slot.total.end(), kUnknown);
  for (auto& g : slot.got) std::fill(g.begin(), g.end(), 0);
  std::fill(slot.chunks_left.begin(), slot.chunks_left.end(), 0);
}

bool SFBroadcaster::rank_complete(const Slot& slot, size_t rank) const {
  return slot.total[rank] != kUnknown && slot.chunks_left[rank] == 0;
}

void SFBroadcaster::register_layer(uint32_t layer_id, size_t reserved_floats, size_t max_floats) {
  const Plan& plan = plane_.plan;
  const size_t p1 = static_cast<size_t>(plan.num_workers);
  max_floats = std::max(max_floats, reserved_floats);
  layers_.add(layer_id, [&](Layer& layer, const std::string&) {
    layer.max_floats = max_floats;
    layer.max_chunks = count_chunks(max_floats, plan.chunk_floats());
    for (Slot& s : layer.slots) {
      // Indexed by rank; only the machines' leaders send factors (Note [local aggregation]).
      s.buffers.assign(p1, {});
      for (size_t r = 0; r < p1; ++r) {
        if (plan.is_leader(static_cast<int>(r))) s.buffers[r].assign(reserved_floats, 0.0f);
      }
      s.total.assign(p1, kUnknown);
      s.got.assign(p1, std::vector<uint8_t>(layer.max_chunks, 0));
      s.chunks_left.assign(p1, 0);
    }
  });
}

Handle SFBroadcaster::allgather(uint32_t layer_id, int64_t iteration, const float* send,
                                size_t num_floats) {
  const auto [layer, what] = layers_.use("allgather", layer_id, iteration);
  const std::string me = plane_.self.str();
  plane_.check_abort(what, layer_id, iteration);
  if (num_floats > layer.max_floats) {
    throw ConfigError(me + ": " + what + ": factor of " + std::to_string(num_floats) +
                      " floats exceeds the registered maximum of " +
                      std::to_string(layer.max_floats));
  }
  if (send == nullptr && num_floats > 0) throw ConfigError(me + ": " + what + ": null buffer");
  const Plan& plan = plane_.plan;
  if (!plan.is_leader(plane_.self.rank)) {
    throw ConfigError(me + ": " + what + ": with " + std::to_string(plan.workers_per_machine) +
                      " workers per machine only each machine's leader sends factors; this "
                      "machine's is worker " +
                      std::to_string(plan.leader_of_machine(plan.machine_of(plane_.self.rank))));
  }
  // The peers: the other machines' leaders (every worker when G = 1).
  const size_t machines = static_cast<size_t>(plan.num_machines());
  const auto leader = [&](size_t machine) {
    return static_cast<size_t>(plan.leader_of_machine(static_cast<int>(machine)));
  };
  const size_t rank = static_cast<size_t>(plane_.self.rank);
  const size_t machine = static_cast<size_t>(plan.machine_of(plane_.self.rank));
  const uint32_t chunks = count_chunks(num_floats, plane_.plan.chunk_floats());
  std::shared_ptr<OpState> op;
  const float* own = nullptr;
  {
    std::lock_guard<std::mutex> lock(layer.mu);
    layer.ops.check_next(me, what, iteration);
    Slot& slot = slot_for(layer, iteration);
    if (!slot.used || slot.iteration != iteration) reset_slot(slot, iteration);
    // Our own factor is copied into our slot and sent from there, so the
    // caller may reuse `send` as soon as this returns.
    // Note [factor slots]: a step with more rows than reserved grows our buffer (this slot's
    // last sends, two iterations back, are done).
    if (slot.buffers[rank].size() < num_floats) slot.buffers[rank].resize(num_floats);
    if (num_floats > 0) std::memcpy(slot.buffers[rank].data(), send, num_floats * 4);
    slot.total[rank] = num_floats;
    slot.chunks_left[rank] = 0;
    own = slot.buffers[rank].data();
    // Pieces by machine: piece i is machine i's leader's factor.
    std::vector<std::string> sources(machines);
    for (size_t i = 0; i < machines; ++i) {
      sources[i] = i == machine ? me : plane_.workers[leader(i)]->remote().str();
    }
    op = std::make_shared<OpState>(what, layer_id, iteration, "factors of machine",
                                   std::move(sources), uint64_t{chunks} * (machines - 1),
                                   plane_.abort, me);
    for (size_t i = 0; i < machines; ++i) {
      if (rank_complete(slot, leader(i))) op->piece_done(i);
    }
    layer.ops.start(op, iteration);
  }
  plane_.coord->set_progress(iteration, layer_id);
  // Note [factor order]: peers in turn from rank+1 (mod P1), not from 0: frames of equal
  // priority leave in the order queued, and every worker sending to worker 0 first, then
  // 1, ... would aim all senders at the same links at once. (On 8 emulated 2 GbE nodes the
  // two orders measured the same, 1.21 s per VGG19-22K iteration: other limits dominate
  // there; the rotation is kept because it balances the links by construction.)
  for (size_t turn = 1; turn < machines; ++turn) {
    const size_t r = leader((machine + turn) % machines);
    for (uint32_t c = 0; c < chunks; ++c) {
      SendJob job;
      job.peer = plane_.workers[r];
      job.header.type = FrameType::kFactor;
      job.header.layer = layer_id;
      job.header.chunk = c;
      job.header.iteration = iteration;
      job.header.total_floats = num_floats;
      job.order = c;
      job.payload = own + plane_.plan.chunk_offset(c);
      job.bytes = plane_.plan.chunk_length(num_floats, c) * 4;
      report_send(job, op, layer.counters, job.bytes, plane_.abort, what, "the factor");
      plane_.queue->push(std::move(job));
    }
  }
  return Handle(op);
}

FactorView SFBroadcaster::factor(uint32_t layer_id, int64_t iteration, int rank) const {
  Layer* layer = layers_.find(layer_id);
  const std::string what = plane_.self.str() + ": factor of worker " + std::to_string(rank) +
                           " for layer " + std::to_string(layer_id) + " iteration " +
                           std::to_string(iteration);
  if (layer == nullptr) throw ConfigError(what + ": layer not registered");
  if (rank < 0 || rank >= plane_.plan.num_workers) throw ConfigError(what + ": no such rank");
  if (!plane_.plan.is_leader(rank)) {
    throw ConfigError(what + ": only machines' leaders send factors (" +
                      std::to_string(plane_.plan.workers_per_machine) + " workers per machine)");
  }
  std::lock_guard<std::mutex> lock(layer->mu);
  const Slot& slot = layer->slots[static_cast<uint64_t>(iteration) & 1u];
  if (!slot.used || slot.iteration != iteration) {
    throw ConfigError(what + ": not available (that slot holds iteration " +
                      (slot.used ? std::to_string(slot.iteration) : std::string("none")) + ")");
  }
  if (!rank_complete(slot, static_cast<size_t>(rank))) {
    throw ConfigError(what + ": has not arrived yet (wait for the allgather handle)");
  }
  const size_t r = static_cast<size_t>(rank);
  return FactorView{slot.buffers[r].data(), static_cast<size_t>(slot.total[r])};
}

void SFBroadcaster::on_factor(Peer& from, const FrameHeader& h) {
  const size_t j = static_cast<size_t>(from.remote().rank);
  const std::string what = "factor from " + from.remote().str() + " for layer " +
                           std::to_string(h.layer) + " chunk " + std::to_string(h.chunk) +
                           " iteration " + std::to_string(h.iteration);
  Layer* layer = layers_.wait(h.layer, what);
  if (layer == nullptr) return;  // aborted
  const Plan& plan = plane_.plan;
  if (!plan.is_leader(from.remote().rank)) {
    throw ProtocolError(what + ": that worker is not its machine's leader (" +
                        std::to_string(plan.workers_per_machine) + " workers per machine)");
  }
  float* dst = nullptr;
  size_t len = 0;
  Slot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(layer->mu);
    const int64_t current = layer->ops.last_iteration();
    if (layer->ops.started() && h.iteration != current && h.iteration != current + 1) {
      throw ProtocolError(what + ": iteration mismatch: this worker is at iteration " +
                          std::to_string(current));
    }
    slot = &slot_for(*layer, h.iteration);
    if (!slot->used || slot->iteration != h.iteration) {
      if ((slot->used && slot->iteration > h.iteration) || slot->inflight > 0) {
        throw ProtocolError(what + ": stale (that slot holds iteration " +
                            std::to_string(slot->iteration) + ")");
      }
      reset_slot(*slot, h.iteration);
    }
    if (slot->total[j] == kUnknown) {
      if (h.total_floats > layer->max_floats) {
        throw ProtocolError(what + ": factor of " + std::to_string(h.total_floats) +
                            " floats exceeds the maximum of " + std::to_string(layer->max_floats) +
                            " registered here");
      }
      slot->total[j] = h.total_floats;
      slot->chunks_left[j] = count_chunks(h.total_floats, plan.chunk_floats());
      // No chunk of worker j's factor is in flight yet: its buffer may grow (Note [factor
      // slots]); the others' buffers do not move.
      if (slot->buffers[j].size() < h.total_floats) slot->buffers[j].resize(h.total_floats);
    } else if (slot->total[j] != h.total_floats) {
      throw ProtocolError(what + ": announces " + std::to_string(h.total_floats) +
                          " floats, an earlier chunk announced " + std::to_string(slot->total[j]));
    }
    const uint32_t chunks = count_chunks(slot->total[j], plan.chunk_floats());
    if (h.chunk >= chunks) {
      throw ProtocolError(what + ": chunk out of range (" + std::to_string(chunks) + " chunks)");
    }
    len = plan.chunk_length(slot->total[j], h.chunk);
    if (h.payload_bytes != uint64_t{len} * 4) {
      throw ProtocolError(what + ": size mismatch: " + std::to_string(h.payload_bytes) +
                          " bytes, the chunk is " + std::to_string(len * 4));
    }
    if (slot->got[j][h.chunk]) throw ProtocolError(what + ": duplicate");
    slot->got[j][h.chunk] = 1;
    ++slot->inflight;
    dst = slot->buffers[j].data() + plan.chunk_offset(h.chunk);
  }
  try {
    from.read_payload(dst, len * 4);
  } catch (...) {
    std::lock_guard<std::mutex> lock(layer->mu);
    --slot->inflight;
    throw;
  }
  layer->counters->bytes_received += len * 4;
  std::lock_guard<std::mutex> lock(layer->mu);
  --slot->inflight;
  const std::shared_ptr<OpState>& op = layer->ops.op();
  if (--slot->chunks_left[j] == 0 && op && op->iteration() == h.iteration) {
    op->piece_done(static_cast<size_t>(plan.machine_of(static_cast<int>(j))));
  }
}

}  // namespace poseidon
