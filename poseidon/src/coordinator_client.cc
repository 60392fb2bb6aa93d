#include "poseidon/internal/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "poseidon/internal/deadline.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/log.h"

namespace poseidon {
namespace {

constexpr int kConnectRetryMs = 100;

}  // namespace

CoordinatorClient::CoordinatorClient(const Config& config, Transport& transport, NodeId self,
                                     std::shared_ptr<AbortSignal> abort)
    : config_(config),
      transport_(transport),
      self_(std::move(self)),
      address_(config.coordinator),
      abort_(std::move(abort)) {
  abort_->subscribe([this](const Failure& f) {
    cv_.notify_all();
    // A local failure: tell the coordinator so it aborts every other node.
    if (!received_abort_.load()) {
      std::shared_ptr<Peer> peer;
      {
        std::lock_guard<std::mutex> lock(mu_);
        peer = peer_;
      }
      if (peer) peer->try_send_message(FrameType::kFailure, encode_failure(f), kTeardownSendMs);
    }
  });
}

CoordinatorClient::~CoordinatorClient() { close(); }

template <typename Pred>
void CoordinatorClient::wait_for(std::unique_lock<std::mutex>& lock, Deadline deadline,
                                 const std::string& what, Pred ready) {
  cv_.wait_until(lock, deadline.time_point(), [&] { return ready() || abort_->tripped(); });
  if (ready()) return;
  if (abort_->tripped()) {
    const Failure f = abort_->failure();
    throw PeerFailure(self_.str() + ": " + what + " failed: " + f.reason, f.peer, -1, -1);
  }
  throw TimeoutError(self_.str() + ": " + what + " timed out (coordinator " + address_ + ")");
}

AddressBook CoordinatorClient::connect(Deadline deadline) {
  std::unique_ptr<Connection> conn;
  NodeId coord;
  std::string last_error = "not tried";
  for (;;) {
    try {
      conn = transport_.connect(address_, deadline);
      coord = client_handshake(*conn, self_, config_.token, deadline);
      break;
    } catch (const TransportError& e) {
      // Not up yet, or it went away mid-handshake: try again until the deadline.
      last_error = e.what();
      conn.reset();
    }
    if (deadline.expired()) {
      throw TimeoutError(self_.str() + ": could not reach the coordinator at " + address_ + ": " +
                         last_error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kConnectRetryMs));
  }
  if (coord.role != Role::kCoordinator) {
    throw ProtocolError(self_.str() + ": " + address_ + " is " + coord.str() +
                        ", not the coordinator");
  }
  coord.address = address_;
  auto peer = std::make_shared<Peer>(
      std::move(conn), self_, coord,
      Peer::Options{kMaxReasonBytes * 4 + (size_t{16} << 20), config_.timeout_ms});
  last_seen_ms_ = now_ms();
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer_ = peer;
  }
  peer->start([this](Peer& p, const FrameHeader& h) { on_frame(p, h); },
              [this](Peer& p, const std::string& r, bool c) { on_closed(p, r, c); });
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  if (config_.verbose) log_line(self_.str(), "registered with the coordinator at " + address_);
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(lock, deadline, "waiting for the address book", [&] { return book_.has_value(); });
  return *book_;
}

Plan CoordinatorClient::request_plan(const std::vector<LayerSpec>& layers, Deadline deadline) {
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
  }
  if (!peer) throw ConfigError(self_.str() + ": request_plan before connect");
  peer->send_message(FrameType::kPlanRequest, encode_layer_specs(layers), deadline);
  return wait_plan(deadline);
}

Plan CoordinatorClient::wait_plan(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(lock, deadline, "waiting for the plan", [&] { return plan_.has_value(); });
  return *plan_;
}

std::optional<Plan> CoordinatorClient::wait_plan_or_shutdown(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(lock, deadline, "waiting for the plan",
           [&] { return plan_.has_value() || shutdown_received_.load(); });
  return plan_;
}

