#pragma once
// The coordinator (docs/paper.md §3): rendezvous of P1 workers and P2 servers,
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
// (internal/action_rounds.h, Note [agreed actions]).

#include <memory>
#include <optional>
#include <string>

#include "poseidon/config.h"
#include "poseidon/errors.h"
#include "poseidon/plan.h"

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
  std::string address() const;
  // Blocks until every worker has shut down (returns) or the job aborts
  // (throws PeerFailure carrying the reason). Call once.
  void run();
  // Aborts the job with `reason` (e.g. from a signal handler thread).
  // Thread-safe; run() then broadcasts ABORT and throws.
  void abort(const std::string& reason);
  // The plan once built (empty before). Thread-safe.
  std::optional<Plan> plan() const;

 private:
  class Impl;  // coordinator.cc
  std::unique_ptr<Impl> impl_;
};

}  // namespace poseidon
