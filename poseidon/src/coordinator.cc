#include "poseidon/coordinator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "poseidon/internal/acceptor.h"
#include "poseidon/internal/action_rounds.h"
#include "poseidon/internal/deadline.h"
#include "poseidon/internal/log.h"
#include "poseidon/internal/messages.h"
#include "poseidon/internal/peer.h"
#include "poseidon/internal/transport.h"

namespace poseidon {

// What a Coordinator is; the public calls forward here, one to one.
class Coordinator::Impl {
 public:
  explicit Impl(const Config& config);
  ~Impl();

  std::string address() const { return address_; }
  void run();
  void abort(const std::string& reason);
  std::optional<Plan> plan() const;

 private:
  struct Member {
    NodeId id;
    std::shared_ptr<Peer> peer;
    int64_t last_seen_ms = 0;
    Progress progress;
    bool has_specs = false;
    std::vector<LayerSpec> specs;
    uint64_t barriers_entered = 0;
    bool shutdown_requested = false;
  };
  using Key = std::pair<Role, int>;
  enum class Phase { kRendezvous, kRunning, kShutdown, kAborted };

  std::string admit(const NodeId& id);
  void on_peer(std::unique_ptr<Connection> conn, const NodeId& id);
  void on_frame(Peer& peer, const FrameHeader& header);
  void on_closed(Peer& peer, const std::string& reason, bool clean);
  void fail_locked(const std::string& peer, const std::string& reason);
  void on_plan_request_locked(Member& m, std::vector<LayerSpec> specs,
                              std::vector<std::shared_ptr<Peer>>* to, std::vector<uint8_t>* msg);
  std::string describe_progress(const Progress& p) const;
  std::vector<std::shared_ptr<Peer>> all_peers_locked() const;
  void broadcast(const std::vector<std::shared_ptr<Peer>>& peers, FrameType type,
                 const std::vector<uint8_t>& body);
  void monitor_once();
  void teardown(bool aborted);

  const Config config_;
  std::unique_ptr<Transport> transport_;
  NodeId self_;
  std::string address_;
  std::unique_ptr<Acceptor> acceptor_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kRendezvous;
  std::map<Key, Member> members_;
  std::map<Key, bool> reserved_;                  // admitted, handshake not finished
  std::vector<std::shared_ptr<Peer>> all_peers_;  // every peer ever accepted (joined in teardown)
  std::optional<Plan> plan_;
  std::vector<std::string> barrier_names_;  // k-th barrier's name, set by the first to enter
  std::vector<int> barrier_counts_;
  int workers_shut_down_ = 0;
  ActionRounds actions_;  // agreed stops and snapshots (internal/action_rounds.h)
  std::optional<Failure> failure_;
  std::optional<Failure> pending_death_;  // seen here, waiting for a richer report
  int64_t pending_death_deadline_ms_ = 0;
  bool ran_ = false;
};
namespace {

// How long a death seen by the coordinator waits for a report from a node
// that saw it on the data plane (see Note [death reports]).
constexpr int64_t kDeathReportGraceMs = 300;

}  // namespace

Coordinator::Impl::Impl(const Config& config) : config_(config), actions_(config.num_workers) {
  config_.validate();
  transport_ = make_transport(config_.transport, TransportOptions{config_.socket_buffer_bytes,
                                                                  config_.notsent_lowat_bytes});
  std::unique_ptr<Listener> listener = transport_->listen(config_.coordinator);
  address_ = listener->address();
  self_ = NodeId{Role::kCoordinator, 0, address_};
  acceptor_ = std::make_unique<Acceptor>(
      std::move(listener), self_, config_.token, config_.handshake_timeout_ms,
      [this](const NodeId& id) { return admit(id); },
      [this](std::unique_ptr<Connection> conn, const NodeId& id) { on_peer(std::move(conn), id); },
      "coordinator");
}

Coordinator::Impl::~Impl() {
  acceptor_->stop();
  std::vector<std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kRendezvous || phase_ == Phase::kRunning) phase_ = Phase::kAborted;
    peers = all_peers_;
  }
  for (auto& p : peers) p->shutdown();
  // Peers join their readers in their destructors, here, outside the lock.
}

std::optional<Plan> Coordinator::Impl::plan() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_;
}

