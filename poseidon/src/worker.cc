#include "poseidon/worker.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "poseidon/internal/abort_signal.h"
#include "poseidon/internal/acceptor.h"
#include "poseidon/internal/coordinator_client.h"
#include "poseidon/internal/counters.h"
#include "poseidon/internal/data_plane.h"
#include "poseidon/internal/handshake.h"
#include "poseidon/internal/kv_worker.h"
#include "poseidon/internal/log.h"
#include "poseidon/internal/send_queue.h"
#include "poseidon/internal/sfb.h"

namespace poseidon {

// What a Worker is; the public calls forward here, one to one.
class Worker::Impl {
 public:
  explicit Impl(const Config& config);
  ~Impl();

  void connect();
  const Plan& plan(const std::vector<LayerSpec>& layers);
  void register_layer(uint32_t layer_id, float* grad, size_t num_floats);
  void register_sfb_layer(uint32_t layer_id, size_t reserved_floats, size_t max_floats);
  Handle push_pull(uint32_t layer_id, int64_t iteration, uint32_t part);
  Handle allgather(uint32_t layer_id, int64_t iteration, const float* send, size_t num_floats);
  FactorView factor(uint32_t layer_id, int64_t iteration, int rank) const;
  void barrier(const std::string& name, int timeout_ms);
  void request_action(ActionKind kind, const std::string& reason);
  std::vector<ActionMessage> reach_boundary(int64_t iteration, int timeout_ms);
  void abort(const std::string& reason);
  void shutdown(int timeout_ms);
  std::map<uint32_t, LayerTraffic> traffic() const { return counters_.snapshot(); }
  std::string failure() const { return abort_->tripped() ? abort_->failure().reason : ""; }
  const Config& config() const { return config_; }
  std::string address() const { return self_.address; }
  const AddressBook& address_book() const { return book_; }

 private:
  enum class State { kNew, kConnected, kPlanned, kShutDown };
  std::string admit(const NodeId& id);
  void on_peer(std::unique_ptr<Connection> conn, const NodeId& id);
  // Wraps a handshaken connection to `id` in a Peer, puts it in its data-plane
  // slot (running `also` under the same lock) and starts its reader; false
  // (the connection dropped) if the slot is taken or the worker closed.
  bool adopt(std::unique_ptr<Connection> conn, const NodeId& id,
             const std::function<void()>& also = nullptr);
  void on_frame(Peer& peer, const FrameHeader& h);
  void on_closed(Peer& peer, const std::string& reason, bool clean);
  void on_abort(const Failure& f);
  // The shard of this process may no longer use our ranges; waits for the
  // uses in progress until `deadline` (internal/colocated.h, Note [lending]).
  void revoke_loans(Deadline deadline);
  bool wait_planned();
  std::string pending() const;
  void require(State at_least, const std::string& call) const;
  void close_all(bool graceful);

  const Config config_;
  std::unique_ptr<Transport> transport_;
  NodeId self_;
  std::shared_ptr<AbortSignal> abort_;
  CounterTable counters_;
  std::unique_ptr<SendQueue> queue_;
  std::unique_ptr<CoordinatorClient> coord_;
  std::unique_ptr<Acceptor> acceptor_;
  AddressBook book_;
  DataPlane plane_;
  std::unique_ptr<KVWorker> kv_;
  std::unique_ptr<SFBroadcaster> sfb_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kNew;
  bool shutting_down_ = false;
  bool closed_ = false;
  std::vector<std::shared_ptr<Peer>> all_peers_;  // every link, joined at close
};

Worker::Impl::Impl(const Config& config) : config_(config) {
  config_.validate();
  if (config_.role != Role::kWorker) throw ConfigError("Worker needs role=worker");
  transport_ = make_transport(config_.transport, TransportOptions{config_.socket_buffer_bytes,
                                                                  config_.notsent_lowat_bytes});
  std::unique_ptr<Listener> listener = transport_->listen(config_.listen);
  self_ = NodeId{Role::kWorker, config_.rank, listener->address()};
  abort_ = std::make_shared<AbortSignal>();
  queue_ = std::make_unique<SendQueue>(config_.comm_threads, config_.timeout_ms);
  coord_ = std::make_unique<CoordinatorClient>(config_, *transport_, self_, abort_);
  abort_->subscribe([this](const Failure& f) { on_abort(f); });
  plane_.self = self_;
  plane_.servers.resize(static_cast<size_t>(config_.num_servers));
  plane_.workers.resize(static_cast<size_t>(config_.num_workers));
  plane_.queue = queue_.get();
  plane_.abort = abort_;
  plane_.counters = &counters_;
  plane_.coord = coord_.get();
  plane_.timeout_ms = config_.timeout_ms;
  acceptor_ = std::make_unique<Acceptor>(
      std::move(listener), self_, config_.token, config_.handshake_timeout_ms,
      [this](const NodeId& id) { return admit(id); },
      [this](std::unique_ptr<Connection> conn, const NodeId& id) { on_peer(std::move(conn), id); },
      self_.str());
  acceptor_->start();
}

Worker::Impl::~Impl() { close_all(false); }

void Worker::Impl::require(State at_least, const std::string& call) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kShutDown) throw ConfigError(self_.str() + ": " + call + " after shutdown");
  if (static_cast<int>(state_) < static_cast<int>(at_least)) {
    throw ConfigError(self_.str() + ": " + call + " called too early (order: connect, plan, " +
                      "register_*, push_pull/allgather, shutdown)");
  }
}

