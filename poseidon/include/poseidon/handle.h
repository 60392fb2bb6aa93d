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
//
// Note [handle timing]: an operation records when it entered each of four
// consecutive phases, in nanoseconds on std::chrono::steady_clock — on Linux
// CLOCK_MONOTONIC, the clock of Python's time.perf_counter_ns() and
// time.monotonic_ns(), so the values line up with a Python trace:
//   queued_ns        push_pull / allgather was called (the op was created);
//   first_send_ns    the first of its frames left the priority queue: a comm
//                    thread is about to hand its first byte to the transport;
//   last_receive_ns  the last reply (PS) or factor (SFB) it waits for was in;
//   done_ns          it completed (every piece in and every frame written).
// A phase not reached yet reads 0 (done_ns stays 0 for a failed op), and
// queued_ns <= first_send_ns <= last_receive_ns <= done_ns whenever they are
// set. Phases are entered in that order by definition: an op with nothing to
// send (allgather with one worker) enters "sending" when queued, and an SFB
// op whose peers' factors were all in before its own first frame left (a
// peer one iteration ahead) finishes receiving when it starts sending. A PS
// op needs neither rule: a shard answers only after reading our push.

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

// Now on std::chrono::steady_clock, in nanoseconds (see Note [handle timing]).
// Non-blocking, thread-safe.
int64_t steady_clock_ns();

// See Note [handle timing]. All in ns on steady_clock; 0: phase not reached.
struct HandleTiming {
  int64_t queued_ns = 0;
  int64_t first_send_ns = 0;
  int64_t last_receive_ns = 0;
  int64_t done_ns = 0;
};

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

// What push_pull / allgather return. Cheap to copy; all copies share the op.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  // See OpState::wait. Blocks up to timeout_ms. Thread-safe.
  void wait(int timeout_ms) const { state_->wait(timeout_ms); }
  // Non-blocking; true when complete; throws if failed. Thread-safe.
  bool test() const { return state_->test(); }
  // When the op was queued, started sending, had every reply, completed (ns
  // on steady_clock; 0 = not yet). See Note [handle timing]. Non-blocking,
  // thread-safe.
  HandleTiming timing() const { return state_->timing(); }
  uint32_t layer() const { return state_->layer(); }
  int64_t iteration() const { return state_->iteration(); }
  bool valid() const { return static_cast<bool>(state_); }

 private:
  std::shared_ptr<OpState> state_;
};

}  // namespace poseidon