std::string Coordinator::Impl::admit(const NodeId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_ != Phase::kRendezvous) {
    return "the cluster is already formed (" + std::to_string(config_.num_workers) + " workers, " +
           std::to_string(config_.num_servers) + " servers); refusing " + id.str();
  }
  int limit = 0;
  if (id.role == Role::kWorker) limit = config_.num_workers;
  if (id.role == Role::kServer) limit = config_.num_servers;
  if (limit == 0) return std::string("a ") + role_name(id.role) + " cannot register";
  if (id.rank < 0 || id.rank >= limit) {
    return id.str() + ": rank out of range (this cluster has " + std::to_string(limit) + " " +
           role_name(id.role) + "s)";
  }
  const Key key{id.role, id.rank};
  auto it = members_.find(key);
  if (it != members_.end()) {
    return std::string(role_name(id.role)) + " " + std::to_string(id.rank) +
           " is already registered from " + it->second.id.address;
  }
  if (reserved_.count(key)) {
    return std::string(role_name(id.role)) + " " + std::to_string(id.rank) +
           " is registering from another connection";
  }
  reserved_[key] = true;
  return "";
}

void Coordinator::Impl::on_peer(std::unique_ptr<Connection> conn, const NodeId& id) {
  auto peer = std::make_shared<Peer>(std::move(conn), self_, id,
                                     Peer::Options{config_.max_frame_bytes, config_.timeout_ms});
  std::vector<std::shared_ptr<Peer>> to;
  std::vector<uint8_t> book_msg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{id.role, id.rank};
    reserved_.erase(key);
    all_peers_.push_back(peer);
    if (phase_ != Phase::kRendezvous) {
      peer->shutdown();
      return;
    }
    Member m;
    m.id = id;
    m.peer = peer;
    m.last_seen_ms = now_ms();
    members_[key] = m;
    if (config_.verbose) log_line("coordinator", "registered " + id.str());
    if (members_.size() == static_cast<size_t>(config_.num_workers + config_.num_servers)) {
      AddressBook book;
      book.workers.resize(static_cast<size_t>(config_.num_workers));
      book.servers.resize(static_cast<size_t>(config_.num_servers));
      for (auto& [k, member] : members_) {
        auto& list = k.first == Role::kWorker ? book.workers : book.servers;
        list[static_cast<size_t>(k.second)] = member.id.address;
      }
      phase_ = Phase::kRunning;
      book_msg = encode_address_book(book);
      to = all_peers_locked();
      if (config_.verbose)
        log_line("coordinator", "all nodes registered; sending the address book");
    }
  }
  peer->start([this](Peer& p, const FrameHeader& h) { on_frame(p, h); },
              [this](Peer& p, const std::string& r, bool c) { on_closed(p, r, c); });
  broadcast(to, FrameType::kAddressBook, book_msg);
}

std::vector<std::shared_ptr<Peer>> Coordinator::Impl::all_peers_locked() const {
  std::vector<std::shared_ptr<Peer>> out;
  for (const auto& [k, m] : members_) out.push_back(m.peer);
  return out;
}

void Coordinator::Impl::broadcast(const std::vector<std::shared_ptr<Peer>>& peers, FrameType type,
                                  const std::vector<uint8_t>& body) {
  for (const auto& p : peers) {
    try {
      p->send_message(type, body, Deadline::after_ms(config_.timeout_ms));
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      fail_locked(p->remote().str(), "the coordinator could not send " +
                                         frame_type_name(static_cast<uint16_t>(type)) + " to " +
                                         p->remote().str() + ": " + e.what());
    }
  }
}

std::string Coordinator::Impl::describe_progress(const Progress& p) const {
  if (p.iteration < 0) return "no training step yet";
  return "layer " + std::to_string(p.layer) + ", iteration " + std::to_string(p.iteration);
}

void Coordinator::Impl::fail_locked(const std::string& peer, const std::string& reason) {
  if (phase_ == Phase::kAborted || phase_ == Phase::kShutdown) return;
  phase_ = Phase::kAborted;
  failure_ = Failure{peer, reason};
  cv_.notify_all();
}

void Coordinator::Impl::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_locked(self_.str(), reason);
}

