#include "poseidon/internal/layer_ops.h"

#include <utility>

#include "poseidon/errors.h"

namespace poseidon {

void LayerOps::check_next(const std::string& me, const std::string& what, int64_t iteration) const {
  if (op_ && !op_->finished()) {
    throw ConfigError(me + ": " + what + " while iteration " + std::to_string(op_->iteration()) +
                      " is still in flight (wait for its handle first)");
  }
  if (any_ && iteration != last_iteration_ + 1) {
    throw ConfigError(me + ": " + what + " follows iteration " + std::to_string(last_iteration_) +
                      ": a layer's iterations must be consecutive");
  }
}

void LayerOps::start(std::shared_ptr<OpState> op, int64_t iteration) {
  op_ = std::move(op);
  any_ = true;
  last_iteration_ = iteration;
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
