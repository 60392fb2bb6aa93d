#pragma once
// The registered layers of KVWorker (layers through the shards: PS, BF16,
// PowerSGD) or SFBroadcaster (SFB layers): registration, lookup by id, and what a failure or a
// timeout report needs from every layer (fail_all, pending). Internal to Worker.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "poseidon/errors.h"
#include "poseidon/internal/data_plane.h"
#include "poseidon/internal/layer_ops.h"
#include "poseidon/internal/op_state.h"

namespace poseidon {

// The Worker call that registers a layer of `scheme`: "register_layer" (PS,
// BF16, PowerSGD) or "register_sfb_layer" (SFB).
inline const char* register_call(Scheme scheme) {
  return scheme == Scheme::kSFB ? "register_sfb_layer" : "register_layer";
}

// `State` is one layer's state; it has at least
//   const LayerPlan* plan;  LayerCounters* counters;  (set by add())
//   std::mutex mu;          LayerOps ops;             (ops guarded by mu)
// States are created once, by add(), and live as long as the table, so the
// pointers and references it hands out stay valid. Thread-safe.
template <typename State>
class LayerTable {
 public:
  // The table of the layers of `plane`'s plan that go where `scheme`'s go
  // (through the shards or peer to peer). `plane` must outlive it.
  LayerTable(const DataPlane& plane, Scheme scheme) : plane_(plane), scheme_(scheme) {}

  // Registers `layer_id`. Checks, with ConfigErrors whose messages start with
  // "<self>: register_layer(<id>)" (`who`; register_sfb_layer for SFB), that
  // it is a layer of the plan that goes this table's way; then creates its
  // state, sets `plan`, runs init(state, who) (more checks, the rest of the
  // state), sets `counters` and adds the state unless the layer is registered
  // already (ConfigError). Wakes wait(). Returns the added state.
  template <typename Init>
  State& add(uint32_t layer_id, Init&& init) {
    const std::string who =
        plane_.self.str() + ": " + register_call(scheme_) + "(" + std::to_string(layer_id) + ")";
    const LayerPlan* lp = plane_.plan.find(layer_id);
    if (lp == nullptr) throw ConfigError(who + ": layer is not in the plan");
    if (through_shards(lp->scheme) != through_shards(scheme_)) {
      const std::string by = lp->scheme == Scheme::kPS ? std::string("the PS")
                             : lp->scheme == Scheme::kSFB
                                 ? std::string("SFB")
                                 : std::string(scheme_name(lp->scheme)) + " (through the shards)";
      throw ConfigError(who + ": layer " + lp->spec.name + " is synchronised by " + by +
                        " in the plan; use " + register_call(lp->scheme));
    }
    auto state = std::make_unique<State>();
    state->plan = lp;
    init(*state, who);
    state->counters = &plane_.counters->get(layer_id);
    State& added = *state;
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      if (!layers_.emplace(layer_id, std::move(state)).second) {
        throw ConfigError(who + ": layer registered twice");
      }
    }
    added_.notify_all();
    return added;
  }

  // The layer's state, or null if it is not registered.
  State* find(uint32_t layer_id) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = layers_.find(layer_id);
    return it == layers_.end() ? nullptr : it->second.get();
  }

  // A registered layer and the description of an operation `op` on it:
  // "push_pull of layer 3 (fc6) iteration 7".
  struct Use {
    State& layer;
    std::string what;
  };
  // The layer that operation `op` of `iteration` uses. Throws ConfigError
  // "<self>: <what>: <unregistered>" (the description without the layer's
  // name) if it is not registered.
  Use use(const char* op, uint32_t layer_id, int64_t iteration,
          const char* unregistered = "layer not registered") const {
    State* layer = find(layer_id);
    std::string what = std::string(op) + " of layer " + std::to_string(layer_id) +
                       (layer ? " (" + layer->plan->spec.name + ")" : "") + " iteration " +
                       std::to_string(iteration);
    if (layer == nullptr) throw ConfigError(plane_.self.str() + ": " + what + ": " + unregistered);
    return Use{*layer, std::move(what)};
  }

  // The layer, once registered: waits up to the plane's timeout (TimeoutError
  // naming `what`) for a registration still to come, or returns null if the
  // job aborts meanwhile. For frames of a peer that may be ahead of us.
  State* wait(uint32_t layer_id, const std::string& what) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    const Deadline deadline = Deadline::after_ms(plane_.timeout_ms);
    // Wake now and then to notice an abort (it does not signal this cv).
    while (!layers_.count(layer_id)) {
      if (plane_.abort->tripped()) return nullptr;
      if (deadline.expired()) {
        throw TimeoutError(plane_.self.str() + ": " + what + ": layer " + std::to_string(layer_id) +
                           " was not registered here (" + register_call(scheme_) + ") within " +
                           std::to_string(plane_.timeout_ms) + " ms");
      }
      added_.wait_for(lock, std::chrono::milliseconds(50));
    }
    return layers_.at(layer_id).get();
  }

  // Fails every layer's current operation with `failure`.
  void fail_all(const Failure& failure) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (auto& [id, layer] : layers_) {
      std::lock_guard<std::mutex> l(layer->mu);
      if (layer->ops.op()) layer->ops.op()->fail(failure);
    }
  }

  // What each unfinished operation is ("push_pull of layer 3 (fc6) iteration
  // 7"), joined by "; " in layer order, or "".
  std::string pending() const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    std::string out;
    for (auto& [id, layer] : layers_) {
      std::lock_guard<std::mutex> l(layer->mu);
      const std::shared_ptr<OpState>& op = layer->ops.op();
      if (op && !op->finished()) out += (out.empty() ? "" : "; ") + op->what();
    }
    return out;
  }

 private:
  const DataPlane& plane_;
  const Scheme scheme_;
  mutable std::shared_mutex mu_;
  mutable std::condition_variable_any added_;
  std::map<uint32_t, std::unique_ptr<State>> layers_;
};

}  // namespace poseidon
