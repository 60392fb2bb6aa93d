#include "poseidon/kv_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "poseidon/internal/abort_signal.h"
#include "poseidon/internal/acceptor.h"
#include "poseidon/internal/bf16.h"
#include "poseidon/internal/chunk_round.h"
#include "poseidon/internal/colocated.h"
#include "poseidon/internal/coordinator_client.h"
#include "poseidon/internal/log.h"
#include "poseidon/internal/peer.h"
#include "poseidon/internal/send_queue.h"
#include "poseidon/plan.h"

namespace poseidon {

// What a KVServer is; the public calls forward here, one to one.
class KVServer::Impl {
 public:
  explicit Impl(const Config& config);
  ~Impl();

  std::string address() const { return address_; }
  std::string local_address() const { return local_address_; }
  void run();
  void abort(const std::string& reason);
  ServerStats stats() const;

 private:
  struct LayerSlots {
    const LayerPlan* plan = nullptr;
    std::vector<ChunkRound*> by_chunk;  // nullptr: owned by another shard
  };

  std::string admit(const NodeId& id);
  // `local`: the connection came through the in-process door.
  void on_peer(std::unique_ptr<Connection> conn, const NodeId& id, bool local);
  void on_push(const std::shared_ptr<Peer>& peer, const FrameHeader& h, std::vector<float>& bounce);
  void on_push_in_place(const std::shared_ptr<Peer>& peer, const FrameHeader& h);
  // The round a push of `h` belongs to; rejects a bad layer or chunk.
  ChunkRound* find_round(const FrameHeader& h, const std::string& push);
  // Enters `from`'s push into the round (opening the round if idle) after the
  // checks of Note [round rules]; false if the job aborted meanwhile.
  bool join_round(ChunkRound* slot, std::unique_lock<std::mutex>& lock, const FrameHeader& h,
                  const std::string& push, const NodeId& from, const Deadline& deadline);
  // After a push was summed: merges `sum` into an in-place range when due, and
  // once every push is in, starts the replies (returned, to be queued
  // outside the lock). Caller holds slot->mu.
  std::vector<SendJob> advance_locked(ChunkRound* slot);
  // The round's last reply is written: back to idle; appends PULL_DONE for
  // an in-place round. Caller holds slot->mu.
  void finish_round_locked(ChunkRound* slot, std::vector<SendJob>* out);
  void on_closed(Peer& peer, const std::string& reason, bool clean);
  void reject(const std::string& why);
  // Rejects a push from a worker that is not its machine's leader (plan.h).
  void check_leader(const NodeId& from, const std::string& push);
  void build_slots(const Plan& plan);
  bool wait_ready();
  void reply_done(ChunkRound* slot, const SendOutcome& outcome, const NodeId& to);
  std::string pending_summary() const;
  void on_abort(const Failure& f);
  void teardown(bool aborted);

  const Config config_;
  std::unique_ptr<Transport> transport_;
  NodeId self_;
  std::string address_;
  std::shared_ptr<AbortSignal> abort_;
  std::unique_ptr<SendQueue> queue_;
  std::unique_ptr<CoordinatorClient> coord_;
  std::unique_ptr<Acceptor> acceptor_;
  std::unique_ptr<Transport> local_transport_;
  std::string local_address_;
  std::unique_ptr<Acceptor> local_acceptor_;
  std::shared_ptr<ColocatedLink> link_;  // ranges lent by the worker of this process

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
  bool ran_ = false;
  bool torn_down_ = false;
  Plan plan_;
  std::vector<std::unique_ptr<ChunkRound>> slots_;
  std::map<uint32_t, LayerSlots> layers_;
  std::vector<std::shared_ptr<Peer>> peers_;
  std::map<int, Peer*> primary_;  // worker rank -> its first connection

