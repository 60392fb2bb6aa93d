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

// Per-layer communication scheme (docs/paper.md §4; docs/communication.md §5):
// the paper's exact two, and two lossy ones the user may allow (Compression).
//   kPS       sharded parameter server, fp32
//   kSFB      sufficient factors, peer to peer (fully-connected layers only)
//   kBF16     the parameter server's chunks and shards, bfloat16 on the wire
//   kPowerSGD rank-r factors P (m×r) and Q (n×r) summed through the shards
//             in two parts (plan.h, Note [plan parts]); the math is the caller's
// The values travel in the plan.
enum class Scheme : uint8_t { kPS = 1, kSFB = 2, kBF16 = 3, kPowerSGD = 4 };
const char* scheme_name(Scheme scheme);  // "PS", "SFB", "BF16", "PowerSGD"; "scheme?"

// A forced choice (LayerSpec::force, Config::scheme): kAuto lets the cost
// model decide. A forced scheme must be able to serve the layer.
enum class SchemeChoice : uint8_t { kAuto = 0, kPS = 1, kSFB = 2, kBF16 = 3, kPowerSGD = 4 };

// Which lossy schemes the cost model may choose (forced choices ignore it):
// kNone: PS and SFB (the paper's BestScheme); kBF16: also BF16; kPowerSGD:
// also PowerSGD; kAuto: all four.
enum class Compression : uint8_t { kNone = 0, kBF16 = 1, kPowerSGD = 2, kAuto = 3 };
const char* compression_name(Compression compression);  // "none", "bf16", "powersgd", "auto"

// Measured speeds the time-based cost model divides by (cost_model.h); 0
// means unknown, and an unknown rate's term counts 0 seconds.
struct Rates {
  // One node's link, in bytes sent + received per second (the unit of the
  // model's wire bytes): a full-duplex link of R bit/s each way moves 2·R/8.
  double link_bytes_per_s = 0;
  double gemm_flops_per_s = 0;    // the GEMMs of SFB's rebuild and of PowerSGD
  double memory_bytes_per_s = 0;  // streaming passes (conversions, error feedback)
  // Inside one machine, between its workers (NVLink, PCIe, shared memory), in
  // bytes sent + received per second per worker: the local stage of a machine
  // of several workers (cost_model.h, Note [local aggregation]).
  double local_bytes_per_s = 0;

  bool operator==(const Rates& o) const {
    return link_bytes_per_s == o.link_bytes_per_s && gemm_flops_per_s == o.gemm_flops_per_s &&
           memory_bytes_per_s == o.memory_bytes_per_s && local_bytes_per_s == o.local_bytes_per_s;
  }
};

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
// PowerSGD's rank r when the user sets none (Vogels et al. 2019 train
// ResNet-18 and LSTMs with rank 1-4; PyTorch's powerSGD_hook defaults to 1).
inline constexpr int kDefaultPowerSGDRank = 4;
inline constexpr int kMaxNodesPerRole = 4096;

struct Config {
  Role role = Role::kWorker;
  int rank = 0;         // 0 <= rank < num_workers (workers) or num_servers (servers)
  int num_workers = 1;  // P1
  int num_servers = 1;  // P2
  // G, the workers of one machine (cost_model.h, Note [local aggregation]):
  // ranks g·G .. g·G+G−1 are machine g's, the first of them its leader, the
  // only one that pushes to the shards and sends factors; the others' share
  // reaches it inside the machine (the Python side's local stage). Must divide
  // num_workers. The coordinator's value is authoritative: it travels in the
  // plan.
  int workers_per_machine = 1;
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
  // Coordinator only: the lossy schemes the cost model may pick, PowerSGD's
  // rank r (>= 1; a layer uses min(r, m, n)), and the measured rates of the
  // time-based model (0: unknown). All three travel in the plan.
  Compression compression = Compression::kNone;
  int powersgd_rank = kDefaultPowerSGDRank;
  Rates rates;
  bool verbose = false;  // log connection and plan events to stderr

  // Throws ConfigError naming the first bad field and its value.
  void validate() const;
};

}  // namespace poseidon
