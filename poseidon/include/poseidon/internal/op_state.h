#pragma once
// The state of one asynchronous operation (push_pull, allgather) that its
// Handles (handle.h) and the comm threads share: which pieces arrived, which
// frames are still to write, the failure if any, and the phase times of Note
// [handle timing].

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "poseidon/errors.h"
#include "poseidon/handle.h"
#include "poseidon/internal/abort_signal.h"

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
  // A comm thread is about to write one of the op's frames (the first call
  // sets first_send_ns). Thread-safe, never blocks for long.
  void send_started();
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
  // Non-blocking (a short internal lock), thread-safe.
  HandleTiming timing() const;

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
  // Raw phase times, ns on steady_clock; timing() derives the reported ones.
  const int64_t queued_ns_;
  int64_t first_send_ns_ = 0;
  int64_t all_in_ns_ = 0;  // when pieces_left_ reached 0
  int64_t done_ns_ = 0;
};

}  // namespace poseidon