  std::atomic<uint64_t> rounds_{0};
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> rounds_in_place_{0};
  std::atomic<uint64_t> sums_merged_{0};
  std::atomic<uint64_t> reader_waits_{0};
  std::atomic<uint64_t> reader_wait_ns_{0};
};
namespace {

// Non-first pushes are read and added in pieces of this many floats (256 KiB):
// small enough for the piece to stay in cache between the read and the add.
constexpr size_t kBounceFloats = size_t{64} << 10;

}  // namespace

KVServer::Impl::Impl(const Config& config) : config_(config) {
  config_.validate();
  if (config_.role != Role::kServer) throw ConfigError("KVServer needs role=server");
  transport_ = make_transport(config_.transport, TransportOptions{config_.socket_buffer_bytes,
                                                                  config_.notsent_lowat_bytes});
  std::unique_ptr<Listener> listener = transport_->listen(config_.listen);
  address_ = listener->address();
  self_ = NodeId{Role::kServer, config_.rank, address_};
  abort_ = std::make_shared<AbortSignal>();
  queue_ = std::make_unique<SendQueue>(config_.comm_threads, config_.timeout_ms);
  coord_ = std::make_unique<CoordinatorClient>(config_, *transport_, self_, abort_);
  abort_->subscribe([this](const Failure& f) { on_abort(f); });
  acceptor_ = std::make_unique<Acceptor>(
      std::move(listener), self_, config_.token, config_.handshake_timeout_ms,
      [this](const NodeId& id) { return admit(id); },
      [this](std::unique_ptr<Connection> conn, const NodeId& id) {
        on_peer(std::move(conn), id, false);
      },
      self_.str());
  // A second door for a worker of this process (Config::local_server).
  local_transport_ = make_inproc_transport();
  std::unique_ptr<Listener> local = local_transport_->listen("inproc://");
  local_address_ = local->address();
  link_ = ColocatedLink::open(local_address_);  // Note [in-place rounds]
  local_acceptor_ = std::make_unique<Acceptor>(
      std::move(local), self_, config_.token, config_.handshake_timeout_ms,
      [this](const NodeId& id) { return admit(id); },
      [this](std::unique_ptr<Connection> conn, const NodeId& id) {
        on_peer(std::move(conn), id, true);
      },
      self_.str());
}

KVServer::Impl::~Impl() {
  if (!torn_down_) teardown(abort_->tripped());
  link_->close();
}

ServerStats KVServer::Impl::stats() const {
  return ServerStats{rounds_.load(),       bytes_in_.load(),        bytes_out_.load(),
                     rejected_.load(),     rounds_in_place_.load(), sums_merged_.load(),
                     reader_waits_.load(), reader_wait_ns_.load()};
}

void KVServer::Impl::abort(const std::string& reason) {
  abort_->trip(Failure{self_.str(), reason});
}

std::string KVServer::Impl::admit(const NodeId& id) {
  if (id.role != Role::kWorker) {
    return std::string("a ") + role_name(id.role) + " cannot connect to a server shard";
  }
  if (id.rank < 0 || id.rank >= config_.num_workers) {
    return "worker rank " + std::to_string(id.rank) + " out of range (" +
           std::to_string(config_.num_workers) + " workers)";
  }
  return "";
}

void KVServer::Impl::on_peer(std::unique_ptr<Connection> conn, const NodeId& id, bool local) {
  auto peer = std::make_shared<Peer>(std::move(conn), self_, id,
                                     Peer::Options{config_.max_frame_bytes, config_.timeout_ms});
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (abort_->tripped()) return;
    // Note [extra connections]: a worker's first connection is its link; a
    // further one that proved the token is served too, but only the first
    // one's loss counts as that worker's death.
    peer->primary = primary_.emplace(id.rank, peer.get()).second;
    peers_.push_back(peer);
  }
  if (config_.verbose) log_line(self_.str(), "connected to " + id.str());
  std::weak_ptr<Peer> weak = peer;
  auto bounce = std::make_shared<std::vector<float>>();
  peer->start(
      [this, weak, bounce, local](Peer&, const FrameHeader& h) {
        std::shared_ptr<Peer> self_peer = weak.lock();
        if (!self_peer) return;
        if (h.type == FrameType::kAbort) {
          // A worker that aborted tells us why before it closes.
          const std::vector<uint8_t> body = self_peer->read_body();
          abort_->trip(decode_failure(body.data(), body.size()));
          return;
        }
        if (h.type == FrameType::kPushInPlace) {
          if (!local) {
            reject("PUSH_IN_PLACE from " + self_peer->remote().str() +
                   " outside the shard's in-process door (Config::local_server)");
          }
          on_push_in_place(self_peer, h);
          return;
        }
        if (h.type != FrameType::kPush && h.type != FrameType::kPush16) {
          reject("unexpected " + frame_type_name(static_cast<uint16_t>(h.type)) +
                 " at a server shard");
        }
        on_push(self_peer, h, *bounce);
      },
      [this](Peer& p, const std::string& r, bool c) { on_closed(p, r, c); });
}