void Coordinator::Impl::on_plan_request_locked(Member& m, std::vector<LayerSpec> specs,
                                               std::vector<std::shared_ptr<Peer>>* to,
                                               std::vector<uint8_t>* msg) {
  if (m.has_specs) throw ProtocolError(m.id.str() + " declared its layers twice");
  m.has_specs = true;
  m.specs = std::move(specs);
  for (const auto& [k, w] : members_) {
    if (k.first == Role::kWorker && !w.has_specs) return;
  }
  if (static_cast<int>(std::count_if(members_.begin(), members_.end(), [](const auto& kv) {
        return kv.first.first == Role::kWorker;
      })) != config_.num_workers) {
    return;
  }
  // Every worker declared: they must agree exactly, or the keys would not.
  const Member& ref = members_.at(Key{Role::kWorker, 0});
  for (const auto& [k, w] : members_) {
    if (k.first != Role::kWorker) continue;
    if (w.specs.size() != ref.specs.size()) {
      fail_locked(w.id.str(), w.id.str() + " declared " + std::to_string(w.specs.size()) +
                                  " layers but " + ref.id.str() + " declared " +
                                  std::to_string(ref.specs.size()));
      return;
    }
    for (size_t i = 0; i < w.specs.size(); ++i) {
      if (!(w.specs[i] == ref.specs[i])) {
        fail_locked(w.id.str(), "layer mismatch: " + w.id.str() + " declared " +
                                    w.specs[i].debug_string() + " where " + ref.id.str() +
                                    " declared " + ref.specs[i].debug_string());
        return;
      }
    }
  }
  try {
    plan_ = make_plan(ref.specs, config_.num_workers, config_.num_servers, config_.chunk_bytes,
                      config_.scheme, config_.compression, config_.powersgd_rank, config_.rates,
                      config_.workers_per_machine);
  } catch (const CommError& e) {
    fail_locked(self_.str(), std::string("cannot build the plan: ") + e.what());
    return;
  }
  if (config_.verbose) {
    for (const LayerPlan& l : plan_->layers) {
      log_line("coordinator", "plan: " + l.spec.debug_string() + " -> " + scheme_name(l.scheme) +
                                  (l.rank > 0 ? " rank " + std::to_string(l.rank) : ""));
    }
  }
  *to = all_peers_locked();
  *msg = encode_plan(*plan_);
}

