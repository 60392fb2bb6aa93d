#include "poseidon/config.h"

#include <cmath>
#include <string>
#include <utility>

#include "poseidon/errors.h"

namespace poseidon {

const char* role_name(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
  }
  return "role?";
}

const char* scheme_name(Scheme scheme) {
  switch (scheme) {
    case Scheme::kPS:
      return "PS";
    case Scheme::kSFB:
      return "SFB";
    case Scheme::kBF16:
      return "BF16";
    case Scheme::kPowerSGD:
      return "PowerSGD";
  }
  return "scheme?";
}

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kBF16:
      return "bf16";
    case Compression::kPowerSGD:
      return "powersgd";
    case Compression::kAuto:
      return "auto";
  }
  return "compression?";
}

namespace {
void require(bool ok, const std::string& what) {
  if (!ok) throw ConfigError("invalid setting: " + what);
}
}  // namespace

void Config::validate() const {
  require(role == Role::kCoordinator || role == Role::kServer || role == Role::kWorker,
          "role must be coordinator, server or worker");
  require(num_workers >= 1 && num_workers <= kMaxNodesPerRole,
          "num_workers=" + std::to_string(num_workers) + " (want 1.." +
              std::to_string(kMaxNodesPerRole) + ")");
  require(num_servers >= 1 && num_servers <= kMaxNodesPerRole,
          "num_servers=" + std::to_string(num_servers) + " (want 1.." +
              std::to_string(kMaxNodesPerRole) + ")");
  require(workers_per_machine >= 1 && num_workers % workers_per_machine == 0,
          "workers_per_machine=" + std::to_string(workers_per_machine) +
              " (want a divisor of num_workers=" + std::to_string(num_workers) + ")");
  if (role == Role::kWorker) {
    require(rank >= 0 && rank < num_workers, "rank=" + std::to_string(rank) +
                                                 " for a worker (want 0.." +
                                                 std::to_string(num_workers - 1) + ")");
  } else if (role == Role::kServer) {
    require(rank >= 0 && rank < num_servers, "rank=" + std::to_string(rank) +
                                                 " for a server (want 0.." +
                                                 std::to_string(num_servers - 1) + ")");
  }
  require(!token.empty(),
          "token is empty: every node of a cluster must share a secret token (POSEIDON_TOKEN)");
  require(token.size() <= 256, "token longer than 256 bytes");
  require(!coordinator.empty(), "coordinator address is empty");
  require(transport == "tcp" || transport == "inproc",
          "transport='" + transport + "' (want tcp or inproc)");
  require(chunk_bytes >= 4 && chunk_bytes % 4 == 0,
          "chunk_bytes=" + std::to_string(chunk_bytes) + " (want a positive multiple of 4)");
  require(chunk_bytes <= max_frame_bytes,
          "chunk_bytes=" + std::to_string(chunk_bytes) +
              " exceeds max_frame_bytes=" + std::to_string(max_frame_bytes));
  require(max_frame_bytes >= 4096,
          "max_frame_bytes=" + std::to_string(max_frame_bytes) + " (want at least 4096)");
  require(timeout_ms > 0, "timeout_ms=" + std::to_string(timeout_ms) + " (want > 0)");
  require(heartbeat_interval_ms > 0, "heartbeat_interval_ms must be > 0");
  require(heartbeat_timeout_ms > heartbeat_interval_ms,
          "heartbeat_timeout_ms=" + std::to_string(heartbeat_timeout_ms) +
              " must exceed heartbeat_interval_ms=" + std::to_string(heartbeat_interval_ms));
  require(handshake_timeout_ms > 0, "handshake_timeout_ms must be > 0");
  require(static_cast<uint8_t>(scheme) <= static_cast<uint8_t>(SchemeChoice::kPowerSGD),
          "scheme=" + std::to_string(static_cast<int>(scheme)) + " (unknown scheme choice)");
  require(static_cast<uint8_t>(compression) <= static_cast<uint8_t>(Compression::kAuto),
          "compression=" + std::to_string(static_cast<int>(compression)) +
              " (want none, bf16, powersgd or auto)");
  require(powersgd_rank >= 1, "powersgd_rank=" + std::to_string(powersgd_rank) + " (want >= 1)");
  for (const auto& [name, rate] :
       {std::pair<const char*, double>{"link_bytes_per_s", rates.link_bytes_per_s},
        {"gemm_flops_per_s", rates.gemm_flops_per_s},
        {"memory_bytes_per_s", rates.memory_bytes_per_s},
        {"local_bytes_per_s", rates.local_bytes_per_s}}) {
    require(std::isfinite(rate) && rate >= 0,
            std::string("rates.") + name + "=" + std::to_string(rate) + " (want >= 0; 0: unknown)");
  }
  require(comm_threads >= 1 && comm_threads <= kMaxCommThreads,
          "comm_threads=" + std::to_string(comm_threads) + " (want 1.." +
              std::to_string(kMaxCommThreads) + ")");
}

}  // namespace poseidon
