#include "poseidon/internal/layer_ops.h"

#include <utility>

#include "poseidon/errors.h"

namespace poseidon {

void LayerOps::check_next(const std::string& me, const std::string& what, int64_t iteration,
                          uint32_t part, uint32_t num_parts) const {
  if (op_ && !op_->finished()) {
    throw ConfigError(me + ": " + what + " while iteration " + std::to_string(op_->iteration()) +
                      " is still in flight (wait for its handle first)");
  }
  if (part >= num_parts) {
    throw ConfigError(me + ": " + what + ": no part " + std::to_string(part) + " (the layer has " +
                      std::to_string(num_parts) + (num_parts == 1 ? " part)" : " parts)"));
  }
  if (!any_) {
    if (part != 0) {
      throw ConfigError(me + ": " + what + ": a layer's first operation is of part 0, not part " +
                        std::to_string(part));
    }
    return;
  }
  // Note [plan parts]: (t, 0), (t, 1), ..., (t + 1, 0).
  const bool same = last_part_ + 1 < num_parts;
  const int64_t want_iteration = same ? last_iteration_ : last_iteration_ + 1;
  const uint32_t want_part = same ? last_part_ + 1 : 0;
  if (iteration == want_iteration && part == want_part) return;
  if (num_parts == 1) {
    throw ConfigError(me + ": " + what + " follows iteration " + std::to_string(last_iteration_) +
                      ": a layer's iterations must be consecutive");
  }
  throw ConfigError(me + ": " + what + " follows iteration " + std::to_string(last_iteration_) +
                    " part " + std::to_string(last_part_) + ": expected iteration " +
                    std::to_string(want_iteration) + " part " + std::to_string(want_part) +
                    " (a layer's parts go 0.." + std::to_string(num_parts - 1) +
                    " within each iteration, and its iterations are consecutive)");
}

void LayerOps::start(std::shared_ptr<OpState> op, int64_t iteration, uint32_t part) {
  op_ = std::move(op);
  any_ = true;
  last_iteration_ = iteration;
  last_part_ = part;
}

void report_send(SendJob& job, const std::shared_ptr<OpState>& op, LayerCounters* counters,
                 size_t counted_bytes, std::shared_ptr<AbortSignal> abort, const std::string& what,
                 const std::string& piece) {
  const std::string to = job.peer->remote().str();
  job.on_start = [raw = op.get()] { raw->send_started(); };  // `done` keeps op alive
  job.done = [op, counters, abort = std::move(abort), to, what, piece,
              counted_bytes](const SendOutcome& out) {
    if (!out.ok()) {
      if (!out.connection_lost) {
        abort->trip(
            Failure{to, what + ": sending " + piece + " to " + to + " failed: " + out.error});
      }
      return;
    }
    counters->bytes_sent += counted_bytes;
    op->send_done();
  };
}

}  // namespace poseidon
