#pragma once
// A whole cluster inside one test process: the coordinator and every server
// shard run on their own threads, each worker on its own thread. Works over
// TCP on 127.0.0.1 (ephemeral ports) and over the in-process transport.

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "poseidon/coordinator.h"
#include "poseidon/kv_server.h"
#include "poseidon/worker.h"

namespace ptest {

struct ClusterOptions {
  int workers = 1;
  int servers = 1;
  std::string transport = "tcp";
  size_t chunk_bytes = poseidon::kDefaultChunkBytes;
  int timeout_ms = 20000;
  int heartbeat_interval_ms = 200;
  int heartbeat_timeout_ms = 3000;
  int handshake_timeout_ms = 2000;
  int comm_threads = 2;
  poseidon::SchemeChoice scheme = poseidon::SchemeChoice::kAuto;
  poseidon::Compression compression = poseidon::Compression::kNone;
  int powersgd_rank = poseidon::kDefaultPowerSGDRank;
  int workers_per_machine = 1;
  std::string token = "test-token";
  // Optional per-worker changes (e.g. a wrong token for one rank).
  std::function<void(poseidon::Config&, int rank)> worker_config;
};

inline poseidon::Config make_config(const ClusterOptions& o, poseidon::Role role, int rank,
                                    const std::string& coordinator) {
  poseidon::Config c;
  c.role = role;
  c.rank = rank;
  c.num_workers = o.workers;
  c.num_servers = o.servers;
  c.coordinator = coordinator;
  c.token = o.token;
  c.transport = o.transport;
  c.listen = o.transport == "tcp" ? "127.0.0.1:0" : "inproc://";
  c.chunk_bytes = o.chunk_bytes;
  c.timeout_ms = o.timeout_ms;
  c.heartbeat_interval_ms = o.heartbeat_interval_ms;
  c.heartbeat_timeout_ms = o.heartbeat_timeout_ms;
  c.handshake_timeout_ms = o.handshake_timeout_ms;
  c.comm_threads = o.comm_threads;
  c.scheme = o.scheme;
  c.compression = o.compression;
  c.powersgd_rank = o.powersgd_rank;
  c.workers_per_machine = o.workers_per_machine;
  return c;
}

class LocalCluster {
 public:
  explicit LocalCluster(const ClusterOptions& o) : opts_(o) {
    poseidon::Config cc = make_config(o, poseidon::Role::kCoordinator, 0,
                                      o.transport == "tcp" ? "127.0.0.1:0" : "inproc://");
    coordinator_ = std::make_unique<poseidon::Coordinator>(cc);
    address_ = coordinator_->address();
    threads_.emplace_back([this] { capture(&coordinator_error_, [&] { coordinator_->run(); }); });
    server_errors_.resize(static_cast<size_t>(o.servers));
    for (int s = 0; s < o.servers; ++s) {
      servers_.push_back(std::make_unique<poseidon::KVServer>(
          make_config(o, poseidon::Role::kServer, s, address_)));
    }
    for (int s = 0; s < o.servers; ++s) {
      threads_.emplace_back([this, s] {
        capture(&server_errors_[static_cast<size_t>(s)], [&] { servers_[s]->run(); });
      });
    }
  }

  ~LocalCluster() { join(); }

  // Builds, connects and runs every worker on its own thread; fn does the
  // rest (plan, register, iterate, shutdown). Returns each worker's error
  // ("" if none).
  std::vector<std::string> run_workers(const std::function<void(poseidon::Worker&, int)>& fn) {
    std::vector<std::string> errors(static_cast<size_t>(opts_.workers));
    std::vector<std::thread> ts;
    for (int r = 0; r < opts_.workers; ++r) {
      ts.emplace_back([&, r] {
        capture(&errors[static_cast<size_t>(r)], [&] {
          poseidon::Config c = make_config(opts_, poseidon::Role::kWorker, r, address_);
          if (opts_.worker_config) opts_.worker_config(c, r);
          poseidon::Worker w(c);
          w.connect();
          fn(w, r);
        });
      });
    }
    for (auto& t : ts) t.join();
    return errors;
  }

  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  const std::string& coordinator_address() const { return address_; }
  poseidon::Coordinator& coordinator() { return *coordinator_; }
  poseidon::KVServer& server(int s) { return *servers_[static_cast<size_t>(s)]; }
  // Valid after join().
  const std::string& coordinator_error() const { return coordinator_error_; }
  const std::string& server_error(int s) const { return server_errors_[static_cast<size_t>(s)]; }

 private:
  template <typename Fn>
  static void capture(std::string* error, Fn fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      *error = e.what();
      if (error->empty()) *error = "(empty exception message)";
    }
  }

  ClusterOptions opts_;
  std::unique_ptr<poseidon::Coordinator> coordinator_;
  std::string address_;
  std::vector<std::unique_ptr<poseidon::KVServer>> servers_;
  std::vector<std::thread> threads_;
  std::string coordinator_error_;
  std::vector<std::string> server_errors_;
};

// An FC layer spec "fc<id>": an m×n weight, k rows per worker, `rest` floats
// past the weight (a bias); the cost model chooses its scheme.
inline poseidon::LayerSpec fc_layer(uint32_t id, uint64_t m, uint64_t n, uint64_t k,
                                    uint64_t rest = 0) {
  poseidon::LayerSpec s;
  s.layer_id = id;
  s.name = "fc" + std::to_string(id);
  s.kind = poseidon::LayerKind::kFullyConnected;
  s.m = m;
  s.n = n;
  s.k = k;
  s.num_floats = m * n + rest;
  return s;
}

// A PS-only layer spec of n floats.
inline poseidon::LayerSpec ps_layer(uint32_t id, uint64_t n) {
  poseidon::LayerSpec s;
  s.layer_id = id;
  s.name = "layer" + std::to_string(id);
  s.kind = poseidon::LayerKind::kOther;
  s.m = n;
  s.n = 1;
  s.k = 1;
  s.num_floats = n;
  s.force = poseidon::SchemeChoice::kPS;
  return s;
}

// An SFB-forced InnerProduct spec: 64 outputs, 32 inputs, batch 8.
inline poseidon::LayerSpec sfb_layer(uint32_t id) {
  poseidon::LayerSpec s;
  s.layer_id = id;
  s.name = "fc" + std::to_string(id);
  s.kind = poseidon::LayerKind::kFullyConnected;
  s.m = 64;
  s.n = 32;
  s.k = 8;
  s.num_floats = 64 * 32;
  s.force = poseidon::SchemeChoice::kSFB;
  return s;
}

}  // namespace ptest