void KVServer::Impl::check_leader(const NodeId& from, const std::string& push) {
  if (plan_.is_leader(from.rank)) return;  // plan_ is immutable once ready_
  reject(push + ": worker " + std::to_string(from.rank) + " is not its machine's leader (" +
         std::to_string(plan_.workers_per_machine) + " workers per machine: machine " +
         std::to_string(plan_.machine_of(from.rank)) + " pushes through worker " +
         std::to_string(plan_.leader_of_machine(plan_.machine_of(from.rank))) + ")");
}

void KVServer::Impl::reject(const std::string& why) {
  ++rejected_;
  throw ProtocolError(self_.str() + " rejected the frame: " + why);
}

bool KVServer::Impl::wait_ready() {
  std::unique_lock<std::mutex> lock(mu_);
  const Deadline deadline = Deadline::after_ms(config_.timeout_ms);
  cv_.wait_until(lock, deadline.time_point(), [&] { return ready_ || abort_->tripped(); });
  if (ready_) return true;
  if (!abort_->tripped()) {
    throw TimeoutError(self_.str() + ": a push arrived but the plan did not come within " +
                       std::to_string(config_.timeout_ms) + " ms");
  }
  return false;
}

void KVServer::Impl::build_slots(const Plan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = plan;
  for (const LayerPlan& lp : plan_.layers) {
    LayerSlots ls;
    ls.plan = &lp;
    if (through_shards(lp.scheme)) {
      ls.by_chunk.assign(lp.num_chunks, nullptr);
      for (uint32_t c = 0; c < lp.num_chunks; ++c) {
        if (plan_.shard_of(lp, c) != config_.rank) continue;
        auto slot = std::make_unique<ChunkRound>();
        slot->layer = &lp;
        slot->chunk = c;
        slot->floats = lp.chunk_length(c);
        slot->bf16 = lp.scheme == Scheme::kBF16;
        slot->sum.assign(slot->floats, 0.0f);  // allocated once, reused every round
        if (slot->bf16) slot->sum16.assign(slot->floats, 0);
        slot->pushed.assign(static_cast<size_t>(plan_.num_workers), 0);
        slot->reply_to.resize(static_cast<size_t>(plan_.num_workers));
        ls.by_chunk[c] = slot.get();
        slots_.push_back(std::move(slot));
      }
    }
    layers_[lp.spec.layer_id] = std::move(ls);
  }
  ready_ = true;
  cv_.notify_all();
}

ChunkRound* KVServer::Impl::find_round(const FrameHeader& h, const std::string& push) {
  auto lit = layers_.find(h.layer);  // layers_ is immutable once ready_
  if (lit == layers_.end())
    reject(push + ": layer " + std::to_string(h.layer) + " is not in the plan");
  const LayerSlots& ls = lit->second;
  if (!through_shards(ls.plan->scheme))
    reject(push + ": layer " + ls.plan->spec.name + " is synchronised by SFB, not by the servers");
  if (h.chunk >= ls.plan->num_chunks) {
    reject(push + ": chunk out of range (layer " + ls.plan->spec.name + " has " +
           std::to_string(ls.plan->num_chunks) + " chunks)");
  }
  ChunkRound* slot = ls.by_chunk[h.chunk];
  if (slot == nullptr) {
    reject(push + ": that chunk belongs to server " +
           std::to_string(plan_.shard_of(*ls.plan, h.chunk)) + ", not server " +
           std::to_string(config_.rank));
  }
  return slot;
}

