// In-process transport: for tests, and for a worker talking to the shard it
// hosts in its own process (Config::local_server). A connection is two
// rendezvous pipes: a writer posts its bytes and waits until the reader has
// copied them straight into its destination, so a payload is copied exactly
// once (TCP copies it twice, into and out of the kernel) and nothing is
// buffered. A writer therefore blocks until its reader drains — stricter than
// a socket buffer, so an ordering bug that could deadlock over TCP deadlocks
// here first. Listeners live in one process-wide registry keyed by name.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "poseidon/internal/transport.h"

namespace poseidon {
namespace {

using Kind = TransportError::Kind;

// One direction of a connection. One writer and one reader at a time (the
// callers serialize, as for a socket).
class Pipe {
 public:
  // Blocks until the reader has taken all n bytes. Throws once the reader is
  // gone, or on timeout — after which the stream is broken (the reader may
  // have taken part of the bytes) and the pipe refuses further writes.
  void write(const uint8_t* src, size_t n, Deadline deadline, const std::string& peer) {
    if (n == 0) return;
    std::unique_lock<std::mutex> lock(mu_);
    if (reader_gone_ || writer_done_ || broken_) {
      throw TransportError(Kind::kReset, "send to " + peer + " failed: connection closed");
    }
    src_ = src;
    avail_ = n;
    cv_.notify_all();
    const bool drained =
        cv_.wait_until(lock, deadline.time_point(), [&] { return avail_ == 0 || reader_gone_; });
    const size_t left = avail_;
    src_ = nullptr;
    avail_ = 0;
    if (left == 0) return;
    broken_ = true;
    cv_.notify_all();
    if (!drained) {
      throw TransportError(Kind::kTimeout, "send to " + peer +
                                               " stalled: " + std::to_string(n - left) + " of " +
                                               std::to_string(n) + " bytes taken");
    }
    throw TransportError(Kind::kReset, "send to " + peer + " failed: connection closed");
  }

  // Copies exactly n bytes from posted writes into dst. Throws kClosed at EOF
  // with the count read so far.
  void read(uint8_t* dst, size_t n, Deadline deadline, const std::string& peer) {
    size_t got = 0;
    read_pieces(n, deadline, peer, [&](const uint8_t* piece, size_t size) {
      std::memcpy(dst + got, piece, size);
      got += size;
    });
  }

  // Hands the writer's bytes to `sink` in place (under the lock, so the
  // writer stays parked and its buffer valid meanwhile). Throws kClosed at
  // EOF with the count read so far.
  void read_pieces(size_t n, Deadline deadline, const std::string& peer,
                   const Connection::PieceSink& sink) {
    std::unique_lock<std::mutex> lock(mu_);
    size_t got = 0;
    while (got < n) {
      if (!cv_.wait_until(lock, deadline.time_point(),
                          [&] { return avail_ > 0 || writer_done_ || reader_gone_ || broken_; })) {
        throw TransportError(Kind::kTimeout, "read from " + peer + " timed out after " +
                                                 std::to_string(got) + " of " + std::to_string(n) +
                                                 " expected bytes");
      }
      if (reader_gone_) {
        throw TransportError(Kind::kClosed, "connection to " + peer + " closed locally");
      }
      if (avail_ == 0) {
        throw TransportError(Kind::kClosed, "connection closed by " + peer + " (EOF) after " +
                                                std::to_string(got) + " of " + std::to_string(n) +
                                                " expected bytes");
      }
      const size_t run = std::min(n - got, avail_);
      sink(src_, run);
      src_ += run;
      avail_ -= run;
      got += run;
      if (avail_ == 0) cv_.notify_all();
    }
  }

  void close_writer() {
    std::lock_guard<std::mutex> lock(mu_);
    writer_done_ = true;
    cv_.notify_all();
  }

  void close_reader() {
    std::lock_guard<std::mutex> lock(mu_);
    reader_gone_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const uint8_t* src_ = nullptr;  // the writer's bytes not yet taken
  size_t avail_ = 0;
  bool writer_done_ = false;
  bool reader_gone_ = false;
  bool broken_ = false;  // a write gave up midway: the stream is unusable
};

class InprocConnection final : public Connection {
 public:
  InprocConnection(std::shared_ptr<Pipe> in, std::shared_ptr<Pipe> out, std::string remote)
      : in_(std::move(in)), out_(std::move(out)), remote_(std::move(remote)) {}
  // Destroying an end is the process dying: the other end sees EOF.
  ~InprocConnection() override { shutdown(); }