void Coordinator::Impl::on_frame(Peer& peer, const FrameHeader& h) {
  const Key key{peer.remote().role, peer.remote().rank};
  const bool is_worker = peer.remote().role == Role::kWorker;
  std::vector<uint8_t> body = peer.read_body();
  std::vector<std::shared_ptr<Peer>> to;
  std::vector<uint8_t> msg;
  FrameType out_type = FrameType::kPlan;
  ActionRounds::Broadcast actions;  // to every worker, after `msg`
  std::vector<std::shared_ptr<Peer>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = members_.find(key);
    if (it == members_.end() || it->second.peer.get() != &peer) return;
    Member& m = it->second;
    m.last_seen_ms = now_ms();
    switch (h.type) {
      case FrameType::kHeartbeat:
        m.progress = decode_progress(body.data(), body.size());
        return;
      case FrameType::kPlanRequest:
        if (!is_worker) throw ProtocolError("only workers declare layers");
        on_plan_request_locked(m, decode_layer_specs(body.data(), body.size()), &to, &msg);
        out_type = FrameType::kPlan;
        break;
      case FrameType::kBarrier: {
        if (!is_worker) throw ProtocolError("only workers enter barriers");
        const std::string name = decode_text(body.data(), body.size());
        const uint64_t k = m.barriers_entered++;
        if (k == barrier_names_.size()) {
          barrier_names_.push_back(name);
          barrier_counts_.push_back(0);
        }
        if (barrier_names_[k] != name) {
          fail_locked(m.id.str(), "barrier mismatch: " + m.id.str() + " entered '" + name +
                                      "' as barrier #" + std::to_string(k + 1) +
                                      " where another worker entered '" + barrier_names_[k] + "'");
          return;
        }
        if (++barrier_counts_[k] == config_.num_workers) {
          for (const auto& [wk, w] : members_) {
            if (wk.first == Role::kWorker) to.push_back(w.peer);
          }
          msg = encode_text(name);
          out_type = FrameType::kBarrierRelease;
        }
        break;
      }
      case FrameType::kFailure: {
        const Failure f = decode_failure(body.data(), body.size());
        if (phase_ != Phase::kAborted) {
          log_line("coordinator", "failure reported by " + m.id.str() + ": " + f.reason);
        }
        fail_locked(f.peer.empty() ? m.id.str() : f.peer, f.reason);
        return;
      }
      case FrameType::kShutdown:
        if (!is_worker) throw ProtocolError("only workers request shutdown");
        if (!m.shutdown_requested) {
          m.shutdown_requested = true;
          actions = actions_.worker_finished(m.id.rank);
          if (++workers_shut_down_ == config_.num_workers && phase_ == Phase::kRunning) {
            phase_ = Phase::kShutdown;
            cv_.notify_all();
          }
        }
        break;
      case FrameType::kActionRequest: {
        if (!is_worker) throw ProtocolError("only workers request actions");
        const ActionMessage a = decode_action(body.data(), body.size());
        actions = actions_.request(m.id.rank, a.kind, a.iteration, a.reason);
        if (!actions.empty()) {
          log_line("coordinator", std::string(action_name(a.kind)) + " requested (" + a.reason +
                                      "): asking every worker where it is");
        }
        break;
      }
      case FrameType::kActionVote: {
        if (!is_worker) throw ProtocolError("only workers vote");
        const ActionMessage a = decode_action(body.data(), body.size());
        actions = actions_.vote(m.id.rank, a.round, a.iteration);
        break;
      }
      default:
        throw ProtocolError("unexpected " + frame_type_name(static_cast<uint16_t>(h.type)) +
                            " at the coordinator");
    }
    if (!actions.empty()) {
      for (const auto& [k, w] : members_) {
        if (k.first == Role::kWorker) workers.push_back(w.peer);
      }
      for (const auto& [type, a] : actions) {
        if (type != FrameType::kActionDecide) continue;
        log_line("coordinator", a.iteration < 0
                                    ? std::string(action_name(a.kind)) + " (" + a.reason +
                                          ") dropped: a worker has already finished training"
                                    : "every worker will " + std::string(action_name(a.kind)) +
                                          " at iteration " + std::to_string(a.iteration) + " (" +
                                          a.reason + ")");
      }
    }
  }
  if (!to.empty()) broadcast(to, out_type, msg);
  for (const auto& [type, a] : actions) broadcast(workers, type, encode_action(a));
}

void Coordinator::Impl::on_closed(Peer& peer, const std::string& reason, bool clean) {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_ == Phase::kShutdown || phase_ == Phase::kAborted) return;
  const Key key{peer.remote().role, peer.remote().rank};
  auto it = members_.find(key);
  if (it == members_.end() || it->second.peer.get() != &peer) return;
  const std::string name = peer.remote().str();
  // Note [death reports]: the nodes that talked to the dead one on the data
  // plane see it go too, and their reports say which layer and iteration
  // they were waiting on. Give them a moment to arrive and prefer them; our
  // own account (the last heartbeat) is the fallback.
  if (!pending_death_) {
    pending_death_ =
        Failure{name, name + (clean ? " left before the job finished: " : " died: ") +
                          strip_peer_name(reason, name) + " (its last heartbeat reported " +
                          describe_progress(it->second.progress) + ")"};
    pending_death_deadline_ms_ = now_ms() + kDeathReportGraceMs;
    cv_.notify_all();
  }
}

void Coordinator::Impl::monitor_once() {
  std::vector<std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = now_ms();
    // Once one node is past the timeout, every node nearly as silent is named with it,
    // workers first: a frozen process holds a worker and its colocated shard, whose
    // heartbeats stopped within an interval of each other, and the worker is the one
    // its user knows. (A live node is never silent for more than about an interval.)
    const int64_t nearly = std::max<int64_t>(
        config_.heartbeat_timeout_ms / 2,
        config_.heartbeat_timeout_ms - 2 * int64_t{config_.heartbeat_interval_ms});
    std::vector<const Member*> silent;
    bool past = false;
    for (const auto& [k, m] : members_) {
      past = past || now - m.last_seen_ms > config_.heartbeat_timeout_ms;
      if (now - m.last_seen_ms > nearly) silent.push_back(&m);
    }
    std::stable_partition(silent.begin(), silent.end(),
                          [](const Member* m) { return m->id.role == Role::kWorker; });
    if (past) {
      std::string reason;
      for (const Member* m : silent) {
        reason += (reason.empty() ? "" : "; ") + m->id.str() + " missed heartbeats for " +
                  std::to_string(now - m->last_seen_ms) + " ms (its last heartbeat reported " +
                  describe_progress(m->progress) + ")";
      }
      fail_locked(silent.front()->id.str(), reason);
    }
    peers = all_peers_locked();
  }
  for (const auto& p : peers) {
    p->try_send_message(FrameType::kHeartbeat, {}, config_.heartbeat_interval_ms);
  }
}