std::string Worker::Impl::admit(const NodeId& id) {
  if (id.role != Role::kWorker) {
    return std::string("a ") + role_name(id.role) + " cannot connect to a worker";
  }
  if (id.rank <= config_.rank || id.rank >= config_.num_workers) {
    return "worker " + std::to_string(id.rank) + " may not dial worker " +
           std::to_string(config_.rank) + " (higher ranks dial lower ones)";
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (plane_.workers[static_cast<size_t>(id.rank)]) {
    return "worker " + std::to_string(id.rank) + " is already connected";
  }
  return "";
}

bool Worker::Impl::adopt(std::unique_ptr<Connection> conn, const NodeId& id,
                         const std::function<void()>& also) {
  auto peer = std::make_shared<Peer>(std::move(conn), self_, id,
                                     Peer::Options{config_.max_frame_bytes, config_.timeout_ms});
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot =
        (id.role == Role::kServer ? plane_.servers : plane_.workers)[static_cast<size_t>(id.rank)];
    if (slot || closed_) return false;  // a duplicate loses; dropping it closes it
    slot = peer;
    all_peers_.push_back(peer);
    if (also) also();
  }
  cv_.notify_all();
  if (config_.verbose) log_line(self_.str(), "connected to " + id.str());
  peer->start([this](Peer& p, const FrameHeader& h) { on_frame(p, h); },
              [this](Peer& p, const std::string& r, bool c) { on_closed(p, r, c); });
  return true;
}

void Worker::Impl::on_peer(std::unique_ptr<Connection> conn, const NodeId& id) {
  adopt(std::move(conn), id);
}

