#include "poseidon/internal/colocated.h"

#include "poseidon/errors.h"

namespace poseidon {
namespace {

struct Table {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<ColocatedLink>> links;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

std::shared_ptr<ColocatedLink> ColocatedLink::open(const std::string& address) {
  auto link = std::make_shared<ColocatedLink>(address);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto& slot = t.links[address];
  if (!slot.expired()) throw ConfigError("a colocated link is already open at " + address);
  slot = link;
  return link;
}

std::shared_ptr<ColocatedLink> ColocatedLink::find(const std::string& address) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.links.find(address);
  return it == t.links.end() ? nullptr : it->second.lock();
}

void ColocatedLink::close() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.links.find(address_);
  if (it != t.links.end() && (it->second.expired() || it->second.lock().get() == this)) {
    t.links.erase(it);
  }
}

void ColocatedLink::lend(int rank, uint32_t layer_id, float* data, size_t num_floats) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!lenders_[rank].ranges.emplace(layer_id, Range{data, num_floats, true}).second) {
    throw ConfigError("worker " + std::to_string(rank) + " lent layer " + std::to_string(layer_id) +
                      " to " + address_ + " twice");
  }
}

bool ColocatedLink::revoke(int rank, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  Lender& l = lenders_[rank];
  l.revoked = true;
  return cv_.wait_until(lock, deadline.time_point(), [&] { return l.uses == 0; });
}

ColocatedLink::Range ColocatedLink::range(int rank, uint32_t layer_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto l = lenders_.find(rank);
  if (l == lenders_.end()) return {};
  auto r = l->second.ranges.find(layer_id);
  return r == l->second.ranges.end() ? Range{} : r->second;
}

bool ColocatedLink::begin_use(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  Lender& l = lenders_[rank];
  if (l.revoked) return false;
  ++l.uses;
  return true;
}

void ColocatedLink::end_use(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --lenders_[rank].uses;
  }
  cv_.notify_all();
}

}  // namespace poseidon