bool KVServer::Impl::join_round(ChunkRound* slot, std::unique_lock<std::mutex>& lock,
                                const FrameHeader& h, const std::string& push, const NodeId& from,
                                const Deadline& deadline) {
  // The next round's first push may arrive while this round's sums are
  // still being written (from the buffer it would be read into): wait.
  // The wait is counted (ServerStats.reader_waits): this reader reads
  // nothing meanwhile, so the sender's later frames on its connection stall.
  const auto behind_sums = [&] {
    return slot->phase == ChunkRound::Phase::kSending && h.iteration == slot->round_iteration + 1;
  };
  if (behind_sums()) {
    const auto since = std::chrono::steady_clock::now();
    slot->cv.wait_until(lock, deadline.time_point(),
                        [&] { return abort_->tripped() || !behind_sums(); });
    reader_waits_ += 1;
    reader_wait_ns_ += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - since)
                                                 .count());
  }
  if (abort_->tripped()) return false;
  if (slot->phase == ChunkRound::Phase::kSending) {
    if (h.iteration == slot->round_iteration + 1) {
      throw TimeoutError(self_.str() + ": " + push + " waited " +
                         std::to_string(config_.timeout_ms) + " ms for the sums of iteration " +
                         std::to_string(slot->round_iteration) + " to be sent");
    }
    reject(push + ": iteration mismatch: the round of iteration " +
           std::to_string(slot->round_iteration) + " is being answered");
  }
  if (slot->phase == ChunkRound::Phase::kAccumulating && h.iteration != slot->round_iteration) {
    reject(push + ": iteration mismatch: the round in progress is iteration " +
           std::to_string(slot->round_iteration));
  }
  if (slot->phase == ChunkRound::Phase::kIdle) {
    if (slot->last_completed != ChunkRound::kNoIteration &&
        h.iteration != slot->last_completed + 1) {
      reject(push + ": iteration mismatch: expected iteration " +
             std::to_string(slot->last_completed + 1) + " (iteration " +
             std::to_string(slot->last_completed) + " was the last completed)");
    }
    slot->phase = ChunkRound::Phase::kAccumulating;
    slot->round_iteration = h.iteration;
    coord_->set_progress(h.iteration, h.layer);  // for our heartbeats
    std::fill(slot->pushed.begin(), slot->pushed.end(), 0);
    slot->arrived = 0;
    slot->in_place_rank = -1;
    slot->in_place = nullptr;
    slot->into_sum = 0;
    slot->sum_busy = 0;
    slot->merged = false;
  }
  const size_t rank = static_cast<size_t>(from.rank);
  if (slot->pushed[rank]) reject(push + ": duplicate push from " + from.str() + " in this round");
  slot->pushed[rank] = 1;
  return true;
}

void KVServer::Impl::on_push(const std::shared_ptr<Peer>& peer, const FrameHeader& h,
                             std::vector<float>& bounce) {
  if (!wait_ready()) return;  // aborted: teardown closes this connection
  const NodeId& from = peer->remote();
  const std::string push = "push from " + from.str() + " for layer " + std::to_string(h.layer) +
                           " chunk " + std::to_string(h.chunk) + " iteration " +
                           std::to_string(h.iteration);
  ChunkRound* slot = find_round(h, push);
  check_leader(from, push);
  if (is_bf16_frame(h.type) != slot->bf16) {
    reject(push + ": layer " + slot->layer->spec.name + " is synchronised by " +
           scheme_name(slot->layer->scheme) + ": want " + (slot->bf16 ? "PUSH16" : "PUSH") +
           ", got " + frame_type_name(static_cast<uint16_t>(h.type)));
  }
  const size_t unit = slot->bf16 ? 2 : 4;  // bytes per float on the wire
  const uint64_t want = uint64_t{slot->floats} * unit;
  if (h.payload_bytes != want) {
    reject(push + ": size mismatch: " + std::to_string(h.payload_bytes) + " bytes, the chunk is " +
           std::to_string(want) + " bytes (" + std::to_string(slot->floats) + " floats" +
           (slot->bf16 ? " as bf16)" : ")"));
  }
  const Deadline deadline = Deadline::after_ms(config_.timeout_ms);
  // Where the bytes are added (Note [no extra copies]): into `sum`, or into
  // the colocated worker's range (Note [in-place rounds]).
  bool into_range = false;
  float* dst = nullptr;
  int lender = -1;
  {
    std::unique_lock<std::mutex> lock(slot->mu);
    if (!join_round(slot, lock, h, push, from, deadline)) return;
    slot->reply_to[static_cast<size_t>(from.rank)] = peer;
    if (slot->in_place_rank >= 0) {
      into_range = true;
      dst = slot->in_place;
      lender = slot->in_place_rank;
    } else {
      // Zeroed under the lock before any push adds into it.
      if (slot->into_sum++ == 0) std::fill(slot->sum.begin(), slot->sum.end(), 0.0f);
      ++slot->sum_busy;
      dst = slot->sum.data();
    }
  }
  const size_t bytes = slot->floats * unit;
  // Piece by piece through a bounce buffer that stays in cache (TCP), or
  // straight from the writer's memory (in-process): the push never makes a
  // round trip through a chunk-sized scratch buffer in DRAM.
  if (bounce.size() < kBounceFloats) bounce.resize(kBounceFloats);
  size_t at = 0;  // floats added so far
  peer->read_payload_pieces(
      bytes, reinterpret_cast<uint8_t*>(bounce.data()), kBounceFloats * 4,
      [&](const uint8_t* data, size_t size) {
        const size_t n = size / unit;
        const auto add = slot->bf16 ? add_bf16 : add_floats;  // BF16: summed in fp32
        std::lock_guard<std::mutex> lock(slot->mu);           // adders of a chunk take turns
        if (!into_range) {
          add(dst + at, data, n);
        } else if (ScopedUse use(*link_, lender); use) {
          add(dst + at, data, n);  // else revoked: the job is ending
        }
        at += n;
      });
  bytes_in_ += bytes;
  std::vector<SendJob> replies;
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (!into_range) --slot->sum_busy;
    ++slot->arrived;
    replies = advance_locked(slot);
  }
  for (SendJob& job : replies) queue_->push(std::move(job));
}