void Worker::Impl::connect() {
  require(State::kNew, "connect");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kNew) throw ConfigError(self_.str() + ": connect called twice");
  }
  // The coordinator gives up on the rendezvous after timeout_ms and says who
  // never came; wait a little longer so we hear that reason.
  const Deadline deadline = Deadline::after_ms(config_.timeout_ms + config_.heartbeat_timeout_ms);
  try {
    book_ = coord_->connect(deadline);
    auto dial = [&](const std::string& address, Role role, int rank) {
      std::unique_ptr<Connection> conn = transport_->connect(address, deadline);
      NodeId id = client_handshake(*conn, self_, config_.token, deadline);
      if (id.role != role || id.rank != rank) {
        throw ProtocolError(address + " is " + id.str() + ", the address book says " +
                            role_name(role) + " " + std::to_string(rank));
      }
      id.address = address;
      if (!adopt(std::move(conn), id)) {
        throw ProtocolError(self_.str() + ": cannot add " + id.str() +
                            ": already connected, or this worker is closing");
      }
    };
    if (!config_.local_server.empty()) {
      // The shard in our own process: same handshake, in-process transport.
      auto local = make_inproc_transport();
      std::unique_ptr<Connection> conn = local->connect(config_.local_server, deadline);
      NodeId id = client_handshake(*conn, self_, config_.token, deadline);
      if (id.role != Role::kServer || id.rank < 0 || id.rank >= config_.num_servers) {
        throw ProtocolError("local_server " + config_.local_server + " is " + id.str() +
                            ", not a server shard of this cluster");
      }
      id.address = book_.servers[static_cast<size_t>(id.rank)];
      const int shard = id.rank;
      adopt(std::move(conn), id, [&] {
        // Its ranges are summed in place (kv_server.h, Note [in-place rounds]).
        plane_.local_link = ColocatedLink::find(config_.local_server);
        if (plane_.local_link) plane_.local_shard = shard;
      });
    }
    for (int s = 0; s < config_.num_servers; ++s) {
      bool have = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        have = static_cast<bool>(plane_.servers[static_cast<size_t>(s)]);
      }
      if (!have) dial(book_.servers[static_cast<size_t>(s)], Role::kServer, s);
    }
    for (int w = 0; w < config_.rank; ++w)
      dial(book_.workers[static_cast<size_t>(w)], Role::kWorker, w);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline.time_point(), [&] {
      if (abort_->tripped()) return true;
      for (int w = config_.rank + 1; w < config_.num_workers; ++w) {
        if (!plane_.workers[static_cast<size_t>(w)]) return false;
      }
      return true;
    });
    plane_.check_abort(self_.str() + ": connect", -1, -1);
    for (int w = config_.rank + 1; w < config_.num_workers; ++w) {
      if (!plane_.workers[static_cast<size_t>(w)]) {
        throw TimeoutError(self_.str() + ": worker " + std::to_string(w) + " (" +
                           book_.workers[static_cast<size_t>(w)] + ") did not connect within " +
                           std::to_string(config_.timeout_ms) + " ms");
      }
    }
    state_ = State::kConnected;
  } catch (const PeerFailure&) {
    throw;
  } catch (const std::exception& e) {
    abort_->trip(Failure{self_.str(), self_.str() + ": connect failed: " + e.what()});
    throw;
  }
  if (config_.verbose) log_line(self_.str(), "connected to every server and worker");
}

const Plan& Worker::Impl::plan(const std::vector<LayerSpec>& layers) {
  require(State::kConnected, "plan");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kConnected) throw ConfigError(self_.str() + ": plan called twice");
  }
  Plan p;
  try {
    p = coord_->request_plan(layers, Deadline::after_ms(config_.timeout_ms));
  } catch (const TimeoutError& e) {
    abort_->trip(Failure{self_.str(), e.what()});
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    plane_.plan = std::move(p);
    kv_ = std::make_unique<KVWorker>(plane_);
    sfb_ = std::make_unique<SFBroadcaster>(plane_);
    state_ = State::kPlanned;
  }
  cv_.notify_all();
  return plane_.plan;
}

void Worker::Impl::register_layer(uint32_t layer_id, float* grad, size_t num_floats) {
  require(State::kPlanned, "register_layer");
  kv_->register_layer(layer_id, grad, num_floats);
}

void Worker::Impl::register_sfb_layer(uint32_t layer_id, size_t reserved_floats,
                                      size_t max_floats) {
  require(State::kPlanned, "register_sfb_layer");
  sfb_->register_layer(layer_id, reserved_floats, max_floats);
}

Handle Worker::Impl::push_pull(uint32_t layer_id, int64_t iteration, uint32_t part) {
  require(State::kPlanned, "push_pull");
  return kv_->push_pull(layer_id, iteration, part);
}

Handle Worker::Impl::allgather(uint32_t layer_id, int64_t iteration, const float* send,
                               size_t num_floats) {
  require(State::kPlanned, "allgather");
  return sfb_->allgather(layer_id, iteration, send, num_floats);
}

FactorView Worker::Impl::factor(uint32_t layer_id, int64_t iteration, int rank) const {
  require(State::kPlanned, "factor");
  return sfb_->factor(layer_id, iteration, rank);
}

void Worker::Impl::barrier(const std::string& name, int timeout_ms) {
  require(State::kConnected, "barrier");
  try {
    coord_->barrier(name, Deadline::after_ms(timeout_ms));
  } catch (const TimeoutError& e) {
    abort_->trip(Failure{self_.str(), e.what()});
    throw;
  }
}

void Worker::Impl::request_action(ActionKind kind, const std::string& reason) {
  require(State::kConnected, "request_action");
  coord_->request_action(kind, reason, Deadline::after_ms(config_.timeout_ms));
}

std::vector<ActionMessage> Worker::Impl::reach_boundary(int64_t iteration, int timeout_ms) {
  require(State::kConnected, "reach_boundary");
  try {
    return coord_->reach_boundary(iteration, Deadline::after_ms(timeout_ms));
  } catch (const TimeoutError& e) {
    abort_->trip(Failure{self_.str(), e.what()});
    throw;
  }
}

