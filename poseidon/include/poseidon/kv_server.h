#pragma once
// A KV-store server shard (docs/paper.md §3). It owns the chunks the plan
// assigns to it (chunk g of the layers through the shards — PS, BF16,
// PowerSGD — goes to shard g mod P2) and runs bulk-synchronous rounds per
// chunk: for iteration t it sums the P1 workers' pushes of chunk c and sends
// the sum back to each of them — with several workers per machine, the Pm
// machines' leaders' pushes, each already its machine's sum (cost_model.h,
// Note [local aggregation]); a push from another worker is rejected. It
// never divides: workers do (the mean is the caller's job). A PowerSGD
// layer's chunks are just chunks (of part 0 or part 1, plan.h Note [plan
// parts]): each has its own rounds, one per iteration. A BF16 layer's pushes
// and replies are bfloat16 (PUSH16, PULL_REPLY16, 2 bytes per float); the
// shard widens each push as it adds it into an fp32 sum, and replies with
// bf16 of the finished fp32 sum (internal/bf16.h, Note [bf16 rounding]).
//
// Note [round rules]: a chunk's rounds run at consecutive iterations (the
// first round may start anywhere, e.g. after a resume). A push is accepted
// only if its layer goes through the shards in the plan, its chunk is owned
// here, its frame type is the layer's (PUSH16 for BF16, else PUSH), its size
// is the chunk's size (at 2 or 4 bytes per float), its iteration is the round in progress (or the
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
// (internal/colocated.h) and, instead of pushing a chunk's bytes, sends PUSH_IN_PLACE:
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
// (internal/colocated.h, Note [lending]).
//
// BF16 in place gives the numbers the wire gives: the worker rounds its own
// chunk to bf16 precision in its range before it announces it, the others'
// bf16 pushes are widened and added in fp32 as usual, and once all are in
// the shard rounds the total in the range to bf16 precision, keeping its bf16
// bytes for the replies (written from the shard's own copy, so they need no
// use of the range). Every worker then holds bf16(fp32 sum of the
// bf16-rounded inputs), bit for bit the same.

#include <cstdint>
#include <memory>
#include <string>

#include "poseidon/config.h"
#include "poseidon/errors.h"

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
  std::string address() const;
  // Where a worker in this same process dials this shard (in-process
  // transport): pass it as that worker's Config::local_server.
  std::string local_address() const;
  // Registers with the coordinator, waits for the plan, serves rounds.
  // Blocks until the coordinator's SHUTDOWN (returns) or an abort (throws
  // PeerFailure with the reason and the rounds left unfinished here). Once.
  void run();
  // Aborts with `reason`. Thread-safe; run() then throws.
  void abort(const std::string& reason);
  ServerStats stats() const;

 private:
  class Impl;  // kv_server.cc
  std::unique_ptr<Impl> impl_;
};

}  // namespace poseidon
