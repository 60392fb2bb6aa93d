#pragma once
// The send side of a node: a priority queue of frames and a small pool of
// communication threads that write them.
//
// Note [send priority]: jobs are ordered by (iteration, layer, order): an
// older iteration first, then the lower layer (needed first by the next
// forward pass), then the lower `order` — the place the sender gives the
// frame among its layer's frames (the chunk index, except for a worker's
// pushes: kv_worker.h, Note [push order]). Tensors are queued chunk by chunk,
// so a layer pushed after a big one overtakes the big one's remaining chunks.
// A thread only takes a job whose peer no other thread is writing to, so
// threads never queue behind each other on a connection and each peer's
// frames leave in priority order.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "poseidon/internal/peer.h"

namespace poseidon {

// How a send ended. `error` is "" on success. `connection_lost` is true when
// the connection itself broke (EOF, reset, closed locally): then the peer's
// reader thread reports the loss — and reads any ABORT the peer sent just
// before closing, so the job fails with the first-hand reason — and the
// sender should not raise its own, less informative, alarm.
struct SendOutcome {
  std::string error;
  bool connection_lost = false;
  bool ok() const { return error.empty(); }
};

struct SendJob {
  std::shared_ptr<Peer> peer;
  FrameHeader header;             // type and key; sender fields filled by Peer
  uint64_t order = 0;             // place among the frames of (iteration, layer)
  const void* payload = nullptr;  // borrowed: must stay valid until `done` runs
  size_t bytes = 0;
  // Optional. Runs once on the comm thread that took the job, just before
  // the frame's first byte is handed to the transport (never for a job
  // cancelled in the queue). Must not throw or block; it runs before `done`,
  // so it may borrow what `done` keeps alive.
  std::function<void()> on_start;
  // Runs once on a comm thread after the frame is written or failed, or on
  // cancel_all (error = the cancel reason) on the cancelling thread, with no
  // lock of the queue held. Must not throw; may push follow-up jobs (after
  // cancel_all they fail at once).
  std::function<void(const SendOutcome& outcome)> done;
};

class SendQueue {
 public:
  // Starts `num_threads` comm threads; each write may take up to
  // `io_timeout_ms` before it fails.
  SendQueue(int num_threads, int io_timeout_ms);
  ~SendQueue();  // stop()

  // Queues a frame. Non-blocking, thread-safe. After cancel_all/stop the job
  // is failed at once with the cancel reason (done runs on this thread).
  void push(SendJob job);
  // Fails every queued job with `reason` and refuses new ones. Frames being
  // written finish or fail on their own. Thread-safe.
  void cancel_all(const std::string& reason);
  // cancel_all("send queue stopped") and join the threads. Idempotent.
  void stop();
  size_t queued() const;

 private:
  using Key = std::tuple<int64_t, uint32_t, uint64_t, uint64_t>;  // iteration, layer, order, seq
  void run();

  const int io_timeout_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, SendJob> jobs_;
  std::set<const Peer*> busy_;
  uint64_t seq_ = 0;
  bool cancelled_ = false;
  bool stopping_ = false;
  std::string cancel_reason_;
  std::vector<std::thread> threads_;
};

}  // namespace poseidon
