#pragma once
// A KV-store server shard (reference §3). It owns the chunks the plan
// assigns to it (chunk g of the PS layers goes to shard g mod P2) and runs
// bulk-synchronous rounds per chunk: for iteration t it sums the P1 workers'
// pushes of chunk c and sends the sum back to each of them. It never
// divides: workers do (the mean is the caller's job).
//
// Note [round rules]: a chunk's rounds run at consecutive iterations (the
// first round may start anywhere, e.g. after a resume). A push is accepted
// only if its layer is a PS layer of the plan, its chunk is owned here, its
// size is the chunk's size, its iteration is the round in progress (or the
// next one), and its worker has not pushed in this round; otherwise it is
// rejected with an ERROR naming the key, the iteration and the size, before
// any payload byte is read or any round state touched.
//
// Note [no extra copies]: pushes are added into the sum buffer (zeroed by
// the round's first one) piece by piece as they are read, through a small
// per-connection bounce buffer that stays in cache, or straight from the
// writer's memory in-process; the replies are written from the sum buffer
// itself. Adding even the first push, rather than reading it straight into
// the buffer, costs one pass over the chunk but means no push ever waits
// for another one's bytes: a reader that parks stops reading its
// connection, and on a slow link that stalls the sender's every chunk
// (a 4 MiB chunk at 100 Mbit/s takes a third of a second to arrive).
//
// Note [in-place rounds]: a worker that runs this shard in its own process
// (it dialed local_address()) lends the shard its registered gradient ranges
// (colocated.h) and, instead of pushing a chunk's bytes, sends PUSH_IN_PLACE:
// "my chunk is ready in my range". From then on the round's total lives in
// that range: the other workers' pushes are added straight into it, the
// pushes that came before it (read into `sum` as above) are added into it once
// all of them are read, the replies to the other workers are written from it,
// and the colocated worker gets PULL_DONE, no bytes, once they are all
// written (so it does not touch the range while they are). Its own chunk is
// never copied, and neither is its reply — the two in-process copies per
// chunk the one-copy transport still cost. Every worker still receives the
// same bytes: the replies and the colocated worker's result are one buffer.
// The shard touches the range only within uses that the worker can revoke
// (colocated.h, Note [lending]).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "poseidon/abort_signal.h"
#include "poseidon/acceptor.h"
#include "poseidon/chunk_round.h"
#include "poseidon/colocated.h"
#include "poseidon/config.h"
#include "poseidon/coordinator_client.h"
#include "poseidon/peer.h"
#include "poseidon/plan.h"
#include "poseidon/send_queue.h"

namespace poseidon {

struct ServerStats {
  uint64_t rounds_completed = 0;
  uint64_t bytes_received = 0;  // push payloads
  uint64_t bytes_sent = 0;      // reply payloads
  uint64_t frames_rejected = 0;
  // Note [in-place rounds]: rounds answered from the colocated worker's
  // range, and those of them where pushes had gone to the sum buffer first.
  uint64_t rounds_in_place = 0;
  uint64_t sums_merged = 0;
  // Time connection readers spent parked instead of reading (a push of the
  // next iteration waiting for this round's sums to be sent): while parked,
  // that connection's TCP window closes and its sender stalls on every chunk.
  uint64_t reader_waits = 0;
  uint64_t reader_wait_ns = 0;
};

class KVServer {
 public:
  // Validates `config` (role must be server) and binds config.listen.
  // Non-blocking.
  explicit KVServer(const Config& config);
  ~KVServer();
  KVServer(const KVServer&) = delete;
  KVServer& operator=(const KVServer&) = delete;

  // Where workers dial this shard (port resolved).
  std::string address() const { return address_; }
  // Where a worker in this same process dials this shard (in-process
  // transport): pass it as that worker's Config::local_server.
  std::string local_address() const { return local_address_; }
  // Registers with the coordinator, waits for the plan, serves rounds.
  // Blocks until the coordinator's SHUTDOWN (returns) or an abort (throws
  // PeerFailure with the reason and the rounds left unfinished here). Once.
  void run();
  // Aborts with `reason`. Thread-safe; run() then throws.
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

}  // namespace poseidon
