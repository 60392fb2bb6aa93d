#pragma once
// Per-layer traffic counters of a worker: payload bytes sent and received
// (frame headers excluded), for every scheme. Lock-free increments.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "poseidon/types.h"

namespace poseidon {

struct LayerCounters {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
};

class CounterTable {
 public:
  // The counters of `layer_id`, created on first use. The reference stays
  // valid for the table's lifetime. Thread-safe.
  LayerCounters& get(uint32_t layer_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = table_[layer_id];
    if (!slot) slot = std::make_unique<LayerCounters>();
    return *slot;
  }
  // A consistent-enough copy (each counter read once). Thread-safe.
  std::map<uint32_t, LayerTraffic> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<uint32_t, LayerTraffic> out;
    for (const auto& [id, c] : table_) out[id] = {c->bytes_sent.load(), c->bytes_received.load()};
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<uint32_t, std::unique_ptr<LayerCounters>> table_;
};

}  // namespace poseidon
