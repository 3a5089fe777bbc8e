// Replica threads from Python: replicator._replicator.Replicator runs a Python step function
// on each local replica's thread (the GIL taken for the Python code, released inside every
// collective and while run() waits), with ReplicaContext's collectives on torch tensors. The
// package's Python wrapper (python/replicator/__init__.py) adds numpy arrays and PerReplica.
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/tensor_collectives.h"
#include "src/python/module.h"
#include "src/python/python_site.h"

namespace py = pybind11;

namespace replicator::python {
namespace {

ReduceOp parse_op(const std::string& op) {
  if (op == "sum") return ReduceOp::kSum;
  if (op == "mean" || op == "avg") return ReduceOp::kMean;
  if (op == "min") return ReduceOp::kMin;
  if (op == "max") return ReduceOp::kMax;
  if (op == "prod" || op == "product") return ReduceOp::kProd;
  throw InvalidArgument("reduce op '" + op + "' is not one of sum, mean, min, max, prod");
}

Deadline deadline(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(*seconds * 1000.0));
}

Config make_config(const py::kwargs& options) {
  Config config = Config::from_env();
  for (const auto& [key, value] : options) {
    std::string name = py::str(key);
    for (char& c : name) c = c == '_' ? '-' : c;
    std::string text = py::isinstance<py::bool_>(value) ? (value.cast<bool>() ? "true" : "false")
                                                        : std::string(py::str(value));
    config.set(name, text);
  }
  config.validate();
  return config;
}

// A step's result crosses threads as an owned PyObject*, so that no reference count is
// touched without the GIL (and is dropped, with the GIL, when another replica failed).
using Owned = PyObject*;

py::list run_step(Replicator& replicator, const py::function& fn) {
  std::vector<Owned> slots(static_cast<std::size_t>(replicator.num_local_replicas()), nullptr);
  try {
    py::gil_scoped_release release;
    replicator.run([&fn, &slots](ReplicaContext& ctx) {
      py::gil_scoped_acquire gil;
      py::object out = fn(py::cast(&ctx, py::return_value_policy::reference));
      slots[static_cast<std::size_t>(ctx.local_replica_id())] = out.release().ptr();
    });
  } catch (const ReplicaFailed& failed) {
    for (Owned value : slots) Py_XDECREF(value);
    // A step's own exception (a Python one, or replicator's raised inside it) comes back as
    // itself, as the package's docstring promises, not wrapped as the C++ API wraps it.
    if (failed.original()) std::rethrow_exception(failed.original());
    throw;
  } catch (...) {
    for (Owned value : slots) Py_XDECREF(value);
    throw;
  }
  py::list values;
  for (Owned value : slots) values.append(py::reinterpret_steal<py::object>(value));
  return values;
}

void bind_context(py::module_& m) {
  using Ctx = ReplicaContext;
  py::class_<Ctx>(m, "ReplicaContext",
                  "The replica a step runs as, and its collectives (valid during the step "
                  "only). Each collective blocks until every replica made the same call.")
      .def_property_readonly("replica_id", &Ctx::replica_id)
      .def_property_readonly("num_replicas", &Ctx::num_replicas)
      .def_property_readonly("local_replica_id", &Ctx::local_replica_id)
      .def_property_readonly("num_local_replicas", &Ctx::num_local_replicas)
      .def(
          "all_reduce",
          [](Ctx& ctx, const at::Tensor& t, const std::string& op, std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            torch::all_reduce(ctx, t, {.op = parse_op(op), .timeout = deadline(timeout)}, where);
          },
          py::arg("tensor"), py::arg("op") = "sum", py::arg("timeout") = py::none())
      .def(
          "all_reduce_many",
          [](Ctx& ctx, const std::vector<at::Tensor>& ts, const std::string& op,
             std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            torch::all_reduce(ctx, ts, {.op = parse_op(op), .timeout = deadline(timeout)}, where);
          },
          py::arg("tensors"), py::arg("op") = "sum", py::arg("timeout") = py::none())
      .def(
          "broadcast",
          [](Ctx& ctx, const at::Tensor& t, int root, std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            torch::broadcast(ctx, t, {.root = root, .timeout = deadline(timeout)}, where);
          },
          py::arg("tensor"), py::arg("root") = 0, py::arg("timeout") = py::none())
      .def(
          "all_gather",
          [](Ctx& ctx, const at::Tensor& t, std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            return torch::all_gather(ctx, t, {.timeout = deadline(timeout)}, where);
          },
          py::arg("tensor"), py::arg("timeout") = py::none())
      .def(
          "reduce_scatter",
          [](Ctx& ctx, const at::Tensor& t, const std::string& op, std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            return torch::reduce_scatter(ctx, t, {.op = parse_op(op), .timeout = deadline(timeout)},
                                         where);
          },
          py::arg("tensor"), py::arg("op") = "sum", py::arg("timeout") = py::none())
      .def(
          "all_to_all",
          [](Ctx& ctx, const at::Tensor& t, std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            return torch::all_to_all(ctx, t, {.timeout = deadline(timeout)}, where);
          },
          py::arg("tensor"), py::arg("timeout") = py::none())
      .def(
          "barrier",
          [](Ctx& ctx, std::optional<double> timeout) {
            const CallSite where = python_caller();
            py::gil_scoped_release release;
            ctx.barrier({.timeout = deadline(timeout)}, where);
          },
          py::arg("timeout") = py::none());
}

void bind_replicator(py::module_& m) {
  py::class_<Replicator>(m, "Replicator",
                         "Runs one replica's step on every replica (threads of this process, "
                         "and the other processes of a job). Options as Config's, by name "
                         "(local_replicas=2, timeout=\"30s\", engine=\"gloo\", ...), over "
                         "REPLICATOR_* from the environment.")
      .def(py::init([](const py::kwargs& options) {
             Config config = make_config(options);
             py::gil_scoped_release release;
             return std::make_unique<Replicator>(config);
           }),
           "Starts the replica threads; with engine mpi or gloo, joins the other processes "
           "first (blocks until all have, at most the timeout).")
      .def_property_readonly("num_replicas", &Replicator::num_replicas)
      .def_property_readonly("num_local_replicas", &Replicator::num_local_replicas)
      .def("run", &run_step, py::arg("fn"),
           "Calls fn(ctx) once on every local replica's thread and blocks until all return; "
           "returns their results, one per local replica. If a step raises, the others are "
           "released and run raises the first error.")
      .def(
          "reduce",
          [](Replicator& replicator, const std::string& op, const std::vector<double>& values) {
            py::gil_scoped_release release;
            std::deque<double> per(values.begin(), values.end());
            return replicator.reduce(parse_op(op), PerReplica<double>(std::move(per)));
          },
          py::arg("op"), py::arg("values"),
          "Combines one number per local replica over all replicas of the job (float64, "
          "canonical tree order); across processes every process calls it at the same point.");
}

}  // namespace

void bind_threads(py::module_& m) {
  bind_context(m);
  bind_replicator(m);
}

}  // namespace replicator::python