void Worker::Impl::abort(const std::string& reason) {
  abort_->trip(Failure{self_.str(), self_.str() + " aborted the job: " + reason});
}

bool Worker::Impl::wait_planned() {
  std::unique_lock<std::mutex> lock(mu_);
  const Deadline deadline = Deadline::after_ms(config_.timeout_ms);
  cv_.wait_until(lock, deadline.time_point(),
                 [&] { return state_ == State::kPlanned || abort_->tripped() || closed_; });
  if (state_ == State::kPlanned && !closed_) return true;
  if (!abort_->tripped() && !closed_) {
    throw TimeoutError(self_.str() + ": data arrived but this worker has no plan after " +
                       std::to_string(config_.timeout_ms) + " ms");
  }
  return false;
}

void Worker::Impl::on_frame(Peer& peer, const FrameHeader& h) {
  // After an abort our handles have failed: data still arriving for them is
  // skipped, not rejected (an ERROR back would race our ABORT to the sender
  // and could become the reason it reports).
  if (is_data_frame(h.type) || is_bf16_frame(h.type) || h.type == FrameType::kPullDone) {
    if (abort_->tripped()) return;
  }
  switch (h.type) {
    case FrameType::kPullReply:
    case FrameType::kPullReply16:
    case FrameType::kPullDone:
      if (peer.remote().role != Role::kServer) {
        throw ProtocolError(frame_type_name(static_cast<uint16_t>(h.type)) + " from a worker");
      }
      if (wait_planned()) kv_->on_reply(peer, h);
      return;
    case FrameType::kFactor:
      if (peer.remote().role != Role::kWorker) throw ProtocolError("FACTOR from a server");
      if (wait_planned()) sfb_->on_factor(peer, h);
      return;
    case FrameType::kAbort: {
      const std::vector<uint8_t> body = peer.read_body();
      abort_->trip(decode_failure(body.data(), body.size()));
      return;
    }
    default:
      throw ProtocolError("unexpected " + frame_type_name(static_cast<uint16_t>(h.type)) +
                          " at a worker");
  }
}

std::string Worker::Impl::pending() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kv_) out = kv_->pending();
    if (sfb_) {
      const std::string s = sfb_->pending();
      if (!s.empty()) out += (out.empty() ? "" : "; ") + s;
    }
  }
  if (!out.empty()) return "; " + self_.str() + " was waiting for: " + out;
  const Progress p = coord_->progress();
  if (p.iteration < 0) return "; " + self_.str() + " had not exchanged anything yet";
  return "; " + self_.str() + " had no exchange pending (its last: layer " +
         std::to_string(p.layer) + ", iteration " + std::to_string(p.iteration) + ")";
}

void Worker::Impl::on_closed(Peer& peer, const std::string& reason, bool clean) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ || closed_) return;
  }
  if (clean || abort_->tripped()) return;
  const std::string name = peer.remote().str();
  abort_->trip(Failure{name, name + " is gone (seen by " + self_.str() +
                                 "): " + strip_peer_name(reason, name) + pending()});
}

void Worker::Impl::on_abort(const Failure& f) {
  queue_->cancel_all("aborted: " + f.reason);
  // The shard of this process stops using our ranges before our handles fail
  // and the caller may touch them again (internal/colocated.h, Note [lending]).
  revoke_loans(Deadline::after_ms(kTeardownSendMs));
  std::vector<std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kv_) kv_->fail_all(f);
    if (sfb_) sfb_->fail_all(f);
    peers = all_peers_;
  }
  cv_.notify_all();
  log_line(self_.str(), "job aborted: " + f.reason);
  // Tell the peers first-hand (faster than the coordinator's broadcast, and
  // they learn the real reason instead of just seeing our EOF).
  // A frame still being written to a peer holds its connection; let it finish
  // (within kTeardownSendMs for all peers together) so the ABORT follows it
  // whole instead of cutting it, which the peer would report as our death.
  const Deadline deadline = Deadline::after_ms(kTeardownSendMs);
  for (const auto& p : peers) {
    p->try_send_message(FrameType::kAbort, encode_failure(f),
                        std::max(1, deadline.poll_timeout_ms()));
  }
  for (const auto& p : peers) p->shutdown();
}