void CoordinatorClient::barrier(const std::string& name, Deadline deadline) {
  std::shared_ptr<Peer> peer;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
    seq = ++barriers_entered_;
  }
  if (!peer) throw ConfigError(self_.str() + ": barrier before connect");
  peer->send_message(FrameType::kBarrier, encode_text(name), deadline);
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(lock, deadline, "barrier '" + name + "'", [&] { return barriers_released_ >= seq; });
}

void CoordinatorClient::request_action(ActionKind kind, const std::string& reason,
                                       Deadline deadline) {
  std::shared_ptr<Peer> peer;
  int64_t boundary = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
    boundary = boundary_;
  }
  if (!peer) throw ConfigError(self_.str() + ": request_action before connect");
  peer->send_message(FrameType::kActionRequest,
                     encode_action(ActionMessage{0, kind, boundary, reason}), deadline);
}

std::optional<ActionMessage> CoordinatorClient::vote_locked() {
  if (proposed_round_ <= voted_round_ || boundary_ < 0) return std::nullopt;
  voted_round_ = proposed_round_;
  voted_boundary_ = boundary_;
  return ActionMessage{voted_round_, ActionKind::kNone, boundary_, ""};
}

std::vector<ActionMessage> CoordinatorClient::reach_boundary(int64_t iteration, Deadline deadline) {
  std::optional<ActionMessage> vote;
  std::shared_ptr<Peer> peer;
  std::unique_lock<std::mutex> lock(mu_);
  boundary_ = iteration;
  vote = vote_locked();  // a round proposed before the loop's first boundary
  peer = peer_;
  if (vote) {
    lock.unlock();
    if (!peer) throw ConfigError(self_.str() + ": reach_boundary before connect");
    peer->send_message(FrameType::kActionVote, encode_action(*vote), deadline);
    lock.lock();
  }
  // Not past the boundary after the one voted until the round is decided.
  if (voted_round_ > decided_round_ && iteration > voted_boundary_) {
    wait_for(lock, deadline,
             "waiting for the other workers' votes on an action (this worker voted at "
             "iteration " +
                 std::to_string(voted_boundary_) + ")",
             [&] { return decided_round_ >= voted_round_; });
  }
  std::vector<ActionMessage> out;
  out.swap(decisions_);
  return out;
}

void CoordinatorClient::request_shutdown(Deadline deadline) {
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer = peer_;
  }
  if (!peer) throw ConfigError(self_.str() + ": shutdown before connect");
  peer->send_message(FrameType::kShutdown, {}, deadline);
  std::unique_lock<std::mutex> lock(mu_);
  wait_for(lock, deadline, "shutdown (waiting for every worker to finish)",
           [&] { return shutdown_received_.load(); });
}

bool CoordinatorClient::wait_shutdown(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline.time_point(),
                 [&] { return shutdown_received_.load() || abort_->tripped(); });
  return shutdown_received_.load() && !abort_->tripped();
}

void CoordinatorClient::set_progress(int64_t iteration, int64_t layer) {
  progress_iteration_.store(iteration, std::memory_order_relaxed);
  progress_layer_.store(layer, std::memory_order_relaxed);
}

