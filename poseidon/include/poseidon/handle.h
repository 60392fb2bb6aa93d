#pragma once
// Handles to asynchronous operations (push_pull, allgather).
//
// An operation is made of pieces (PS: one per chunk, each answered by the
// shard that owns it; SFB: one per peer worker, its whole factor) plus the
// frames this node must write. It completes when every piece arrived and
// every frame was written — only then may the caller touch the buffers again.
// A failed operation carries a PeerFailure naming the origin, layer and
// iteration; a wait that times out names the pieces still missing and the
// peers that owe them.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "poseidon/abort_signal.h"
#include "poseidon/errors.h"

namespace poseidon {

class OpState {
 public:
  // `what`: "push_pull of layer 3 (fc6) iteration 7". `sources[i]` names the
  // peer that owes piece i. `sends`: frames to write. `abort`: tripped when
  // a wait times out (a bulk-synchronous round that missed its deadline
  // cannot be resumed). `node`: this node, for the failure record.
  // `piece_noun` labels pieces in messages ("chunks", "factors of rank").
  OpState(std::string what, uint32_t layer, int64_t iteration, std::string piece_noun,
          std::vector<std::string> sources, uint64_t sends, std::weak_ptr<AbortSignal> abort,
          std::string node);

  // Marks piece i arrived. Returns false if it had already arrived.
  bool piece_done(size_t i);
  bool is_piece_done(size_t i) const;
  void send_done();
  // Fails the op (first failure wins; no-op once complete).
  void fail(const Failure& failure);

  bool complete() const;  // done without error
  bool finished() const;  // done or failed
  // Non-blocking: true when complete; throws the failure if failed.
  bool test() const;
  // Blocks until complete (returns), failed (throws PeerFailure) or
  // timeout_ms passes (trips the node's abort and throws TimeoutError).
  // Thread-safe; several threads may wait.
  void wait(int timeout_ms);

  uint32_t layer() const { return layer_; }
  int64_t iteration() const { return iteration_; }
  const std::string& what() const { return what_; }
  // "chunks 2,5 from server 1 (...); 1 frame(s) still to write".
  std::string missing() const;

 private:
  void maybe_complete_locked();
  void throw_failure_locked() const;

  const std::string what_;
  const uint32_t layer_;
  const int64_t iteration_;
  const std::string piece_noun_;
  const std::vector<std::string> sources_;
  const std::weak_ptr<AbortSignal> abort_;
  const std::string node_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint8_t> arrived_;
  size_t pieces_left_;
  uint64_t sends_left_;
  bool complete_ = false;
  bool failed_ = false;
  Failure failure_;
};

// What push_pull / allgather return. Cheap to copy; all copies share the op.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  // See OpState::wait. Blocks up to timeout_ms. Thread-safe.
  void wait(int timeout_ms) const { state_->wait(timeout_ms); }
  // Non-blocking; true when complete; throws if failed. Thread-safe.
  bool test() const { return state_->test(); }
  uint32_t layer() const { return state_->layer(); }
  int64_t iteration() const { return state_->iteration(); }
  bool valid() const { return static_cast<bool>(state_); }

 private:
  std::shared_ptr<OpState> state_;
};

}  // namespace poseidon
