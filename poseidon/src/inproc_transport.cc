// In-process transport for tests: a connection is two bounded byte pipes.
// Bounded (kPipeBytes) like a socket buffer, so a writer blocks when its
// reader stalls and any ordering bug that would deadlock over TCP deadlocks
// here too. Listeners live in one process-wide registry keyed by name.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "poseidon/transport.h"

namespace poseidon {
namespace {

using Kind = TransportError::Kind;
constexpr size_t kPipeBytes = size_t{1} << 20;

// One direction of a connection: a ring buffer of kPipeBytes.
class Pipe {
 public:
  // Uninitialized: only the bytes written are touched (cheap short-lived pipes).
  Pipe() : ring_(new uint8_t[kPipeBytes]) {}

  // Appends all bytes, blocking while full. Throws once the reader is gone.
  void write(const uint8_t* src, size_t n, Deadline deadline, const std::string& peer) {
    std::unique_lock<std::mutex> lock(mu_);
    while (n > 0) {
      if (!cv_.wait_until(lock, deadline.time_point(),
                          [&] { return reader_gone_ || writer_done_ || size_ < kPipeBytes; })) {
        throw TransportError(Kind::kTimeout, "send to " + peer + " stalled (pipe full)");
      }
      if (reader_gone_ || writer_done_) {
        throw TransportError(Kind::kReset, "send to " + peer + " failed: connection closed");
      }
      const size_t tail = (head_ + size_) % kPipeBytes;
      const size_t run = std::min({n, kPipeBytes - size_, kPipeBytes - tail});
      std::memcpy(ring_.get() + tail, src, run);
      size_ += run;
      src += run;
      n -= run;
      cv_.notify_all();
    }
  }

  // Reads exactly n bytes. Throws kClosed at EOF with the count read so far.
  void read(uint8_t* dst, size_t n, Deadline deadline, const std::string& peer) {
    std::unique_lock<std::mutex> lock(mu_);
    size_t got = 0;
    while (got < n) {
      if (!cv_.wait_until(lock, deadline.time_point(),
                          [&] { return size_ > 0 || writer_done_ || reader_gone_; })) {
        throw TransportError(Kind::kTimeout, "read from " + peer + " timed out after " +
                                                 std::to_string(got) + " of " + std::to_string(n) +
                                                 " expected bytes");
      }
      if (reader_gone_) {
        throw TransportError(Kind::kClosed, "connection to " + peer + " closed locally");
      }
      if (size_ == 0) {
        throw TransportError(Kind::kClosed, "connection closed by " + peer + " (EOF) after " +
                                                std::to_string(got) + " of " + std::to_string(n) +
                                                " expected bytes");
      }
      const size_t run = std::min({n - got, size_, kPipeBytes - head_});
      std::memcpy(dst + got, ring_.get() + head_, run);
      head_ = (head_ + run) % kPipeBytes;
      size_ -= run;
      got += run;
      cv_.notify_all();
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
  std::unique_ptr<uint8_t[]> ring_;
  size_t head_ = 0;
  size_t size_ = 0;
  bool writer_done_ = false;
  bool reader_gone_ = false;
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
