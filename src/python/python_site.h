// Where in the user's Python code a collective was called, as a CallSite (call_site.h), so
// that mismatch and timeout messages, the flight recorder and the timeline name the Python
// line.
#pragma once

#include "replicator/call_site.h"

namespace replicator::python {

// The innermost frame of the calling thread's Python stack outside torch's and replicator's
// own Python files ("train.py:57"); not known when the thread runs no Python (an autograd
// thread of its own, for one). Takes the GIL for the walk if the thread released it. The file
// name is kept for the life of the process (each distinct name once). Never throws.
CallSite python_caller() noexcept;

}  // namespace replicator::python
