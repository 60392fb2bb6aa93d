#pragma once
// The coordinator (reference §3): rendezvous of P1 workers and P2 servers,
// the address book, the per-layer plan (BestScheme from the workers' layer
// specs), barriers, heartbeats, and the abort broadcast. It carries no
// training data.
//
// Lifecycle: every node dials it and handshakes (that registers the node);
// once all P1 + P2 nodes are in, it sends each the address book. Once every
// worker declared its layers (all identical), it sends every node the same
// plan. When every worker asked to shut down, it tells all nodes and run()
// returns. When any node dies (EOF, reset, heartbeats missing for
// heartbeat_timeout_ms) or reports a failure, it sends every node ABORT with
// the reason and run() throws. A stop or snapshot that a worker asks for is
// agreed in rounds so that every worker takes it at the same iteration
// (action_rounds.h, Note [agreed actions]).

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "poseidon/acceptor.h"
#include "poseidon/action_rounds.h"
#include "poseidon/config.h"
#include "poseidon/messages.h"
#include "poseidon/peer.h"
#include "poseidon/plan.h"
#include "poseidon/transport.h"

namespace poseidon {

class Coordinator {
 public:
  // Validates `config` and binds config.coordinator (TCP port 0 or
  // "inproc://" pick a free address; see address()). Non-blocking.
  explicit Coordinator(const Config& config);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // The address nodes must dial (port resolved).
  std::string address() const { return address_; }
  // Blocks until every worker has shut down (returns) or the job aborts
  // (throws PeerFailure carrying the reason). Call once.
  void run();
  // Aborts the job with `reason` (e.g. from a signal handler thread).
  // Thread-safe; run() then broadcasts ABORT and throws.
  void abort(const std::string& reason);
  // The plan once built (empty before). Thread-safe.
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
  ActionRounds actions_;  // agreed stops and snapshots (action_rounds.h)
  std::optional<Failure> failure_;
  std::optional<Failure> pending_death_;  // seen here, waiting for a richer report
  int64_t pending_death_deadline_ms_ = 0;
  bool ran_ = false;
};

}  // namespace poseidon
