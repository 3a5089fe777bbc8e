// replicator._replicator: the extension module under the Python package replicator
// (python/replicator). It holds the torch.distributed backend's constructor (registered by
// `import replicator.torch`), replicator's errors as Python exception classes, and the
// replica threads' API (threads.cc).
#include "src/python/module.h"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>

#include "replicator/errors.h"
#include "replicator/rendezvous/store.h"
#include "replicator/replicator.h"
#include "replicator/torch/cpu_kernels.h"
#include "src/python/backend.h"

namespace py = pybind11;

namespace replicator::python {
namespace {

// Python classes of replicator's errors, made once when the module loads.
struct ErrorClasses {
  py::object base, invalid_argument, config, data, mismatch, timeout, aborted, peer_lost,
      replica_failed, store;
};

ErrorClasses& error_classes() {
  static ErrorClasses* classes = new ErrorClasses();
  return *classes;
}

py::object make_error(py::module_& m, const char* name, const py::tuple& bases, const char* doc) {
  py::dict attributes;
  attributes["__doc__"] = doc;
  attributes["__module__"] = "replicator";
  py::object cls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
      name, bases, attributes);
  m.attr(name) = cls;
  return cls;
}

void bind_errors(py::module_& m) {
  ErrorClasses& c = error_classes();
  const auto builtin = [](const char* name) { return py::module_::import("builtins").attr(name); };
  c.base = make_error(m, "ReplicatorError", py::make_tuple(builtin("RuntimeError")),
                      "Every error replicator raises.");
  c.invalid_argument =
      make_error(m, "InvalidArgument", py::make_tuple(c.base, builtin("ValueError")),
                 "A call's arguments cannot work (sizes, ranks, options).");
  c.config = make_error(m, "ConfigError", py::make_tuple(c.base),
                        "A bad configuration value (environment variable, flag or option).");
  c.data = make_error(m, "DataError", py::make_tuple(c.base),
                      "A data file is missing, corrupt or truncated.");
  c.mismatch = make_error(m, "CollectiveMismatch", py::make_tuple(c.base),
                          "Replicas made different collective calls; raised on every replica, "
                          "naming each side's call and line.");
  c.timeout = make_error(m, "Timeout", py::make_tuple(c.base, builtin("TimeoutError")),
                         "A collective passed its deadline; names the replicas that never came.");
  c.aborted = make_error(m, "Aborted", py::make_tuple(c.base),
                         "Released because another replica or process failed; names it.");
  c.peer_lost = make_error(m, "PeerLost", py::make_tuple(c.base),
                           "A peer process died or closed its connections; names it.");
  c.replica_failed = make_error(m, "ReplicaFailed", py::make_tuple(c.base),
                                "A replica's step raised an error of its own.");
  c.store = make_error(m, "StoreError", py::make_tuple(c.base),
                       "The rendezvous store could not be reached, or an operation on it failed.");
  // Registered for every binding that shares pybind11's internals with torch's, so that a
  // Work's wait() raises these classes too.
  // pybind11 keeps translators as void (*)(std::exception_ptr): the parameter is by value.
  py::register_exception_translator([](std::exception_ptr error) {  // NOLINT(performance-*)
    if (!error) return;
    const ErrorClasses& c = error_classes();
    try {
      std::rethrow_exception(error);
    } catch (const CollectiveMismatch& e) {
      PyErr_SetString(c.mismatch.ptr(), e.what());
    } catch (const Timeout& e) {
      PyErr_SetString(c.timeout.ptr(), e.what());
    } catch (const PeerLost& e) {
      PyErr_SetString(c.peer_lost.ptr(), e.what());
    } catch (const Aborted& e) {
      PyErr_SetString(c.aborted.ptr(), e.what());
    } catch (const ReplicaFailed& e) {
      PyErr_SetString(c.replica_failed.ptr(), e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(c.invalid_argument.ptr(), e.what());
    } catch (const ConfigError& e) {
      PyErr_SetString(c.config.ptr(), e.what());
    } catch (const DataError& e) {
      PyErr_SetString(c.data.ptr(), e.what());
    } catch (const rendezvous::StoreError& e) {
      PyErr_SetString(c.store.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(c.base.ptr(), e.what());
    }
  });
}

void bind_backend(py::module_& m) {
  m.def(
      "_create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<Backend>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "The backend \"replicator\" of one process group (what torch.distributed's "
      "register_backend calls). Blocks until every rank has joined, at most `timeout`.");
  m.def(
      "_time_all_reduce",
      [](const c10::intrusive_ptr<c10d::Backend>& backend, const at::Tensor& tensor, int iters) {
        auto* ours = dynamic_cast<Backend*>(backend.get());
        TORCH_CHECK(ours != nullptr, "_time_all_reduce takes a backend \"replicator\", got ",
                    backend->getBackendName());
        return ours->time_all_reduce(tensor, iters);
      },
      py::arg("backend"), py::arg("tensor"), py::arg("iters"),
      py::call_guard<py::gil_scoped_release>(),
      "Seconds that `iters` sum all-reduces of `tensor` take when made from C++ on the "
      "backend's thread (Backend::time_all_reduce): the C++ side of a benchmark that weighs "
      "the Python path in one launch. Every rank calls it alike.");
  m.def("_stop_backends", &Backend::stop_all, py::call_guard<py::gil_scoped_release>(),
        "Lets every live backend's queued collectives finish and stops its thread; later "
        "collectives fail with Aborted. The package calls it at interpreter exit.");
}

}  // namespace
}  // namespace replicator::python

PYBIND11_MODULE(_replicator, m) {
  m.doc() = "replicator's extension module: see the package replicator.";
  py::module_::import("torch.distributed");  // torch's Store and Backend classes first
  replicator::python::bind_errors(m);
  replicator::python::bind_backend(m);
  replicator::python::bind_threads(m);
  // The replica threads of replicator.Replicator run LibTorch kernels at once.
  replicator::detail::on_first_replica_threads(replicator::torch::prepare_cpu_kernels);
}
