// poseidon._C: Python bindings of libposeidon. Glue only — no logic lives
// here. The only file of the project that includes pybind11.
//
//  - Buffers come through the buffer protocol (numpy arrays; a CPU torch
//    tensor as t.numpy()): C-contiguous float32, registered without a copy;
//    the worker keeps a reference to each registered buffer while it lives.
//  - Every call that can block releases the GIL.
//  - C++ errors become Python exceptions carrying the C++ message:
//    CommError(RuntimeError) > CommTimeout (also TimeoutError),
//    ProtocolError, ConfigError (also ValueError), PeerFailure (with .peer,
//    .layer, .iteration).

#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "poseidon/coordinator.h"
#include "poseidon/cost_model.h"
#include "poseidon/errors.h"
#include "poseidon/kv_server.h"
#include "poseidon/plan.h"
#include "poseidon/schedule.h"
#include "poseidon/version.h"
#include "poseidon/worker.h"

namespace py = pybind11;
using namespace poseidon;

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// Exception types, created once per interpreter.
struct ExceptionTypes {
  py::object comm, timeout, protocol, config, peer_failure;
};

ExceptionTypes& exception_types() {
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<ExceptionTypes> storage;
  return storage.call_once_and_store_result([] { return ExceptionTypes{}; }).get_stored();
}

py::object new_exception(py::module_& m, const char* name, py::handle bases, const char* doc) {
  const std::string full = std::string("poseidon._C.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  py::object obj = py::reinterpret_steal<py::object>(type);
  m.attr(name) = obj;
  return obj;
}

void set_error(const py::object& type, const char* message) {
  PyErr_SetString(type.ptr(), message);
}

void translate(std::exception_ptr p) {
  const ExceptionTypes& t = exception_types();
  try {
    if (p) std::rethrow_exception(p);
  } catch (const PeerFailure& e) {
    py::object exc = t.peer_failure(e.what());
    exc.attr("peer") = e.peer();
    exc.attr("layer") = e.layer() < 0 ? py::none() : py::object(py::int_(e.layer()));
    exc.attr("iteration") =
        e.iteration() < 0 && e.layer() < 0 ? py::none() : py::object(py::int_(e.iteration()));
    PyErr_SetObject(t.peer_failure.ptr(), exc.ptr());
  } catch (const TimeoutError& e) {
    set_error(t.timeout, e.what());
  } catch (const ProtocolError& e) {
    set_error(t.protocol, e.what());
  } catch (const ConfigError& e) {
    set_error(t.config, e.what());
  } catch (const CommError& e) {
    set_error(t.comm, e.what());
  }
}

// A C-contiguous float32 buffer. Throws ConfigError naming `what`.
float* float_buffer(const py::buffer& b, bool writable, size_t* count, const std::string& what) {
  py::buffer_info info;
  try {
    info = b.request(writable);
  } catch (const std::exception& e) {
    throw ConfigError(what + ": " + (writable ? "need a writable buffer: " : "") + e.what());
  }
  const std::string& f = info.format;
  if (info.itemsize != 4 || (f != "f" && f != "<f" && f != "=f")) {
    throw ConfigError(what + ": need float32 data, got format '" + f + "' (itemsize " +
                      std::to_string(info.itemsize) + ")");
  }
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    if (info.shape[i] > 1 && info.strides[i] != expect) {
      throw ConfigError(what + ": need a C-contiguous buffer (use numpy.ascontiguousarray)");
    }
    expect *= info.shape[i];
  }
  *count = static_cast<size_t>(info.size);
  return static_cast<float*>(info.ptr);
}

// A handle plus the worker's default timeout, so wait() needs no argument.
struct PyHandle {
  Handle handle;
  int default_timeout_ms;
};

// The worker and the Python buffers it writes into (kept alive here, and
// released only after the worker is gone: members die in reverse order).
struct PyWorker {
  std::unordered_map<uint32_t, py::object> buffers;
  std::unique_ptr<Worker> worker;
};

int timeout_or(const std::optional<int>& t, int fallback) { return t ? *t : fallback; }