void Coordinator::Impl::run() {
  const int64_t start = now_ms();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ran_) throw ConfigError("Coordinator::Impl::run called twice");
    ran_ = true;
  }
  acceptor_->start();
  if (config_.verbose) log_line("coordinator", "listening on " + address_);
  std::unique_lock<std::mutex> lock(mu_);
  while (phase_ == Phase::kRendezvous || phase_ == Phase::kRunning) {
    int64_t wait_ms = config_.heartbeat_interval_ms;
    if (phase_ == Phase::kRendezvous) {
      wait_ms = std::max<int64_t>(1, std::min(wait_ms, start + config_.timeout_ms - now_ms() + 1));
    }
    if (pending_death_) {
      wait_ms = std::max<int64_t>(1, std::min(wait_ms, pending_death_deadline_ms_ - now_ms() + 1));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(wait_ms));
    if (pending_death_ && now_ms() >= pending_death_deadline_ms_) {
      fail_locked(pending_death_->peer, pending_death_->reason);  // no report came
      break;
    }
    if (phase_ == Phase::kRendezvous && now_ms() - start > config_.timeout_ms) {
      std::string missing;
      for (int r = 0; r < config_.num_workers; ++r) {
        if (!members_.count(Key{Role::kWorker, r})) missing += " worker " + std::to_string(r);
      }
      for (int r = 0; r < config_.num_servers; ++r) {
        if (!members_.count(Key{Role::kServer, r})) missing += " server " + std::to_string(r);
      }
      fail_locked(self_.str(), "rendezvous timed out after " + std::to_string(config_.timeout_ms) +
                                   " ms; never registered:" + missing);
      break;
    }
    lock.unlock();
    monitor_once();
    lock.lock();
  }
  const bool aborted = phase_ == Phase::kAborted;
  lock.unlock();
  teardown(aborted);
  if (aborted) {
    const Failure f = *failure_;
    throw PeerFailure("coordinator (" + address_ + "): job aborted: " + f.reason, f.peer, -1, -1);
  }
}

void Coordinator::Impl::teardown(bool aborted) {
  std::vector<std::shared_ptr<Peer>> peers;
  Failure f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers = all_peers_locked();
    if (failure_) f = *failure_;
  }
  if (aborted) {
    log_line("coordinator", "aborting the job: " + f.reason);
    for (const auto& p : peers)
      p->try_send_message(FrameType::kAbort, encode_failure(f), kTeardownSendMs);
  } else {
    for (const auto& p : peers) p->try_send_message(FrameType::kShutdown, {}, kTeardownSendMs);
  }
  // Nodes close first on SHUTDOWN/ABORT; draining until their EOF means no
  // unread byte is left on our side, so closing sends FIN, not RST.
  const Deadline deadline = Deadline::after_ms(kTeardownWaitMs);
  for (const auto& p : peers) p->wait_stopped(deadline);
  acceptor_->stop();
  for (const auto& p : peers) p->shutdown();
  if (config_.verbose) log_line("coordinator", aborted ? "aborted" : "all workers finished");
}

Coordinator::Coordinator(const Config& config) : impl_(std::make_unique<Impl>(config)) {}
Coordinator::~Coordinator() = default;
std::string Coordinator::address() const { return impl_->address(); }
void Coordinator::run() { impl_->run(); }
void Coordinator::abort(const std::string& reason) { impl_->abort(reason); }
std::optional<Plan> Coordinator::plan() const { return impl_->plan(); }

}  // namespace poseidon
