#pragma once
// What KVWorker (push_pull) and SFBroadcaster (allgather) share for each of
// their layers: one operation per iteration, at most one in flight, the
// iterations consecutive; and how a queued frame of that operation reports
// its send. Internal to Worker.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "poseidon/internal/abort_signal.h"
#include "poseidon/internal/counters.h"
#include "poseidon/internal/op_state.h"
#include "poseidon/internal/send_queue.h"

namespace poseidon {

// A layer's operation sequence. Not thread-safe: the owner guards it with its
// layer's mutex.
class LayerOps {
 public:
  // Throws ConfigError (messages start with `me`: `what`) unless an operation
  // of (`iteration`, `part`) may start now: none still in flight, `part` one
  // of the layer's `num_parts`, and (iteration, part) the one after the last
  // started — the next part of the same iteration while parts remain, else
  // part 0 of the next iteration (plan.h, Note [plan parts]). The first
  // operation may be of any iteration, but of part 0.
  void check_next(const std::string& me, const std::string& what, int64_t iteration,
                  uint32_t part = 0, uint32_t num_parts = 1) const;
  // Records `op` (of `iteration` and `part`) as the layer's current operation.
  void start(std::shared_ptr<OpState> op, int64_t iteration, uint32_t part = 0);
  // The current operation (null before the first). Do not keep it past the
  // lock without copying the shared_ptr.
  const std::shared_ptr<OpState>& op() const { return op_; }
  // Whether any operation started, and the iteration of the last one.
  bool started() const { return any_; }
  int64_t last_iteration() const { return last_iteration_; }
  uint32_t last_part() const { return last_part_; }

 private:
  bool any_ = false;
  int64_t last_iteration_ = 0;
  uint32_t last_part_ = 0;
  std::shared_ptr<OpState> op_;
};

// Sets SendJob::on_start and done for one frame of `op` to job.peer: a finished
// send adds `counted_bytes` to the layer's counters and tells the op; a failed
// one aborts the job with "`what`: sending `piece` to <peer> failed: ..."
// unless the connection was lost (its reader reports that, with the peer's
// last words; see SendOutcome). `done` keeps the op alive until the frame is
// gone.
void report_send(SendJob& job, const std::shared_ptr<OpState>& op, LayerCounters* counters,
                 size_t counted_bytes, std::shared_ptr<AbortSignal> abort, const std::string& what,
                 const std::string& piece);

}  // namespace poseidon