// A double as repr() shows it: shortest form, 6 significant digits.
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

ActionKind action_kind(const std::string& name) {
  if (name == "snapshot") return ActionKind::kSnapshot;
  if (name == "stop") return ActionKind::kStop;
  throw ConfigError("action '" + name + "': want 'snapshot' or 'stop'");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Poseidon communication core (libposeidon) bindings";
  m.def("version", &version);

  ExceptionTypes& t = exception_types();
  t.comm = new_exception(m, "CommError", PyExc_RuntimeError, "Base of every Poseidon error.");
  t.timeout =
      new_exception(m, "CommTimeout", py::make_tuple(t.comm, py::handle(PyExc_TimeoutError)),
                    "A wait ran past its deadline.");
  t.protocol = new_exception(m, "ProtocolError", t.comm,
                             "Bad frame, wrong token/version, wrong key, iteration or size.");
  t.config = new_exception(m, "ConfigError", py::make_tuple(t.comm, py::handle(PyExc_ValueError)),
                           "Invalid setting or API misuse.");
  t.peer_failure = new_exception(m, "PeerFailure", t.comm,
                                 "The job aborted: a peer died or failed. Attributes: peer, "
                                 "layer, iteration.");
  py::register_exception_translator(&translate);

  py::enum_<Role>(m, "Role")
      .value("COORDINATOR", Role::kCoordinator)
      .value("SERVER", Role::kServer)
      .value("WORKER", Role::kWorker);
  py::enum_<Scheme>(m, "Scheme")
      .value("PS", Scheme::kPS)
      .value("SFB", Scheme::kSFB)
      .value("BF16", Scheme::kBF16)
      .value("POWERSGD", Scheme::kPowerSGD);
  py::enum_<SchemeChoice>(m, "SchemeChoice")
      .value("AUTO", SchemeChoice::kAuto)
      .value("PS", SchemeChoice::kPS)
      .value("SFB", SchemeChoice::kSFB)
      .value("BF16", SchemeChoice::kBF16)
      .value("POWERSGD", SchemeChoice::kPowerSGD);
  py::enum_<Compression>(m, "Compression",
                         "Lossy schemes the cost model may pick (forced choices ignore it).")
      .value("NONE", Compression::kNone)
      .value("BF16", Compression::kBF16)
      .value("POWERSGD", Compression::kPowerSGD)
      .value("AUTO", Compression::kAuto);
  m.def("scheme_name", &scheme_name, py::arg("scheme"),
        "'PS', 'SFB', 'BF16' or 'PowerSGD' (the names the core prints).");
  m.def("compression_name", &compression_name, py::arg("compression"),
        "'none', 'bf16', 'powersgd' or 'auto'.");
  py::enum_<LayerKind>(m, "LayerKind")
      .value("FC", LayerKind::kFullyConnected)
      .value("CONV", LayerKind::kConvolution)
      .value("OTHER", LayerKind::kOther);

  m.attr("DEFAULT_CHUNK_BYTES") = kDefaultChunkBytes;
  m.attr("DEFAULT_MAX_FRAME_BYTES") = kDefaultMaxFrameBytes;
  m.attr("DEFAULT_TIMEOUT_MS") = kDefaultTimeoutMs;
  m.attr("DEFAULT_HEARTBEAT_INTERVAL_MS") = kDefaultHeartbeatIntervalMs;
  m.attr("DEFAULT_HEARTBEAT_TIMEOUT_MS") = kDefaultHeartbeatTimeoutMs;
  m.attr("DEFAULT_HANDSHAKE_TIMEOUT_MS") = kDefaultHandshakeTimeoutMs;
  m.attr("DEFAULT_COMM_THREADS") = kDefaultCommThreads;
  m.attr("DEFAULT_POWERSGD_RANK") = kDefaultPowerSGDRank;

  py::class_<Rates>(m, "Rates",
                    "Measured speeds of the time-based cost model; 0 = unknown (that term "
                    "counts 0 s; an unknown link rate ranks schemes by wire bytes alone).")
      .def(py::init([](double link, double gemm, double memory, double local) {
             return Rates{link, gemm, memory, local};
           }),
           py::arg("link_bytes_per_s") = 0.0, py::arg("gemm_flops_per_s") = 0.0,
           py::arg("memory_bytes_per_s") = 0.0, py::arg("local_bytes_per_s") = 0.0)
      .def_readwrite("link_bytes_per_s", &Rates::link_bytes_per_s)
      .def_readwrite("gemm_flops_per_s", &Rates::gemm_flops_per_s)
      .def_readwrite("memory_bytes_per_s", &Rates::memory_bytes_per_s)
      .def_readwrite("local_bytes_per_s", &Rates::local_bytes_per_s)
      .def(py::self == py::self)
      .def("__repr__", [](const Rates& r) {
        return "Rates(link_bytes_per_s=" + num(r.link_bytes_per_s) +
               ", gemm_flops_per_s=" + num(r.gemm_flops_per_s) +
               ", memory_bytes_per_s=" + num(r.memory_bytes_per_s) +
               ", local_bytes_per_s=" + num(r.local_bytes_per_s) + ")";
      });

  py::class_<Config>(m, "Config", "Settings of one node (filled by poseidon.config).")
      .def(py::init<>())
      .def_readwrite("role", &Config::role)
      .def_readwrite("rank", &Config::rank)
      .def_readwrite("num_workers", &Config::num_workers)
      .def_readwrite("num_servers", &Config::num_servers)
      .def_readwrite("workers_per_machine", &Config::workers_per_machine)
      .def_readwrite("coordinator", &Config::coordinator)
      .def_readwrite("token", &Config::token)
      .def_readwrite("listen", &Config::listen)
      .def_readwrite("transport", &Config::transport)
      .def_readwrite("local_server", &Config::local_server)
      .def_readwrite("chunk_bytes", &Config::chunk_bytes)
      .def_readwrite("max_frame_bytes", &Config::max_frame_bytes)
      .def_readwrite("timeout_ms", &Config::timeout_ms)
      .def_readwrite("heartbeat_interval_ms", &Config::heartbeat_interval_ms)
      .def_readwrite("heartbeat_timeout_ms", &Config::heartbeat_timeout_ms)
      .def_readwrite("handshake_timeout_ms", &Config::handshake_timeout_ms)
      .def_readwrite("comm_threads", &Config::comm_threads)
      .def_readwrite("socket_buffer_bytes", &Config::socket_buffer_bytes)
      .def_readwrite("notsent_lowat_bytes", &Config::notsent_lowat_bytes)
      .def_readwrite("scheme", &Config::scheme)
      .def_readwrite("compression", &Config::compression)
      .def_readwrite("powersgd_rank", &Config::powersgd_rank)
      .def_readwrite("rates", &Config::rates)
      .def_readwrite("verbose", &Config::verbose)
      .def("validate", &Config::validate);

  py::class_<CommCost>(m, "CommCost", "Floats sent + received per iteration (docs/paper.md §4).")
      .def_readonly("ps_worker_floats", &CommCost::ps_worker_floats)
      .def_readonly("ps_server_floats", &CommCost::ps_server_floats)
      .def_readonly("ps_colocated_floats", &CommCost::ps_colocated_floats)
      .def_readonly("sfb_floats", &CommCost::sfb_floats)
      .def_readonly("ps_local_floats", &CommCost::ps_local_floats)
      .def_readonly("sfb_local_floats", &CommCost::sfb_local_floats)
      .def_property_readonly("ps_bytes", &CommCost::ps_bytes)
      .def_property_readonly("sfb_bytes", &CommCost::sfb_bytes);
  m.def("comm_cost", &comm_cost, py::arg("m"), py::arg("n"), py::arg("k"), py::arg("p1"),
        py::arg("p2"), py::arg("workers_per_machine") = int64_t{1});
  m.def("best_scheme", &best_scheme, py::arg("kind"), py::arg("m"), py::arg("n"), py::arg("k"),
        py::arg("p1"), py::arg("p2"));
  m.def("sfb_crossover_workers", &sfb_crossover_workers, py::arg("m"), py::arg("n"), py::arg("k"),
        py::arg("max_p") = int64_t{1} << 20);

  py::class_<MeasuredCosts>(m, "MeasuredCosts",
                            "What a worker timed for one layer on its device, in seconds; 0: "
                            "not measured (cost_model.h, Note [measured costs]).")
      .def(py::init<>())
      .def_readwrite("backward_s", &MeasuredCosts::backward_s)
      .def_readwrite("sfb_rebuild_s", &MeasuredCosts::sfb_rebuild_s)
      .def_readwrite("dw_s", &MeasuredCosts::dw_s)
      .def_readwrite("bf16_encode_s", &MeasuredCosts::bf16_encode_s)
      .def_readwrite("bf16_finish_s", &MeasuredCosts::bf16_finish_s)
      .def_readwrite("powersgd_encode_s", &MeasuredCosts::powersgd_encode_s)
      .def_readwrite("powersgd_between_s", &MeasuredCosts::powersgd_between_s)
      .def_readwrite("powersgd_finish_s", &MeasuredCosts::powersgd_finish_s)
      .def("any", &MeasuredCosts::any)
      .def(py::self == py::self);

  py::class_<SchemeEstimate>(m, "SchemeEstimate",
                             "One scheme's cost for one layer per node per iteration "
                             "(cost_model.h, Note [time model]).")
      .def_readonly("scheme", &SchemeEstimate::scheme)
      .def_readonly("applicable", &SchemeEstimate::applicable)
      .def_readonly("rank", &SchemeEstimate::rank)
      .def_readonly("wire_bytes", &SchemeEstimate::wire_bytes)
      .def_readonly("flops", &SchemeEstimate::flops)
      .def_readonly("memory_bytes", &SchemeEstimate::memory_bytes)
      .def_readonly("local_bytes", &SchemeEstimate::local_bytes)
      .def_readonly("seconds", &SchemeEstimate::seconds)
      .def_readonly("wire_s", &SchemeEstimate::wire_s)
      .def_readonly("local_s", &SchemeEstimate::local_s)
      .def_readonly("encode_s", &SchemeEstimate::encode_s)
      .def_readonly("between_s", &SchemeEstimate::between_s)
      .def_readonly("finish_s", &SchemeEstimate::finish_s)
      .def("__repr__", [](const SchemeEstimate& e) {
        return std::string("SchemeEstimate(") + scheme_name(e.scheme) +
               (e.applicable ? "" : ", not applicable") + ", wire_bytes=" + num(e.wire_bytes) +
               ", flops=" + num(e.flops) + ", memory_bytes=" + num(e.memory_bytes) +
               ", seconds=" + num(e.seconds) + ")";
      });
  m.def("scheme_applicable", &scheme_applicable, py::arg("scheme"), py::arg("kind"), py::arg("m"),
        py::arg("n"), py::arg("num_floats"));
  m.def("scheme_allowed", &scheme_allowed, py::arg("scheme"), py::arg("compression"));
  m.def("powersgd_pays", &powersgd_pays, py::arg("m"), py::arg("n"), py::arg("rank"),
        "Whether the cost model may pick PowerSGD: 2·r·(m+n) < m·n, r = min(rank, m, n).");
  m.def("estimate_scheme", &estimate_scheme, py::arg("scheme"), py::arg("kind"), py::arg("m"),
        py::arg("n"), py::arg("k"), py::arg("p1"), py::arg("p2"),
        py::arg("rank") = uint64_t{kDefaultPowerSGDRank}, py::arg("num_floats") = uint64_t{0},
        py::arg("rates") = Rates{}, py::arg("measured") = MeasuredCosts{},
        py::arg("workers_per_machine") = int64_t{1});
  m.def("estimate_schemes", &estimate_schemes, py::arg("kind"), py::arg("m"), py::arg("n"),
        py::arg("k"), py::arg("p1"), py::arg("p2"),
        py::arg("rank") = uint64_t{kDefaultPowerSGDRank}, py::arg("num_floats") = uint64_t{0},
        py::arg("rates") = Rates{}, py::arg("measured") = MeasuredCosts{},
        py::arg("workers_per_machine") = int64_t{1},
        "All four estimates, in Scheme order (PS, SFB, BF16, PowerSGD).");
  m.def("scheme_candidate", &scheme_candidate, py::arg("scheme"), py::arg("kind"), py::arg("m"),
        py::arg("n"), py::arg("num_floats"), py::arg("compression"),
        py::arg("rank") = uint64_t{kDefaultPowerSGDRank},
        "Whether the cost model may pick the scheme: applicable, allowed, and PowerSGD only "
        "where it pays.");
  m.def("choose_scheme", &choose_scheme, py::arg("kind"), py::arg("m"), py::arg("n"), py::arg("k"),
        py::arg("p1"), py::arg("p2"), py::arg("compression") = Compression::kNone,
        py::arg("rank") = uint64_t{kDefaultPowerSGDRank}, py::arg("num_floats") = uint64_t{0},
        py::arg("rates") = Rates{}, py::arg("measured") = MeasuredCosts{},
        py::arg("workers_per_machine") = int64_t{1});

  py::class_<LayerSpec>(m, "LayerSpec")
      .def(py::init([](uint32_t layer_id, std::string name, LayerKind kind, uint64_t mm, uint64_t n,
                       uint64_t k, uint64_t num_floats, SchemeChoice force, uint32_t byte_scale) {
             LayerSpec s{layer_id, std::move(name), kind, mm, n, k, num_floats, force};
             s.byte_scale = byte_scale;
             return s;
           }),
           py::arg("layer_id"), py::arg("name") = "", py::arg("kind") = LayerKind::kOther,
           py::arg("m") = 0, py::arg("n") = 0, py::arg("k") = 0, py::arg("num_floats") = 0,
           py::arg("force") = SchemeChoice::kAuto, py::arg("byte_scale") = 1)
      .def_readwrite("layer_id", &LayerSpec::layer_id)
      .def_readwrite("name", &LayerSpec::name)
      .def_readwrite("kind", &LayerSpec::kind)
      .def_readwrite("m", &LayerSpec::m)
      .def_readwrite("n", &LayerSpec::n)
      .def_readwrite("k", &LayerSpec::k)
      .def_readwrite("num_floats", &LayerSpec::num_floats)
      .def_readwrite("force", &LayerSpec::force)
      .def_readwrite("byte_scale", &LayerSpec::byte_scale,
                     "The compute replay's stand-in: buffers of 1/byte_scale of the real "
                     "floats (plan.h, Note [byte-scaled layers]); 1 for a real layer.")
      .def_readwrite("measured", &LayerSpec::measured)
      .def("__repr__", [](const LayerSpec& s) { return "LayerSpec(" + s.debug_string() + ")"; });

  py::class_<PlanPart>(m, "PlanPart",
                       "A part of a layer's registered buffer, pushed by push_pull(layer, t, "
                       "part) (plan.h, Note [plan parts]).")
      .def_readonly("offset", &PlanPart::offset)
      .def_readonly("num_floats", &PlanPart::num_floats)
      .def_readonly("first_chunk", &PlanPart::first_chunk)
      .def_readonly("num_chunks", &PlanPart::num_chunks)
      .def_readonly("chunk_floats", &PlanPart::chunk_floats)
      .def("__repr__", [](const PlanPart& p) {
        return "PlanPart(offset=" + std::to_string(p.offset) +
               ", num_floats=" + std::to_string(p.num_floats) +
               ", first_chunk=" + std::to_string(p.first_chunk) +
               ", num_chunks=" + std::to_string(p.num_chunks) + ")";
      });

  py::class_<LayerPlan>(m, "LayerPlan")
      .def_readonly("spec", &LayerPlan::spec)
      .def_property_readonly("layer_id", [](const LayerPlan& l) { return l.spec.layer_id; })
      .def_property_readonly("name", [](const LayerPlan& l) { return l.spec.name; })
      .def_readonly("scheme", &LayerPlan::scheme)
      .def_readonly("cost", &LayerPlan::cost)
      .def_readonly("estimate", &LayerPlan::estimate)
      .def_readonly("rank", &LayerPlan::rank)
      .def_readonly("matrix_m", &LayerPlan::matrix_m)
      .def_readonly("matrix_n", &LayerPlan::matrix_n)
      .def_readonly("wire_floats", &LayerPlan::wire_floats)
      .def_readonly("parts", &LayerPlan::parts)
      .def_readonly("first_chunk", &LayerPlan::first_chunk)
      .def_readonly("num_chunks", &LayerPlan::num_chunks)
      .def_readonly("chunk_floats", &LayerPlan::chunk_floats);

  py::class_<Plan>(m, "Plan")
      .def_readonly("num_workers", &Plan::num_workers)
      .def_readonly("num_servers", &Plan::num_servers)
      .def_readonly("workers_per_machine", &Plan::workers_per_machine)
      .def_property_readonly("num_machines", &Plan::num_machines)
      .def("is_leader", &Plan::is_leader, py::arg("worker"))
      .def("machine_of", &Plan::machine_of, py::arg("worker"))
      .def("leader_of_machine", &Plan::leader_of_machine, py::arg("machine"))
      .def_readonly("chunk_bytes", &Plan::chunk_bytes)
      .def_readonly("compression", &Plan::compression)
      .def_readonly("powersgd_rank", &Plan::powersgd_rank)
      .def_readonly("rates", &Plan::rates)
      .def_readonly("layers", &Plan::layers)
      .def_readonly("schedule_s", &Plan::schedule_s)
      .def(
          "find",
          [](const Plan& p, uint32_t id) -> std::optional<LayerPlan> {
            const LayerPlan* l = p.find(id);
            return l ? std::optional<LayerPlan>(*l) : std::nullopt;
          },
          py::arg("layer_id"));
  m.def("make_plan", &make_plan, py::arg("specs"), py::arg("num_workers"), py::arg("num_servers"),
        py::arg("chunk_bytes") = kDefaultChunkBytes, py::arg("force") = SchemeChoice::kAuto,
        py::arg("compression") = Compression::kNone,
        py::arg("powersgd_rank") = kDefaultPowerSGDRank, py::arg("rates") = Rates{},
        py::arg("workers_per_machine") = 1);
  m.def("schedule_seconds", &schedule_seconds, py::arg("specs"), py::arg("chosen"),
        "The simulated backward + synchronisation seconds of one iteration (schedule.h, Note "
        "[schedule]): the layers' specs and their schemes' estimates, in declaration order.");
  m.def("layer_estimates", &layer_estimates, py::arg("spec"), py::arg("num_workers"),
        py::arg("num_servers"), py::arg("powersgd_rank") = kDefaultPowerSGDRank,
        py::arg("rates") = Rates{}, py::arg("workers_per_machine") = 1,
        "Every scheme's SchemeEstimate for one layer, in Scheme order: why the plan chose.");

  m.def("steady_clock_ns", &steady_clock_ns,
        "Now on the core's clock (std::chrono::steady_clock = CLOCK_MONOTONIC, the clock of "
        "time.perf_counter_ns()), in ns.");

  py::class_<HandleTiming>(m, "HandleTiming",
                           "When an operation was queued, started sending, had every reply and "
                           "completed: ns on time.perf_counter_ns()'s clock; 0 = not yet.")
      .def_readonly("queued_ns", &HandleTiming::queued_ns)
      .def_readonly("first_send_ns", &HandleTiming::first_send_ns)
      .def_readonly("last_receive_ns", &HandleTiming::last_receive_ns)
      .def_readonly("done_ns", &HandleTiming::done_ns)
      .def("__iter__",
           [](const HandleTiming& t) {
             return py::iter(
                 py::make_tuple(t.queued_ns, t.first_send_ns, t.last_receive_ns, t.done_ns));
           })
      .def("__repr__", [](const HandleTiming& t) {
        return "HandleTiming(queued_ns=" + std::to_string(t.queued_ns) +
               ", first_send_ns=" + std::to_string(t.first_send_ns) +
               ", last_receive_ns=" + std::to_string(t.last_receive_ns) +
               ", done_ns=" + std::to_string(t.done_ns) + ")";
      });

  py::class_<PyHandle>(m, "Handle", "An asynchronous push_pull or allgather.")
      .def(
          "wait",
          [](const PyHandle& h, std::optional<int> timeout_ms) {
            h.handle.wait(timeout_or(timeout_ms, h.default_timeout_ms));
          },
          py::arg("timeout_ms") = py::none(), Release())
      .def("test", [](const PyHandle& h) { return h.handle.test(); })
      .def(
          "timing", [](const PyHandle& h) { return h.handle.timing(); },
          "Phase times of the operation (HandleTiming); non-blocking, any thread.")
      .def_property_readonly("layer", [](const PyHandle& h) { return h.handle.layer(); })
      .def_property_readonly("iteration", [](const PyHandle& h) { return h.handle.iteration(); });

  py::class_<ServerStats>(m, "ServerStats")
      .def_readonly("rounds_completed", &ServerStats::rounds_completed)
      .def_readonly("bytes_received", &ServerStats::bytes_received)
      .def_readonly("bytes_sent", &ServerStats::bytes_sent)
      .def_readonly("frames_rejected", &ServerStats::frames_rejected)
      .def_readonly("rounds_in_place", &ServerStats::rounds_in_place)
      .def_readonly("sums_merged", &ServerStats::sums_merged)
      .def_readonly("reader_waits", &ServerStats::reader_waits)
      .def_readonly("reader_wait_ns", &ServerStats::reader_wait_ns);

  py::class_<Coordinator>(m, "Coordinator")
      .def(py::init<const Config&>(), py::arg("config"), Release())
      .def_property_readonly("address", &Coordinator::address)
      .def("run", &Coordinator::run, Release())
      .def("abort", &Coordinator::abort, py::arg("reason"), Release())
      .def("plan", &Coordinator::plan);

  py::class_<KVServer>(m, "KVServer")
      .def(py::init<const Config&>(), py::arg("config"), Release())
      .def_property_readonly("address", &KVServer::address)
      .def_property_readonly("local_address", &KVServer::local_address)
      .def("run", &KVServer::run, Release())
      .def("abort", &KVServer::abort, py::arg("reason"), Release())
      .def("stats", &KVServer::stats);

  py::class_<PyWorker>(m, "Worker")
      .def(py::init([](const Config& c) {
             auto w = std::make_unique<PyWorker>();
             py::gil_scoped_release release;
             w->worker = std::make_unique<Worker>(c);
             return w;
           }),
           py::arg("config"))
      .def(
          "connect", [](PyWorker& w) { w.worker->connect(); }, Release())
      .def(
          "plan",
          [](PyWorker& w, const std::vector<LayerSpec>& specs) { return w.worker->plan(specs); },
          py::arg("layers"), Release())
      .def(
          "register_layer",
          [](PyWorker& w, uint32_t layer_id, const py::buffer& buf) {
            size_t n = 0;
            float* p =
                float_buffer(buf, true, &n, "register_layer(" + std::to_string(layer_id) + ")");
            {
              py::gil_scoped_release release;
              w.worker->register_layer(layer_id, p, n);
            }
            w.buffers[layer_id] = buf;
          },
          py::arg("layer_id"), py::arg("grad"))
      .def(
          "register_sfb_layer",
          [](PyWorker& w, uint32_t layer_id, size_t reserved_floats, size_t max_floats) {
            w.worker->register_sfb_layer(layer_id, reserved_floats, max_floats);
          },
          py::arg("layer_id"), py::arg("reserved_floats"), py::arg("max_floats_per_worker") = 0,
          Release())
      .def(
          "push_pull",
          [](PyWorker& w, uint32_t layer_id, int64_t iteration, uint32_t part) {
            return PyHandle{w.worker->push_pull(layer_id, iteration, part), w.worker->timeout_ms()};
          },
          py::arg("layer_id"), py::arg("iteration"), py::arg("part") = 0u, Release(),
          "Sums part `part` of the layer's registered buffer over the workers (PowerSGD: part 0 "
          "= [P | rest], then part 1 = [Q]; every other scheme: part 0).")
      .def(
          "allgather",
          [](PyWorker& w, uint32_t layer_id, int64_t iteration, const py::buffer& buf) {
            size_t n = 0;
            const float* p =
                float_buffer(buf, false, &n, "allgather(" + std::to_string(layer_id) + ")");
            py::gil_scoped_release release;  // the buffer is copied before return
            return PyHandle{w.worker->allgather(layer_id, iteration, p, n), w.worker->timeout_ms()};
          },
          py::arg("layer_id"), py::arg("iteration"), py::arg("factor"))
      .def(
          "factor",
          [](py::object self, uint32_t layer_id, int64_t iteration, int rank) {
            PyWorker& w = self.cast<PyWorker&>();
            const FactorView v = w.worker->factor(layer_id, iteration, rank);
            py::array_t<float> a({static_cast<py::ssize_t>(v.num_floats)},
                                 {static_cast<py::ssize_t>(sizeof(float))}, v.data, self);
            a.attr("setflags")(py::arg("write") = false);
            return a;
          },
          py::arg("layer_id"), py::arg("iteration"), py::arg("rank"),
          "Read-only view of a worker's factor (valid until the next allgather of the layer).")
      .def(
          "barrier",
          [](PyWorker& w, const std::string& name, std::optional<int> timeout_ms) {
            w.worker->barrier(name, timeout_or(timeout_ms, w.worker->timeout_ms()));
          },
          py::arg("name"), py::arg("timeout_ms") = py::none(), Release())
      .def(
          "request_action",
          [](PyWorker& w, const std::string& action, const std::string& reason) {
            w.worker->request_action(action_kind(action), reason);
          },
          py::arg("action"), py::arg("reason"), Release(),
          "Ask for 'snapshot' or 'stop' at an iteration every worker agrees on.")
      .def(
          "reach_boundary",
          [](PyWorker& w, int64_t iteration, std::optional<int> timeout_ms) {
            std::vector<ActionMessage> decisions;
            {
              py::gil_scoped_release release;
              decisions = w.worker->reach_boundary(iteration,
                                                   timeout_or(timeout_ms, w.worker->timeout_ms()));
            }
            py::list out;
            for (const ActionMessage& d : decisions) {
              out.append(py::make_tuple(action_name(d.kind), d.iteration, d.reason));
            }
            return out;
          },
          py::arg("iteration"), py::arg("timeout_ms") = py::none(),
          "At every iteration boundary: [(action, iteration, reason)] decided since the last "
          "call (iteration -1: nobody acts); blocks only while a vote of this worker is "
          "undecided.")
      .def(
          "abort", [](PyWorker& w, const std::string& reason) { w.worker->abort(reason); },
          py::arg("reason"), Release())
      .def(
          "shutdown",
          [](PyWorker& w, std::optional<int> timeout_ms) {
            w.worker->shutdown(timeout_or(timeout_ms, w.worker->timeout_ms()));
          },
          py::arg("timeout_ms") = py::none(), Release())
      .def(
          "failure", [](const PyWorker& w) { return w.worker->failure(); },
          "Why the job ended (naming the node at its origin), or '' while it runs; "
          "non-blocking.")
      .def("traffic",
           [](const PyWorker& w) {
             py::dict out;
             for (const auto& [id, tr] : w.worker->traffic()) {
               out[py::int_(id)] = py::make_tuple(tr.bytes_sent, tr.bytes_received);
             }
             return out;
           })
      .def_property_readonly("rank", [](const PyWorker& w) { return w.worker->rank(); })
      .def_property_readonly("num_workers",
                             [](const PyWorker& w) { return w.worker->num_workers(); })
      .def_property_readonly("num_servers",
                             [](const PyWorker& w) { return w.worker->num_servers(); })
      .def_property_readonly("address", [](const PyWorker& w) { return w.worker->address(); })
      .def_property_readonly("address_book", [](const PyWorker& w) {
        const AddressBook& b = w.worker->address_book();
        return py::make_tuple(b.workers, b.servers);
      });
}
