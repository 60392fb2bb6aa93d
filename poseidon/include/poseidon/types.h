#pragma once
// Small value types that the public API hands out (Worker's address book,
// agreed actions, traffic counts and factor views), shared with the
// internals that fill them.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace poseidon {

// Listen address of every worker and server, by rank (Worker::address_book).
struct AddressBook {
  std::vector<std::string> workers;
  std::vector<std::string> servers;
};

// A training action that every worker takes at the same iteration
// (Worker::request_action / reach_boundary; Note [agreed actions] in
// internal/action_rounds.h). A stop includes the final snapshot, as in Caffe.
enum class ActionKind : uint8_t { kNone = 0, kSnapshot = 1, kStop = 2 };
const char* action_name(ActionKind kind);  // "none", "snapshot", "stop"

// One step of an action round; Worker::reach_boundary returns the decisions.
struct ActionMessage {
  uint64_t round = 0;  // numbered by the coordinator from 1; 0 in a REQUEST
  ActionKind kind = ActionKind::kNone;
  // VOTE: the last iteration boundary the voter reached (its completed
  // updates). DECIDE: the boundary at which every worker acts; -1: nobody acts
  // (a worker had already finished, so the job is ending anyway).
  int64_t iteration = -1;
  std::string reason;  // who asked and why: "SIGINT on worker 1"
};

// Payload bytes a worker sent and received for one layer (frame headers
// excluded), every scheme (Worker::traffic).
struct LayerTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// A read-only view of one worker's factor inside an SFB slot
// (Worker::factor).
struct FactorView {
  const float* data = nullptr;
  size_t num_floats = 0;
};

}  // namespace poseidon
