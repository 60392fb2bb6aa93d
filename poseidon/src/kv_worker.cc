#include "poseidon/internal/kv_worker.h"

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

}  // namespace

void KVWorker::register_layer(uint32_t layer_id, float* grad, size_t num_floats) {
  const Layer& layer = layers_.add(layer_id, [&](Layer& l, const std::string& who) {
    const LayerSpec& spec = l.plan->spec;
    if (num_floats != spec.num_floats) {
      throw ConfigError(who + ": buffer of " + std::to_string(num_floats) + " floats, but layer " +
                        spec.name + " was declared with " + std::to_string(spec.num_floats));
    }
    if (grad == nullptr && num_floats > 0) throw ConfigError(who + ": null buffer");
    l.data = grad;
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

Handle KVWorker::push_pull(uint32_t layer_id, int64_t iteration) {
  const auto [layer, what] =
      layers_.use("push_pull", layer_id, iteration, "layer not registered (register_layer)");
  plane_.check_abort(what, layer_id, iteration);
  const Plan& plan = plane_.plan;
  const LayerPlan& lp = *layer.plan;
  std::shared_ptr<OpState> op;
  {
    std::lock_guard<std::mutex> lock(layer.mu);
    layer.ops.check_next(plane_.self.str(), what, iteration);
    std::vector<std::string> sources(lp.num_chunks);
    for (uint32_t c = 0; c < lp.num_chunks; ++c) {
      sources[c] = plane_.servers[static_cast<size_t>(plan.shard_of(lp, c))]->remote().str();
    }
    op = std::make_shared<OpState>(what, layer_id, iteration, "chunks", std::move(sources),
                                   lp.num_chunks, plane_.abort, plane_.self.str());
    layer.ops.start(op, iteration);
  }
  plane_.coord->set_progress(iteration, layer_id);
  for (uint32_t c = 0; c < lp.num_chunks; ++c) {
    const size_t len = lp.chunk_length(c);
    const int shard = plan.shard_of(lp, c);
    const bool in_place = plane_.local_link && shard == plane_.local_shard;
    SendJob job;
    job.peer = plane_.servers[static_cast<size_t>(shard)];
    job.header.type = in_place ? FrameType::kPushInPlace : FrameType::kPush;
    job.header.layer = layer_id;
    job.header.chunk = c;
    job.header.iteration = iteration;
    job.order = push_order(lp, c, plan.num_servers, plane_.self.rank, in_place);
    job.payload = in_place ? nullptr : layer.data + lp.chunk_offset(c);
    job.bytes = in_place ? 0 : len * 4;
    // The counters count a chunk summed in place as sent and received too:
    // they measure what each exchange moves, wherever the shard runs.
    report_send(job, op, layer.counters, len * 4, plane_.abort, what, "chunk " + std::to_string(c));
    plane_.queue->push(std::move(job));
  }
  return Handle(op);
}

void KVWorker::on_reply(Peer& from, const FrameHeader& h) {
  const bool in_place = h.type == FrameType::kPullDone;
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
  {
    std::lock_guard<std::mutex> lock(layer->mu);
    op = layer->ops.op();
  }
  if (!op || op->iteration() != h.iteration || op->finished()) {
    throw ProtocolError(reply + ": no push of that iteration is pending (last push_pull: " +
                        (op ? "iteration " + std::to_string(op->iteration()) : "none") + ")");
  }
  if (h.chunk >= lp.num_chunks) {
    throw ProtocolError(reply + ": chunk out of range (" + std::to_string(lp.num_chunks) +
                        " chunks)");
  }
  if (plan.shard_of(lp, h.chunk) != from.remote().rank) {
    throw ProtocolError(reply + ": that chunk belongs to server " +
                        std::to_string(plan.shard_of(lp, h.chunk)));
  }
  const size_t len = lp.chunk_length(h.chunk);
  if (!in_place && h.payload_bytes != uint64_t{len} * 4) {
    throw ProtocolError(reply + ": size mismatch: " + std::to_string(h.payload_bytes) +
                        " bytes, the chunk is " + std::to_string(len * 4));
  }
  if (in_place != (plane_.local_link && plan.shard_of(lp, h.chunk) == plane_.local_shard)) {
    throw ProtocolError(reply + ": that chunk was " + (in_place ? "pushed" : "summed in place"));
  }
  if (op->is_piece_done(h.chunk)) throw ProtocolError(reply + ": duplicate");
  // Straight into the caller's range: our push of this chunk has been
  // written in full (the shard answers only after reading every push). In
  // place, the shard has written the sum there and is done with the range.
  if (!in_place) from.read_payload(layer->data + lp.chunk_offset(h.chunk), len * 4);
  layer->counters->bytes_received += len * 4;
  op->piece_done(h.chunk);
}

}  // namespace poseidon
