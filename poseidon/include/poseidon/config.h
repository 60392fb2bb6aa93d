#pragma once
// Settings of one node. The C++ core never reads the environment: Python's
// poseidon/config.py is the one place that parses settings and fills this
// struct; C++ tests fill it directly.

#include <cstddef>
#include <cstdint>
#include <string>

namespace poseidon {

// Role of a node in the cluster. The numeric values travel in frame headers.
enum class Role : uint8_t { kCoordinator = 1, kServer = 2, kWorker = 3 };

// "coordinator", "server", "worker"; "role?" for anything else.
const char* role_name(Role role);

// Per-layer communication scheme (docs/paper.md §4).
enum class Scheme : uint8_t { kPS = 1, kSFB = 2 };
const char* scheme_name(Scheme scheme);  // "PS" / "SFB"

// A forced choice: kAuto lets BestScheme decide.
enum class SchemeChoice : uint8_t { kAuto = 0, kPS = 1, kSFB = 2 };

// 1 MiB: a shard answers a chunk only once every worker has pushed it, so a chunk's
// transfer time is the pipeline's fill and drain; on a 100 Mbit/s link 4 MiB cost
// ~25% of a bandwidth-bound round (docs/benchmarks.md), on loopback size hardly matters.
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;
inline constexpr size_t kDefaultMaxFrameBytes = size_t{64} << 20;  // 64 MiB
inline constexpr int kDefaultTimeoutMs = 120000;
inline constexpr int kDefaultHeartbeatIntervalMs = 500;
inline constexpr int kDefaultHeartbeatTimeoutMs = 5000;
inline constexpr int kDefaultHandshakeTimeoutMs = 5000;
inline constexpr int kDefaultCommThreads = 2;
// Unsent bytes the kernel may hold per TCP connection (TCP_NOTSENT_LOWAT): little, so that
// the send queue's priorities decide what goes on the wire next (tcp_transport.cc).
inline constexpr size_t kDefaultNotSentLowatBytes = size_t{256} << 10;
inline constexpr int kMaxCommThreads = 64;
inline constexpr int kMaxNodesPerRole = 4096;

struct Config {
  Role role = Role::kWorker;
  int rank = 0;         // 0 <= rank < num_workers (workers) or num_servers (servers)
  int num_workers = 1;  // P1
  int num_servers = 1;  // P2
  // Where the coordinator listens: "host:port" (TCP) or "inproc://name".
  std::string coordinator = "127.0.0.1:29600";
  // Shared secret every connection must present before any other frame.
  std::string token;
  // Where this node listens for data connections: "host:port" (port 0 picks
  // a free one) or "inproc://" (a fresh name). The coordinator ignores it and
  // listens on `coordinator`.
  std::string listen = "127.0.0.1:0";
  std::string transport = "tcp";  // "tcp" or "inproc"
  // Workers only: the in-process address (KVServer::local_address()) of a
  // shard that runs inside this worker's process — the paper's colocated
  // worker + shard. The worker reaches it through the in-process transport
  // instead of TCP and lends it its gradient ranges: that shard sums the
  // others' pushes straight into them, so the worker's own share is never
  // copied (kv_server.h, Note [in-place rounds]). Empty: none.
  std::string local_server;
  // PS tensors are cut into chunks of this many bytes (multiple of 4). The
  // coordinator's value is authoritative: it travels in the plan.
  size_t chunk_bytes = kDefaultChunkBytes;
  // Frames with a larger payload are rejected and their connection dropped.
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Default limit for every wait (rendezvous, plan, handle waits, sends).
  int timeout_ms = kDefaultTimeoutMs;
  int heartbeat_interval_ms = kDefaultHeartbeatIntervalMs;
  // A node (or the coordinator) silent this long is declared dead.
  int heartbeat_timeout_ms = kDefaultHeartbeatTimeoutMs;
  // An incoming connection must complete the handshake within this time from
  // its accept; its first bytes must come sooner (kFirstBytesTimeoutMs,
  // internal/acceptor.h), or it is dropped.
  int handshake_timeout_ms = kDefaultHandshakeTimeoutMs;
  int comm_threads = kDefaultCommThreads;  // sender threads per node
  // SO_SNDBUF/SO_RCVBUF in bytes; 0 keeps the kernel's autotuning.
  size_t socket_buffer_bytes = 0;
  // TCP_NOTSENT_LOWAT of every connection in bytes; 0 leaves the kernel's default.
  size_t notsent_lowat_bytes = kDefaultNotSentLowatBytes;
  // Coordinator only: force every layer to one scheme (per-layer forces in
  // LayerSpec take precedence).
  SchemeChoice scheme = SchemeChoice::kAuto;
  bool verbose = false;  // log connection and plan events to stderr

  // Throws ConfigError naming the first bad field and its value.
  void validate() const;
};

}  // namespace poseidon