void KVServer::Impl::on_push_in_place(const std::shared_ptr<Peer>& peer, const FrameHeader& h) {
  if (!wait_ready()) return;
  const NodeId& from = peer->remote();
  const std::string push = "in-place push from " + from.str() + " for layer " +
                           std::to_string(h.layer) + " chunk " + std::to_string(h.chunk) +
                           " iteration " + std::to_string(h.iteration);
  ChunkRound* slot = find_round(h, push);
  check_leader(from, push);
  const LayerPlan& lp = *slot->layer;
  const ColocatedLink::Range range = link_->range(from.rank, h.layer);
  if (!range.lent) reject(push + ": that worker has not lent this layer's range");
  if (range.num_floats != lp.wire_floats) {
    reject(push + ": the range lent holds " + std::to_string(range.num_floats) +
           " floats, the layer takes " + std::to_string(lp.wire_floats));
  }
  const Deadline deadline = Deadline::after_ms(config_.timeout_ms);
  std::vector<SendJob> replies;
  {
    std::unique_lock<std::mutex> lock(slot->mu);
    if (!join_round(slot, lock, h, push, from, deadline)) return;
    slot->reply_to[static_cast<size_t>(from.rank)] = peer;  // for PULL_DONE
    slot->in_place_rank = from.rank;
    slot->in_place = range.data + lp.chunk_offset(h.chunk);
    ++slot->arrived;
    replies = advance_locked(slot);
  }
  for (SendJob& job : replies) queue_->push(std::move(job));
}