void Worker::Impl::revoke_loans(Deadline deadline) {
  std::shared_ptr<ColocatedLink> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    link = plane_.local_link;
  }
  if (link && !link->revoke(config_.rank, deadline)) {
    log_line(self_.str(), "the shard of this process still uses its ranges after the deadline");
  }
}

void Worker::Impl::shutdown(int timeout_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kShutDown) return;
    shutting_down_ = true;
  }
  try {
    plane_.check_abort(self_.str() + ": shutdown", -1, -1);
    bool connected = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      connected = state_ != State::kNew;
    }
    if (connected) coord_->request_shutdown(Deadline::after_ms(timeout_ms));
  } catch (...) {
    close_all(false);
    throw;
  }
  close_all(true);
}

void Worker::Impl::close_all(bool graceful) {
  std::vector<std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    shutting_down_ = true;
    state_ = State::kShutDown;
    peers = all_peers_;
  }
  cv_.notify_all();
  // From here on no failure is broadcast: a worker that is destroyed
  // without shutdown() simply disappears, and its peers report it.
  const Failure stopped{self_.str(), self_.str() + " is shut down"};
  abort_->seal(stopped);
  acceptor_->stop();
  if (graceful) {
    for (const auto& p : peers) p->close_gracefully(kTeardownSendMs);
    const Deadline deadline = Deadline::after_ms(kTeardownWaitMs);
    for (const auto& p : peers) p->wait_stopped(deadline);
  }
  for (const auto& p : peers) p->shutdown();
  queue_->stop();
  // Our ranges may be freed once we are gone: the shard must have let go.
  revoke_loans(Deadline::after_ms(config_.timeout_ms));
  if (kv_) kv_->fail_all(stopped);
  if (sfb_) sfb_->fail_all(stopped);
  coord_->close();
  // Readers may still be inside a handler; they return promptly once the
  // connection is shut (every handler wait checks the sealed abort latch).
  const Deadline deadline = Deadline::after_ms(config_.timeout_ms);
  for (const auto& p : peers) p->wait_stopped(deadline);
}

Worker::Worker(const Config& config) : impl_(std::make_unique<Impl>(config)) {}
Worker::~Worker() = default;
void Worker::connect() { impl_->connect(); }
const Plan& Worker::plan(const std::vector<LayerSpec>& layers) { return impl_->plan(layers); }
void Worker::register_layer(uint32_t layer_id, float* grad, size_t num_floats) {
  impl_->register_layer(layer_id, grad, num_floats);
}
void Worker::register_sfb_layer(uint32_t layer_id, size_t reserved_floats,
                                size_t max_floats_per_worker) {
  impl_->register_sfb_layer(layer_id, reserved_floats, max_floats_per_worker);
}
Handle Worker::push_pull(uint32_t layer_id, int64_t iteration, uint32_t part) {
  return impl_->push_pull(layer_id, iteration, part);
}
Handle Worker::allgather(uint32_t layer_id, int64_t iteration, const float* send,
                         size_t num_floats) {
  return impl_->allgather(layer_id, iteration, send, num_floats);
}
FactorView Worker::factor(uint32_t layer_id, int64_t iteration, int rank) const {
  return impl_->factor(layer_id, iteration, rank);
}
void Worker::barrier(const std::string& name, int timeout_ms) { impl_->barrier(name, timeout_ms); }
void Worker::request_action(ActionKind kind, const std::string& reason) {
  impl_->request_action(kind, reason);
}
std::vector<ActionMessage> Worker::reach_boundary(int64_t iteration, int timeout_ms) {
  return impl_->reach_boundary(iteration, timeout_ms);
}
void Worker::abort(const std::string& reason) { impl_->abort(reason); }
void Worker::shutdown(int timeout_ms) { impl_->shutdown(timeout_ms); }
std::map<uint32_t, LayerTraffic> Worker::traffic() const { return impl_->traffic(); }
std::string Worker::failure() const { return impl_->failure(); }
int Worker::rank() const { return impl_->config().rank; }
int Worker::num_workers() const { return impl_->config().num_workers; }
int Worker::num_servers() const { return impl_->config().num_servers; }
int Worker::timeout_ms() const { return impl_->config().timeout_ms; }
std::string Worker::address() const { return impl_->address(); }
const AddressBook& Worker::address_book() const { return impl_->address_book(); }

}  // namespace poseidon
