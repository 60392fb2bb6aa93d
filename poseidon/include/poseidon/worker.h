#pragma once
// A worker process's entry point to the communication core. The order of
// calls is fixed:
//
//   Worker w(config);                  // binds the listen address
//   w.connect();                       // rendezvous, address book, all links
//   const Plan& p = w.plan(specs);     // every worker declares the same layers;
//                                      // the coordinator decides PS/SFB per layer
//   for each layer in p.layers:        // once, at setup
//     PS:  w.register_layer(id, grad_range, num_floats);
//     SFB: w.register_sfb_layer(id, max_floats_per_worker);
//   each iteration t, as layers finish backward (any order, any threads):
//     Handle h = w.push_pull(id, t);            // range := sum over workers
//     Handle g = w.allgather(id, t, f, n);      // then w.factor(id, t, rank)
//     h.wait(timeout_ms);
//   w.shutdown(timeout_ms);            // waits for every worker, closes cleanly
//
// Every blocking call has a timeout. When any node dies or fails, every
// pending and later call throws PeerFailure naming the node at the origin,
// and this worker's own layer and iteration.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "poseidon/abort_signal.h"
#include "poseidon/acceptor.h"
#include "poseidon/config.h"
#include "poseidon/coordinator_client.h"
#include "poseidon/counters.h"
#include "poseidon/data_plane.h"
#include "poseidon/handle.h"
#include "poseidon/kv_worker.h"
#include "poseidon/plan.h"
#include "poseidon/send_queue.h"
#include "poseidon/sfb.h"

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

  // PS layer: `grad` is the layer's contiguous gradient range of num_floats
  // float32 (must equal the declared num_floats), owned by the caller and
  // valid for the worker's lifetime. After each push_pull completes it holds
  // the elementwise SUM over all workers (divide by num_workers() for the
  // mean). Setup only; thread-safe.
  void register_layer(uint32_t layer_id, float* grad, size_t num_floats);
  // SFB layer: reserves receive buffers for factors of up to
  // max_floats_per_worker floats from every worker. Setup only; thread-safe.
  void register_sfb_layer(uint32_t layer_id, size_t max_floats_per_worker);

  // Asynchronous: queues the layer's chunks (lower layer ids go first) and
  // returns at once. Do not touch the range until the handle completes.
  // A layer's iterations must be consecutive and may not overlap.
  // Thread-safe.
  Handle push_pull(uint32_t layer_id, int64_t iteration);
  // Asynchronous all-gather of a factor buffer of num_floats (<= the
  // registered max) floats, peer to peer. `send` is copied before return.
  // Thread-safe.
  Handle allgather(uint32_t layer_id, int64_t iteration, const float* send, size_t num_floats);
  // Worker `rank`'s factor from a completed allgather: a view into an
  // internal buffer, valid until this worker calls allgather(layer_id,
  // iteration + 1) (see sfb.h). Non-blocking, thread-safe.
  FactorView factor(uint32_t layer_id, int64_t iteration, int rank) const;

  // Blocks until every worker entered the barrier (same names, same order
  // on all workers) or timeout_ms. Thread-safe.
  void barrier(const std::string& name, int timeout_ms);
  // Asks the coordinator for an action (snapshot or stop) that every worker
  // takes at the same iteration (action_rounds.h, Note [agreed actions]).
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
  std::map<uint32_t, LayerTraffic> traffic() const { return counters_.snapshot(); }

  int rank() const { return config_.rank; }
  int num_workers() const { return config_.num_workers; }
  int num_servers() const { return config_.num_servers; }
  int timeout_ms() const { return config_.timeout_ms; }
  std::string address() const { return self_.address; }
  // After connect(): listen addresses of all workers and servers by rank.
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
  // uses in progress until `deadline` (colocated.h, Note [lending]).
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

}  // namespace poseidon