std::vector<SendJob> KVServer::Impl::advance_locked(ChunkRound* slot) {
  std::vector<SendJob> out;
  const int lender = slot->in_place_rank;
  if (lender >= 0 && slot->into_sum > 0 && slot->sum_busy == 0 && !slot->merged) {
    // The pushes that went to `sum` before the range came are all read.
    if (ScopedUse use(*link_, lender); use) {
      add_floats(slot->in_place, reinterpret_cast<const uint8_t*>(slot->sum.data()), slot->floats);
    }
    slot->merged = true;
    ++sums_merged_;
  }
  if (slot->arrived < plan_.num_machines()) return out;  // one push per machine
  slot->phase = ChunkRound::Phase::kSending;
  const float* total = lender >= 0 ? slot->in_place : slot->sum.data();
  // BF16: the replies carry bf16 of the fp32 total, from sum16 (the shard's
  // own memory). In place, the total in the colocated worker's range is
  // rounded to the same values, so every worker ends with the same bits
  // (Note [in-place rounds]).
  if (slot->bf16 && lender < 0) floats_to_bf16(total, slot->sum16.data(), slot->floats);
  if (slot->bf16 && lender >= 0) {
    ScopedUse use(*link_, lender);
    if (!use) {  // revoked: the job is ending; the abort reports the round
      slot->sends_left = 0;
      return out;
    }
    round_bf16_in_place(slot->in_place, slot->sum16.data(), slot->floats);
  }
  const bool from_range = lender >= 0 && !slot->bf16;
  // Note [reply order]: shard s answers workers s+1, s+2, ... (mod P1), not 0, 1, ...:
  // every shard finishes a turn's sums at about the same time (the pushes are rotated
  // too: internal/kv_worker.h, Note [push order]), and replies in one order would all head for
  // worker 0's link first while others idle. Ties in the send queue keep this order.
  // With several workers per machine the turns go over the machines' leaders.
  const size_t machines = static_cast<size_t>(plan_.num_machines());
  for (size_t turn = 0; turn < machines; ++turn) {
    const size_t machine = (static_cast<size_t>(config_.rank) + 1 + turn) % machines;
    const size_t r = static_cast<size_t>(plan_.leader_of_machine(static_cast<int>(machine)));
    if (static_cast<int>(r) == lender) continue;  // it holds the total already
    // Each reply written from the range is a use of it, ended when written.
    if (from_range && !link_->begin_use(lender)) {
      // Revoked: the colocated worker is failing or gone, and the job with it.
      for (size_t i = 0; i < out.size(); ++i) link_->end_use(lender);
      out.clear();
      slot->sends_left = 0;
      return out;  // the round stays unanswered; the abort reports it
    }
    SendJob job;
    job.peer = slot->reply_to[r];
    job.header.type = slot->bf16 ? FrameType::kPullReply16 : FrameType::kPullReply;
    job.header.layer = slot->layer->spec.layer_id;
    job.header.chunk = slot->chunk;
    job.header.iteration = slot->round_iteration;
    job.order = slot->chunk;
    job.payload =
        slot->bf16 ? static_cast<const void*>(slot->sum16.data()) : static_cast<const void*>(total);
    job.bytes = slot->floats * (slot->bf16 ? 2 : 4);
    const NodeId to = job.peer->remote();
    const int used = from_range ? lender : -1;
    job.done = [this, slot, to, used](const SendOutcome& outcome) {
      if (used >= 0) link_->end_use(used);
      reply_done(slot, outcome, to);
    };
    out.push_back(std::move(job));
  }
  slot->sends_left = static_cast<int>(out.size());
  if (out.empty()) finish_round_locked(slot, &out);  // one worker, in place: nothing to send
  return out;
}

void KVServer::Impl::finish_round_locked(ChunkRound* slot, std::vector<SendJob>* out) {
  slot->last_completed = slot->round_iteration;
  slot->phase = ChunkRound::Phase::kIdle;
  ++rounds_;
  if (slot->in_place_rank >= 0) {
    ++rounds_in_place_;
    SendJob job;
    job.peer = slot->reply_to[static_cast<size_t>(slot->in_place_rank)];
    job.header.type = FrameType::kPullDone;
    job.header.layer = slot->layer->spec.layer_id;
    job.header.chunk = slot->chunk;
    job.header.iteration = slot->round_iteration;
    job.order = slot->chunk;
    const NodeId to = job.peer->remote();
    const std::string what = slot->key() + " iteration " + std::to_string(slot->round_iteration);
    job.done = [this, to, what](const SendOutcome& outcome) {
      // A lost connection is reported by its reader (see SendOutcome).
      if (!outcome.ok() && !outcome.connection_lost) {
        abort_->trip(Failure{to.str(), self_.str() + " could not tell " + to.str() + " that " +
                                           what + " is summed in place: " + outcome.error});
      }
    };
    out->push_back(std::move(job));
  }
  std::fill(slot->reply_to.begin(), slot->reply_to.end(), nullptr);
  slot->cv.notify_all();
}

void KVServer::Impl::reply_done(ChunkRound* slot, const SendOutcome& out, const NodeId& to) {
  if (!out.ok() && !out.connection_lost) {
    abort_->trip(Failure{to.str(), self_.str() + " could not send the sum of " + slot->key() +
                                       " iteration " + std::to_string(slot->round_iteration) +
                                       " to " + to.str() + ": " + out.error});
    return;
  }
  // A lost connection is reported by its reader (see SendOutcome). The round
  // still counts the send as done: that reader may itself be parked waiting
  // for this round to finish sending, and must get back to its connection to
  // see it is gone.
  if (out.ok()) bytes_out_ += slot->floats * (slot->bf16 ? 2 : 4);
  std::vector<SendJob> done;
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (--slot->sends_left > 0) return;
    finish_round_locked(slot, &done);
  }
  for (SendJob& job : done) queue_->push(std::move(job));  // PULL_DONE
}

