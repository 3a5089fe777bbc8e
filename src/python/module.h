// The parts of the extension module replicator._replicator, each binding its own names.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace replicator::python {

// Replicator, ReplicaContext, PerReplica and reduce for replica threads in one process and
// jobs of several (threads.cc).
void bind_threads(pybind11::module_& m);

}  // namespace replicator::python
