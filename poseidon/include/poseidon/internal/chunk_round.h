#pragma once
// One chunk as its shard sees it: the sum buffer and the bulk-synchronous
// round in progress (kv_server.h, Note [round rules]). Internal to KVServer.
//
//   kIdle --first push of iteration t--> kAccumulating(t)
//         --P1-th push summed--> kSending(t) --last reply written--> kIdle
//
// Everything but `layer`, `chunk`, `floats`, `bf16` and the storage is
// guarded by mu.

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "poseidon/internal/peer.h"
#include "poseidon/plan.h"

namespace poseidon {

struct ChunkRound {
  enum class Phase { kIdle, kAccumulating, kSending };
  static constexpr int64_t kNoIteration = std::numeric_limits<int64_t>::min();

  const LayerPlan* layer = nullptr;
  uint32_t chunk = 0;
  size_t floats = 0;
  // BF16 layer: pushes and replies are bfloat16 (PUSH16 / PULL_REPLY16); the
  // sum stays fp32 and its bf16 bytes go to sum16 once it is complete.
  bool bf16 = false;
  std::vector<float> sum;       // allocated once, reused every round
  std::vector<uint16_t> sum16;  // BF16 only: the replies' bytes

  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kIdle;
  int64_t round_iteration = kNoIteration;
  int64_t last_completed = kNoIteration;
  std::vector<uint8_t> pushed;                  // by worker rank, this round
  std::vector<std::shared_ptr<Peer>> reply_to;  // the connection each push came on
  int arrived = 0;                              // pushes read and summed
  int sends_left = 0;
  // Note [in-place rounds] (kv_server.h): the colocated worker's range for
  // this chunk once it contributed it (in_place_rank >= 0), the pushes that
  // went to `sum` before (into_sum; sum_busy of them still being read), and
  // whether `sum` has been added into the range.
  int in_place_rank = -1;
  float* in_place = nullptr;
  int into_sum = 0;
  int sum_busy = 0;
  bool merged = false;

  // "layer 1 (fc6) chunk 3".
  std::string key() const;
  // "layer 1 (fc6) chunk 3 iteration 7: 2 of 3 pushes, waiting for worker(s) 1".
  // Caller holds mu.
  std::string describe_locked() const;
};

// sum[i] += piece[i] for n floats. `piece` comes from a byte stream; it is
// read through memcpy when it is not float-aligned (in practice it is).
void add_floats(float* sum, const uint8_t* piece, size_t n);

}  // namespace poseidon