std::string KVServer::Impl::pending_summary() const {
  std::lock_guard<std::mutex> outer(mu_);
  std::string out;
  int shown = 0;
  for (const auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->phase == ChunkRound::Phase::kIdle) continue;
    if (++shown > 4) {
      out += "; ...";
      break;
    }
    out += (out.empty() ? "" : "; ") + slot->describe_locked();
  }
  if (!out.empty()) return "rounds in progress: " + out;
  const Progress p = coord_->progress();
  if (p.iteration < 0) return "no round started at this shard";
  return "no round in progress at this shard (its last: layer " + std::to_string(p.layer) +
         ", iteration " + std::to_string(p.iteration) + ")";
}

void KVServer::Impl::on_closed(Peer& peer, const std::string& reason, bool clean) {
  if (coord_->shutdown_received() || abort_->tripped()) return;
  if (!clean)
    log_line(self_.str(), "dropped connection from " + peer.remote().str() + " [" +
                              peer.remote_address() + "]: " + reason);
  if (peer.primary && !clean) {
    const std::string name = peer.remote().str();
    const std::string prefix = name + ": ";
    const std::string what = reason.rfind(prefix, 0) == 0 ? reason.substr(prefix.size()) : reason;
    abort_->trip(Failure{
        name, name + " is gone (seen by " + self_.str() + "): " + what + "; " + pending_summary()});
  }
}

void KVServer::Impl::on_abort(const Failure& f) {
  queue_->cancel_all("aborted: " + f.reason);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  for (const auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->cv.notify_all();
  }
}

void KVServer::Impl::run() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ran_) throw ConfigError("KVServer::Impl::run called twice");
    ran_ = true;
  }
  acceptor_->start();
  local_acceptor_->start();
  try {
    // The coordinator gives up on the rendezvous after timeout_ms and says
    // who never came; wait a little longer so we hear that reason.
    coord_->connect(Deadline::after_ms(config_.timeout_ms + config_.heartbeat_timeout_ms));
    // No deadline of our own: workers may take long to build their nets, and
    // their plan() calls time out (aborting everyone) if one never declares.
    // Liveness meanwhile is the heartbeats' job.
    if (std::optional<Plan> plan = coord_->wait_plan_or_shutdown(Deadline::never())) {
      build_slots(*plan);
    }
    if (config_.verbose)
      log_line(self_.str(), "serving " + std::to_string(slots_.size()) + " chunks");
  } catch (const TimeoutError& e) {
    abort_->trip(Failure{self_.str(), e.what()});
  } catch (const PeerFailure&) {
    // abort_ already tripped: reported below
  } catch (const std::exception& e) {
    abort_->trip(Failure{self_.str(), self_.str() + ": " + e.what()});
  }
  coord_->wait_shutdown(Deadline::never());
  const bool aborted = abort_->tripped();
  const std::string pending = pending_summary();
  teardown(aborted);
  if (aborted) {
    const Failure f = abort_->failure();
    throw PeerFailure(self_.str() + ": job aborted: " + f.reason + " [" + pending + "]", f.peer, -1,
                      -1);
  }
}

void KVServer::Impl::teardown(bool aborted) {
  torn_down_ = true;
  acceptor_->stop();
  local_acceptor_->stop();
  std::vector<std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers = peers_;
  }
  const Failure f = abort_->failure();
  for (const auto& p : peers) {
    if (aborted) {
      p->try_send_message(FrameType::kAbort, encode_failure(f), kTeardownSendMs);
    } else {
      p->close_gracefully(kTeardownSendMs);
    }
  }
  const Deadline deadline = Deadline::after_ms(kTeardownWaitMs);
  for (const auto& p : peers) p->wait_stopped(deadline);
  for (const auto& p : peers) p->shutdown();
  queue_->stop();
  coord_->close();
  abort_->seal(Failure{self_.str(), "server stopped"});
}

KVServer::KVServer(const Config& config) : impl_(std::make_unique<Impl>(config)) {}
KVServer::~KVServer() = default;
std::string KVServer::address() const { return impl_->address(); }
std::string KVServer::local_address() const { return impl_->local_address(); }
void KVServer::run() { impl_->run(); }
void KVServer::abort(const std::string& reason) { impl_->abort(reason); }
ServerStats KVServer::stats() const { return impl_->stats(); }

}  // namespace poseidon
