#include "poseidon/internal/action_rounds.h"

#include <algorithm>

#include "poseidon/errors.h"

namespace poseidon {

ActionRounds::Broadcast ActionRounds::request(int rank, ActionKind kind, int64_t iteration,
                                              const std::string& reason) {
  if (kind == ActionKind::kNone) {
    throw ProtocolError("worker " + std::to_string(rank) + " requested no action");
  }
  if (finishing_) return {};
  if (!open_ && kind <= decided_kind_ && iteration < decided_at_) return {};  // covered
  if (!open_) return open_round(kind, reason);
  // The open round already does as much (a stop includes the snapshot).
  if (kind <= kind_ || kind <= queued_kind_) return {};
  queued_kind_ = kind;
  queued_reason_ = reason;
  return {};
}

ActionRounds::Broadcast ActionRounds::vote(int rank, uint64_t round, int64_t iteration) {
  const std::string who = "worker " + std::to_string(rank);
  if (round > round_ || round == 0) {
    throw ProtocolError(who + " voted in action round " + std::to_string(round) +
                        ", which was never proposed (latest: " + std::to_string(round_) + ")");
  }
  if (round < round_ || !open_) return {};  // decided already
  if (!votes_.emplace(rank, iteration).second) {
    throw ProtocolError(who + " voted twice in action round " + std::to_string(round));
  }
  if (static_cast<int>(votes_.size()) < num_workers_) return {};
  int64_t latest = -1;
  for (const auto& [r, it] : votes_) latest = std::max(latest, it);
  return decide(latest + 1);
}

ActionRounds::Broadcast ActionRounds::worker_finished(int /*rank*/) {
  finishing_ = true;
  queued_kind_ = ActionKind::kNone;
  if (!open_) return {};
  return decide(-1);
}

ActionRounds::Broadcast ActionRounds::open_round(ActionKind kind, const std::string& reason) {
  ++round_;
  open_ = true;
  kind_ = kind;
  reason_ = reason;
  votes_.clear();
  return {{FrameType::kActionPropose, ActionMessage{round_, kind_, -1, reason_}}};
}

ActionRounds::Broadcast ActionRounds::decide(int64_t iteration) {
  open_ = false;
  if (iteration >= 0) {
    decided_kind_ = kind_;
    decided_at_ = iteration;
  }
  Broadcast out{{FrameType::kActionDecide, ActionMessage{round_, kind_, iteration, reason_}}};
  if (queued_kind_ != ActionKind::kNone && !finishing_) {
    const ActionKind kind = queued_kind_;
    queued_kind_ = ActionKind::kNone;
    for (auto& message : open_round(kind, queued_reason_)) out.push_back(std::move(message));
  }
  return out;
}

}  // namespace poseidon
