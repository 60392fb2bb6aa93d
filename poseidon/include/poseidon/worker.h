#pragma once
// A worker process's entry point to the communication core. The order of
// calls is fixed:
//
//   Worker w(config);                  // binds the listen address
//   w.connect();                       // rendezvous, address book, all links
//   const Plan& p = w.plan(specs);     // every worker declares the same layers;
//                                      // the coordinator decides PS/SFB per layer
//   for each layer in p.layers:        // once, at setup
//     PS, BF16, PowerSGD: w.register_layer(id, buffer, layer.wire_floats);
//     SFB:                w.register_sfb_layer(id, reserved_floats, max_floats);
//   each iteration t, as layers finish backward (any order, any threads):
//     Handle h = w.push_pull(id, t);            // range := sum over workers
//     PowerSGD: push_pull(id, t, 0), wait, then push_pull(id, t, 1)
//     Handle g = w.allgather(id, t, f, n);      // then w.factor(id, t, rank)
//     h.wait(timeout_ms);
//   w.shutdown(timeout_ms);            // waits for every worker, closes cleanly
//
// Every blocking call has a timeout. When any node dies or fails, every
// pending and later call throws PeerFailure naming the node at the origin,
// and this worker's own layer and iteration.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "poseidon/config.h"
#include "poseidon/errors.h"
#include "poseidon/handle.h"
#include "poseidon/plan.h"
#include "poseidon/types.h"

namespace poseidon {

class Worker {
 public:
  // Validates `config` (role must be worker), binds config.listen for the
  // connections of higher-ranked workers, starts the comm threads.
  // Non-blocking.
  explicit Worker(const Config& config);
  // Without shutdown() first, the other nodes see this worker die.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Registers with the coordinator, receives the address book, and opens
  // one persistent connection to every server shard and to every other
  // worker (lower ranks are dialed, higher ranks dial us). Blocks up to
  // config.timeout_ms. Call once. Throws TimeoutError / PeerFailure /
  // ProtocolError (e.g. wrong token).
  void connect();
  // Declares this worker's learnable layers and blocks (up to
  // config.timeout_ms) until the coordinator returns the plan, identical on
  // every worker. Call once, after connect(). The reference stays valid.
  const Plan& plan(const std::vector<LayerSpec>& layers);

  // A layer through the shards (PS, BF16, PowerSGD): `grad` is a contiguous
  // float32 buffer of num_floats, which must equal the plan's wire_floats
  // (PS, BF16: the declared num_floats; PowerSGD: [P | rest] then [Q], plan.h
  // Note [plan parts]), owned by the caller and valid for the worker's
  // lifetime. After each push_pull completes, the part it pushed holds the
  // elementwise SUM over all workers (divide by num_workers() for the mean);
  // BF16: bf16(fp32 sum of the bf16-rounded inputs), the same bits on every
  // worker. Setup only; thread-safe.
  void register_layer(uint32_t layer_id, float* grad, size_t num_floats);
  // SFB layer: reserves receive buffers for factors of reserved_floats from
  // every worker, grown when a step brings more, up to max_floats_per_worker
  // (0: reserved_floats). Setup only; thread-safe.
  void register_sfb_layer(uint32_t layer_id, size_t reserved_floats,
                          size_t max_floats_per_worker = 0);

  // Asynchronous: queues the chunks of the layer's part `part` (lower layer
  // ids go first) and returns at once. Do not touch the range until the
  // handle completes. A layer's operations may not overlap, and their
  // (iteration, part) must be consecutive: (t, 0), (t + 1, 0), ... for PS
  // and BF16; (t, 0), (t, 1), (t + 1, 0), ... for PowerSGD — anything else
  // is a ConfigError naming the layer, iteration and part. Thread-safe.
  Handle push_pull(uint32_t layer_id, int64_t iteration, uint32_t part = 0);
  // Asynchronous all-gather of a factor buffer of num_floats (<= the
  // registered max) floats, peer to peer. `send` is copied before return.
  // Thread-safe.
  Handle allgather(uint32_t layer_id, int64_t iteration, const float* send, size_t num_floats);
  // Worker `rank`'s factor from a completed allgather: a view into an
  // internal buffer, valid until this worker calls allgather(layer_id,
  // iteration + 1) (internal/sfb.h, Note [factor slots]). Non-blocking,
  // thread-safe.
  FactorView factor(uint32_t layer_id, int64_t iteration, int rank) const;

  // Blocks until every worker entered the barrier (same names, same order
  // on all workers) or timeout_ms. Thread-safe.
  void barrier(const std::string& name, int timeout_ms);
  // Asks the coordinator for an action (snapshot or stop) that every worker
  // takes at the same iteration (internal/action_rounds.h, Note [agreed
  // actions]).
  // Blocks only for the send. Thread-safe.
  void request_action(ActionKind kind, const std::string& reason);
  // The training loop, at every iteration boundary (`iteration` = updates
  // completed, also before the first iteration): the decisions of action
  // rounds that arrived since the last call, oldest first; each says where
  // every worker acts (iteration >= the boundary voted + 1), or -1: nowhere.
  // Blocks (up to timeout_ms) only when this worker voted in an undecided
  // round at an earlier boundary. Call from one thread.
  std::vector<ActionMessage> reach_boundary(int64_t iteration, int timeout_ms);
  // Aborts the whole job with `reason` (e.g. an exception in training):
  // every node's pending and later calls fail with it. Thread-safe.
  void abort(const std::string& reason);
  // Waits (up to timeout_ms) until every worker called shutdown, then closes
  // every connection cleanly. Idempotent. Throws PeerFailure if the job was
  // aborted meanwhile.
  void shutdown(int timeout_ms);

  // Payload bytes sent and received so far by layer (every scheme).
  // Thread-safe.
  std::map<uint32_t, LayerTraffic> traffic() const;
  // Why the job ended (the first failure, naming the node at its origin; after
  // shutdown, that this worker stopped), or "" while it runs. Non-blocking,
  // thread-safe: what a wait outside the core (the Python side's local
  // stage) polls so that it never outlives the job.
  std::string failure() const;

  int rank() const;
  int num_workers() const;
  int num_servers() const;
  int timeout_ms() const;
  std::string address() const;
  // After connect(): listen addresses of all workers and servers by rank.
  const AddressBook& address_book() const;

 private:
  class Impl;  // worker.cc
  std::unique_ptr<Impl> impl_;
};

}  // namespace poseidon