void CoordinatorClient::on_frame(Peer& peer, const FrameHeader& h) {
  last_seen_ms_ = now_ms();
  switch (h.type) {
    case FrameType::kHeartbeat:
      return;
    case FrameType::kAddressBook: {
      const std::vector<uint8_t> body = peer.read_body();
      AddressBook book = decode_address_book(body.data(), body.size());
      if (book.workers.size() != static_cast<size_t>(config_.num_workers) ||
          book.servers.size() != static_cast<size_t>(config_.num_servers)) {
        throw ProtocolError("address book lists " + std::to_string(book.workers.size()) +
                            " workers and " + std::to_string(book.servers.size()) +
                            " servers; this node expects " + std::to_string(config_.num_workers) +
                            " and " + std::to_string(config_.num_servers) +
                            " (POSEIDON_NUM_WORKERS / POSEIDON_NUM_SERVERS differ between nodes)");
      }
      std::lock_guard<std::mutex> lock(mu_);
      book_ = std::move(book);
      break;
    }
    case FrameType::kPlan: {
      const std::vector<uint8_t> body = peer.read_body();
      Plan plan = decode_plan(body.data(), body.size());
      std::lock_guard<std::mutex> lock(mu_);
      plan_ = std::move(plan);
      break;
    }
    case FrameType::kBarrierRelease: {
      std::lock_guard<std::mutex> lock(mu_);
      ++barriers_released_;
      break;
    }
    case FrameType::kShutdown:
      shutdown_received_ = true;
      break;
    case FrameType::kActionPropose: {
      // Answered here, on the reader thread (internal/action_rounds.h, Note [agreed actions]).
      const std::vector<uint8_t> body = peer.read_body();
      const ActionMessage a = decode_action(body.data(), body.size());
      std::optional<ActionMessage> vote;
      {
        std::lock_guard<std::mutex> lock(mu_);
        proposed_round_ = std::max(proposed_round_, a.round);
        vote = vote_locked();
      }
      if (vote) {
        peer.send_message(FrameType::kActionVote, encode_action(*vote),
                          Deadline::after_ms(config_.timeout_ms));
      }
      break;
    }
    case FrameType::kActionDecide: {
      const std::vector<uint8_t> body = peer.read_body();
      ActionMessage a = decode_action(body.data(), body.size());
      std::lock_guard<std::mutex> lock(mu_);
      decided_round_ = std::max(decided_round_, a.round);
      decisions_.push_back(std::move(a));
      break;
    }
    case FrameType::kAbort: {
      const std::vector<uint8_t> body = peer.read_body();
      const Failure f = decode_failure(body.data(), body.size());
      received_abort_ = true;
      abort_->trip(f);
      break;
    }
    default:
      throw ProtocolError("unexpected " + frame_type_name(static_cast<uint16_t>(h.type)) +
                          " from the coordinator");
  }
  cv_.notify_all();
}

void CoordinatorClient::on_closed(Peer& peer, const std::string& reason, bool clean) {
  if (!shutdown_received_.load() && !closing_.load()) {
    abort_->trip(
        Failure{peer.remote().str(), "lost the coordinator " + peer.remote().str() + ": " + reason +
                                         (clean ? " (it closed before the job finished)" : "")});
  }
  cv_.notify_all();
}

void CoordinatorClient::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_heartbeat_) {
    std::shared_ptr<Peer> peer = peer_;
    lock.unlock();
    const Progress p{progress_iteration_.load(std::memory_order_relaxed),
                     progress_layer_.load(std::memory_order_relaxed)};
    if (peer) {
      peer->try_send_message(FrameType::kHeartbeat, encode_progress(p),
                             config_.heartbeat_interval_ms);
    }
    const int64_t silent_ms = now_ms() - last_seen_ms_.load();
    if (silent_ms > config_.heartbeat_timeout_ms && !shutdown_received_.load() &&
        !closing_.load()) {
      abort_->trip(Failure{"coordinator (" + address_ + ")",
                           "the coordinator (" + address_ + ") missed heartbeats for " +
                               std::to_string(silent_ms) + " ms"});
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(config_.heartbeat_interval_ms),
                 [&] { return stop_heartbeat_; });
  }
}

void CoordinatorClient::close() {
  closing_ = true;
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_heartbeat_ = true;
    peer = peer_;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (!peer) return;
  if (shutdown_received_.load() && !abort_->tripped()) {
    // Normal end: let the coordinator read our EOF after everything we sent.
    peer->close_gracefully(kTeardownSendMs);
    peer->wait_stopped(Deadline::after_ms(kTeardownSendMs));
  }
  peer->shutdown();
  peer->wait_stopped(Deadline::after_ms(kTeardownSendMs));
}

}  // namespace poseidon
