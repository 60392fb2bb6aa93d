#include "poseidon/internal/kv_worker.h"

#include "poseidon/internal/bf16.h"

namespace poseidon {
namespace {

// Note [push order]: the place of chunk `c` among the layer's frames.
uint64_t push_order(const LayerPlan& lp, uint32_t c, int num_servers, int rank, bool in_place) {
  if (in_place) return c;
  const uint64_t p2 = static_cast<uint64_t>(num_servers);
  const uint64_t g = lp.first_chunk + c;  // global chunk index: shard g mod P2
  const uint64_t turn = (g % p2 + p2 - static_cast<uint64_t>(rank) % p2) % p2;
  return lp.num_chunks + (g / p2) * p2 + turn;
}

// Bytes one float takes on the wire under `scheme`.
size_t wire_bytes_per_float(Scheme scheme) { return scheme == Scheme::kBF16 ? 2 : 4; }

}  // namespace

void KVWorker::register_layer(uint32_t layer_id, float* grad, size_t num_floats) {
  const Layer& layer = layers_.add(layer_id, [&](Layer& l, const std::string& who) {
    const LayerPlan& lp = *l.plan;
    const LayerSpec& spec = lp.spec;
    if (num_floats != lp.wire_floats) {
      if (lp.scheme == Scheme::kPowerSGD) {
        throw ConfigError(who + ": buffer of " + std::to_string(num_floats) +
                          " floats, but layer " + spec.name + " (PowerSGD, rank " +
                          std::to_string(lp.rank) + ") takes " + std::to_string(lp.wire_floats) +
                          ": [P (" + std::to_string(lp.rank) + "x" + std::to_string(spec.m) +
                          ") | rest (" + std::to_string(spec.num_floats - spec.m * spec.n) +
                          ")] then [Q (" + std::to_string(lp.rank) + "x" + std::to_string(spec.n) +
                          ")]");
      }
      throw ConfigError(who + ": buffer of " + std::to_string(num_floats) + " floats, but layer " +
                        spec.name + " was declared with " + std::to_string(spec.num_floats));
    }
    if (grad == nullptr && num_floats > 0) throw ConfigError(who + ": null buffer");
    l.data = grad;
    if (lp.scheme == Scheme::kBF16) l.wire16.assign(num_floats, 0);  // allocated once
  });
  const LayerPlan& lp = *layer.plan;
  // Lent before its first push_pull can announce a chunk in place.
  for (uint32_t c = 0; plane_.local_link && c < lp.num_chunks; ++c) {
    if (plane_.plan.shard_of(lp, c) == plane_.local_shard) {
      plane_.local_link->lend(plane_.self.rank, layer_id, grad, num_floats);
      break;
    }
  }
}

Handle KVWorker::push_pull(uint32_t layer_id, int64_t iteration, uint32_t part) {
  auto use = layers_.use("push_pull", layer_id, iteration, "layer not registered (register_layer)");
  Layer& layer = use.layer;
  const LayerPlan& lp = *layer.plan;
  // A layer of one part keeps the words it had before parts existed.
  const std::string what =
      use.what + (lp.parts.size() > 1 || part != 0 ? " part " + std::to_string(part) : "");
  plane_.check_abort(what, layer_id, iteration);
  const Plan& plan = plane_.plan;
  if (!plan.is_leader(plane_.self.rank)) {
    const int machine = plan.machine_of(plane_.self.rank);
    throw ConfigError(plane_.self.str() + ": " + what + ": with " +
                      std::to_string(plan.workers_per_machine) +
                      " workers per machine only each machine's leader pushes to the shards; "
                      "machine " +
                      std::to_string(machine) + "'s is worker " +
                      std::to_string(plan.leader_of_machine(machine)) +
                      " (cost_model.h, Note [local aggregation])");
  }
  std::shared_ptr<OpState> op;
  {
    std::lock_guard<std::mutex> lock(layer.mu);
    layer.ops.check_next(plane_.self.str(), what, iteration, part,
                         static_cast<uint32_t>(lp.parts.size()));
    const PlanPart& pp = lp.parts[part];
    std::vector<std::string> sources(pp.num_chunks);
    for (uint32_t i = 0; i < pp.num_chunks; ++i) {
      const int shard = plan.shard_of(lp, pp.first_chunk + i);
      sources[i] = plane_.servers[static_cast<size_t>(shard)]->remote().str();
    }
    op = std::make_shared<OpState>(what, layer_id, iteration, "chunks", std::move(sources),
                                   pp.num_chunks, plane_.abort, plane_.self.str());
    layer.ops.start(op, iteration, part);
    layer.part = part;
  }
  plane_.coord->set_progress(iteration, layer_id);
  const PlanPart& pp = lp.parts[part];
  const bool bf16 = lp.scheme == Scheme::kBF16;
  const size_t unit = wire_bytes_per_float(lp.scheme);
  for (uint32_t c = pp.first_chunk; c < pp.first_chunk + pp.num_chunks; ++c) {
    const size_t offset = lp.chunk_offset(c);
    const size_t len = lp.chunk_length(c);
    const int shard = plan.shard_of(lp, c);
    const bool in_place = plane_.local_link && shard == plane_.local_shard;
    if (bf16) {
      // Before the chunk is queued: in place, our own share enters the sum at
      // bf16 precision like everyone else's (kv_server.h, Note [in-place rounds]).
      if (in_place) {
        round_bf16_in_place(layer.data + offset, nullptr, len);
      } else {
        floats_to_bf16(layer.data + offset, layer.wire16.data() + offset, len);
      }
    }
    SendJob job;
    job.peer = plane_.servers[static_cast<size_t>(shard)];
    job.header.type = in_place ? FrameType::kPushInPlace
                      : bf16   ? FrameType::kPush16
                               : FrameType::kPush;
    job.header.layer = layer_id;
    job.header.chunk = c;
    job.header.iteration = iteration;
    job.order = push_order(lp, c, plan.num_servers, plane_.self.rank, in_place);
    if (!in_place) {
      job.payload = bf16 ? static_cast<const void*>(layer.wire16.data() + offset)
                         : static_cast<const void*>(layer.data + offset);
      job.bytes = len * unit;
    }
    // The counters count a chunk summed in place as sent and received too:
    // they measure what each exchange moves, wherever the shard runs.
    report_send(job, op, layer.counters, len * unit, plane_.abort, what,
                "chunk " + std::to_string(c));
    plane_.queue->push(std::move(job));
  }
  return Handle(op);
}

void KVWorker::on_reply(Peer& from, const FrameHeader& h) {
  const bool in_place = h.type == FrameType::kPullDone;
  const bool bf16_frame = h.type == FrameType::kPullReply16;
  const std::string reply = std::string(in_place ? "in-place sum notice" : "sum") + " from " +
                            from.remote().str() + " for layer " + std::to_string(h.layer) +
                            " chunk " + std::to_string(h.chunk) + " iteration " +
                            std::to_string(h.iteration);
  if (in_place && (!plane_.local_link || from.remote().rank != plane_.local_shard)) {
    throw ProtocolError(reply + ": only the shard in this worker's process sums in place");
  }
  Layer* layer = layers_.find(h.layer);
  if (layer == nullptr) throw ProtocolError(reply + ": layer not registered here");
  const Plan& plan = plane_.plan;
  const LayerPlan& lp = *layer->plan;
  std::shared_ptr<OpState> op;
  uint32_t part = 0;
  {
    std::lock_guard<std::mutex> lock(layer->mu);
    op = layer->ops.op();
    part = layer->part;
  }
  if (!op || op->iteration() != h.iteration || op->finished()) {
    throw ProtocolError(reply + ": no push of that iteration is pending (last push_pull: " +
                        (op ? "iteration " + std::to_string(op->iteration()) : "none") + ")");
  }
  if (h.chunk >= lp.num_chunks) {
    throw ProtocolError(reply + ": chunk out of range (" + std::to_string(lp.num_chunks) +
                        " chunks)");
  }
  const int chunk_part = lp.part_of(h.chunk);
  if (chunk_part != static_cast<int>(part)) {
    throw ProtocolError(reply + ": that chunk is of part " + std::to_string(chunk_part) +
                        ", the push_pull pending is of part " + std::to_string(part));
  }
  if (plan.shard_of(lp, h.chunk) != from.remote().rank) {
    throw ProtocolError(reply + ": that chunk belongs to server " +
                        std::to_string(plan.shard_of(lp, h.chunk)));
  }
  const bool bf16 = lp.scheme == Scheme::kBF16;
  if (!in_place && bf16_frame != bf16) {
    throw ProtocolError(reply + ": layer " + lp.spec.name + " is synchronised by " +
                        scheme_name(lp.scheme) + ", its sums come as " +
                        (bf16 ? "PULL_REPLY16" : "PULL_REPLY") + ", not " +
                        frame_type_name(static_cast<uint16_t>(h.type)));
  }
  const size_t unit = wire_bytes_per_float(lp.scheme);
  const size_t offset = lp.chunk_offset(h.chunk);
  const size_t len = lp.chunk_length(h.chunk);
  if (!in_place && h.payload_bytes != uint64_t{len} * unit) {
    throw ProtocolError(reply + ": size mismatch: " + std::to_string(h.payload_bytes) +
                        " bytes, the chunk is " + std::to_string(len * unit));
  }
  if (in_place != (plane_.local_link && plan.shard_of(lp, h.chunk) == plane_.local_shard)) {
    throw ProtocolError(reply + ": that chunk was " + (in_place ? "pushed" : "summed in place"));
  }
  const size_t piece = h.chunk - lp.parts[part].first_chunk;
  if (op->is_piece_done(piece)) throw ProtocolError(reply + ": duplicate");
  // Straight into the caller's range (BF16: into the staging copy, then
  // widened): our push of this chunk has been written in full (the shard
  // answers only after reading every push). In place, the shard has written
  // the sum there and is done with the range.
  if (!in_place && bf16) {
    uint16_t* wire = layer->wire16.data() + offset;
    from.read_payload(wire, len * 2);
    bf16_to_floats(wire, layer->data + offset, len);
  } else if (!in_place) {
    from.read_payload(layer->data + offset, len * 4);
  }
  layer->counters->bytes_received += len * unit;
  op->piece_done(piece);
}

}  // namespace poseidon
