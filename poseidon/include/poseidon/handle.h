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

#include <cstdint>
#include <memory>
#include <utility>

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

// The operation's state, shared by its handles and the comm threads
// (internal/op_state.h).
class OpState;

// What push_pull / allgather return. Cheap to copy; all copies share the op.
// Every call but valid() needs a valid handle (one that push_pull or
// allgather returned).
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<OpState> state) : state_(std::move(state)) {}
  // Blocks until the op completes (returns), fails (throws PeerFailure) or
  // timeout_ms passes (trips this node's abort — a bulk-synchronous round
  // that missed its deadline cannot be resumed — and throws TimeoutError
  // naming the pieces still missing). Thread-safe; several threads may wait.
  void wait(int timeout_ms) const;
  // Non-blocking; true when complete; throws if failed. Thread-safe.
  bool test() const;
  // When the op was queued, started sending, had every reply, completed (ns
  // on steady_clock; 0 = not yet). See Note [handle timing]. Non-blocking,
  // thread-safe.
  HandleTiming timing() const;
  uint32_t layer() const;
  int64_t iteration() const;
  bool valid() const { return static_cast<bool>(state_); }

 private:
  std::shared_ptr<OpState> state_;
};

}  // namespace poseidon
