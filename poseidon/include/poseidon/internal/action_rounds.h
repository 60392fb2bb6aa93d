#pragma once
// Note [agreed actions]. A stop or snapshot that one worker is asked for (a
// signal, a launcher that goes away) must happen on every worker at the same
// iteration: a worker that stops alone leaves the others waiting for its
// gradients, and rank 0's snapshot is valid for all only when everyone has
// applied the same updates. The coordinator runs rounds:
//
//   REQUEST  (any worker)  ->  PROPOSE (round r, to every worker)
//   each worker's comm core answers at once: VOTE (r, b), b = the last
//     iteration boundary its training loop reached (updates completed), and
//     from then on that loop does not pass boundary b + 1 before the decision
//   all P1 votes in        ->  DECIDE (r, T = the largest vote + 1)
//   every worker goes on to boundary T and acts there.
//
// No worker can be past T when it learns T, since it did not pass b + 1 <= T
// undecided. The votes are answered by the comm core's reader thread, not by
// the training loop: a worker may be blocked in its forward pass waiting for
// the gradients of a worker that is one iteration behind, and if votes waited
// for the loops, the two would wait for each other. A worker whose loop has
// not reached a boundary yet (still building its nets) votes when it reaches
// its first. A worker that has finished training (its SHUTDOWN) cannot vote:
// the round is then decided with T = -1 ("nobody acts": the job is ending
// anyway, with its final snapshot), and later requests are ignored. Requests
// while a round is open join it, or (a stop while a snapshot round is open)
// open the next one; a request from a worker that has not yet reached the
// boundary of a decided action that covers it (the same signal reaching every
// worker, a little later here and there) is that action already.
//
// ActionRounds is that state machine and nothing else (no I/O, not
// thread-safe: the coordinator calls it under its lock); each call returns the
// messages to broadcast to every worker, in order.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "poseidon/internal/frame.h"
#include "poseidon/internal/messages.h"

namespace poseidon {

class ActionRounds {
 public:
  using Broadcast = std::vector<std::pair<FrameType, ActionMessage>>;

  explicit ActionRounds(int num_workers) : num_workers_(num_workers) {}

  // Worker `rank`, at boundary `iteration`, asks for `kind` (snapshot or
  // stop) because of `reason`.
  Broadcast request(int rank, ActionKind kind, int64_t iteration, const std::string& reason);
  // Worker `rank` reached boundary `iteration` in round `round`. A vote for a round that
  // is already decided is ignored (it crossed a DECIDE on the wire); a second
  // vote in one round, or a vote for a round never proposed, throws
  // ProtocolError.
  Broadcast vote(int rank, uint64_t round, int64_t iteration);
  // Worker `rank` finished training (asked to shut down).
  Broadcast worker_finished(int rank);

  bool open() const { return open_; }
  uint64_t round() const { return round_; }

 private:
  Broadcast open_round(ActionKind kind, const std::string& reason);
  Broadcast decide(int64_t iteration);

  const int num_workers_;
  uint64_t round_ = 0;  // the latest round proposed
  bool open_ = false;   // round_ awaits votes
  ActionKind kind_ = ActionKind::kNone;
  std::string reason_;
  std::map<int, int64_t> votes_;
  ActionKind decided_kind_ = ActionKind::kNone;  // the last decision that acts
  int64_t decided_at_ = -1;
  ActionKind queued_kind_ = ActionKind::kNone;  // asked while round_ was open
  std::string queued_reason_;
  bool finishing_ = false;  // a worker has finished: no more rounds
};

}  // namespace poseidon
