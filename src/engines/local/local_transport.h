// The local transport: the Transport of a job of one process (the local engine). It has no
// peers: its only process is itself, so the collectives never go across processes and its
// replicas meet in the process's own memory (local_engine.h). The Replicator holds it as it
// holds the mpi and gloo transports; nothing of it is on the path of a collective.
//
// A message to the process itself is copied at once by post() (the k-th send to itself
// into the k-th receive from itself); wait() only looks at the poison. abort() poisons it:
// every later post() and wait() throws Aborted.
#pragma once

#include <memory>

#include "src/engines/local/local_options.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Makes the transport of a one-process job with `options.lanes` lanes. Never blocks. Throws
// InvalidArgument for lanes < 1. Thread-safe in the sense of Transport: one thread per lane
// at a time, different lanes at once; abort() from any thread at any time. post() throws
// InvalidArgument for a lane out of range, a peer other than 0, or sends and receives to
// itself that do not pair up (see self_copy.h).
std::unique_ptr<Transport> make_local_transport(const LocalOptions& options);

}  // namespace replicator::detail