  void write_frame(const uint8_t* header, size_t header_bytes, const void* payload,
                   size_t payload_bytes, Deadline deadline) override {
    // Header and payload must be contiguous in the stream; concurrent writers
    // are serialized by the caller, as for TCP.
    out_->write(header, header_bytes, deadline, remote_);
    if (payload_bytes > 0) {
      out_->write(static_cast<const uint8_t*>(payload), payload_bytes, deadline, remote_);
    }
  }

  void read_exact(void* dst, size_t bytes, Deadline deadline) override {
    in_->read(static_cast<uint8_t*>(dst), bytes, deadline, remote_);
  }

  void read_pieces(size_t bytes, Deadline deadline, uint8_t*, size_t,
                   const PieceSink& sink) override {
    in_->read_pieces(bytes, deadline, remote_, sink);
  }

  void close_write() override { out_->close_writer(); }

  void shutdown() override {
    out_->close_writer();
    in_->close_reader();
  }

  std::string remote_address() const override { return remote_; }

 private:
  std::shared_ptr<Pipe> in_;
  std::shared_ptr<Pipe> out_;
  std::string remote_;
};

struct ListenerState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Connection>> pending;
  bool closed = false;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<ListenerState>> listeners;
  uint64_t next_id = 0;
};

Registry& registry() {
  static Registry r;
  return r;
}

class InprocListener final : public Listener {
 public:
  InprocListener(std::string address, std::shared_ptr<ListenerState> state)
      : address_(std::move(address)), state_(std::move(state)) {}
  ~InprocListener() override { close(); }

  std::unique_ptr<Connection> accept() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->closed || !state_->pending.empty(); });
    if (state_->closed) return nullptr;
    auto conn = std::move(state_->pending.front());
    state_->pending.pop_front();
    return conn;
  }

  void close() override {
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mu);
      auto it = r.listeners.find(address_);
      if (it != r.listeners.end() && it->second == state_) r.listeners.erase(it);
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->closed = true;
    state_->pending.clear();  // their dialers read EOF
    state_->cv.notify_all();
  }

  std::string address() const override { return address_; }

 private:
  std::string address_;
  std::shared_ptr<ListenerState> state_;
};

constexpr char kScheme[] = "inproc://";

class InprocTransport final : public Transport {
 public:
  std::unique_ptr<Listener> listen(const std::string& address) override {
    if (address.rfind(kScheme, 0) != 0) {
      throw TransportError(Kind::kOther,
                           "bad in-process address '" + address + "' (want inproc://name)");
    }
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::string name = address;
    if (name == kScheme) name += "node-" + std::to_string(r.next_id++);
    if (r.listeners.count(name)) {
      throw TransportError(Kind::kOther, "cannot listen on " + name + ": address in use");
    }
    auto state = std::make_shared<ListenerState>();
    r.listeners[name] = state;
    return std::make_unique<InprocListener>(name, state);
  }

  std::unique_ptr<Connection> connect(const std::string& address, Deadline) override {
    std::shared_ptr<ListenerState> state;
    uint64_t id = 0;
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mu);
      auto it = r.listeners.find(address);
      if (it == r.listeners.end()) {
        throw TransportError(Kind::kRefused, "cannot connect to " + address + ": nobody listens");
      }
      state = it->second;
      id = r.next_id++;
    }
    auto a_to_b = std::make_shared<Pipe>();
    auto b_to_a = std::make_shared<Pipe>();
    const std::string client_name = "inproc-client#" + std::to_string(id);
    auto server_end = std::make_unique<InprocConnection>(a_to_b, b_to_a, client_name);
    auto client_end = std::make_unique<InprocConnection>(b_to_a, a_to_b, address);
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->closed) {
      throw TransportError(Kind::kRefused, "cannot connect to " + address + ": listener closed");
    }
    state->pending.push_back(std::move(server_end));
    state->cv.notify_all();
    return client_end;
  }
};

}  // namespace

std::unique_ptr<Transport> make_inproc_transport() { return std::make_unique<InprocTransport>(); }

}  // namespace poseidon
