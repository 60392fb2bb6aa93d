#pragma once
// Who a node is: role, rank and the address it listens on. Messages name
// peers with str(): "worker 1 (127.0.0.1:40123)".

#include <string>

#include "poseidon/config.h"

namespace poseidon {

struct NodeId {
  Role role = Role::kWorker;
  int rank = 0;
  std::string address;

  std::string str() const {
    std::string s = role_name(role);
    if (role != Role::kCoordinator) s += " " + std::to_string(rank);
    return s + " (" + address + ")";
  }
  bool same_node(const NodeId& o) const { return role == o.role && rank == o.rank; }
};

}  // namespace poseidon
