// The gloo transport: the Transport of a job whose processes meet through a store (a shared
// folder or a Redis server) and talk over TCP with Gloo.
//
// Each lane is its own gloo::rendezvous::Context (a full mesh of TCP connections), all on one
// gloo TCP device, so the threads of a process drive their lanes at once. A process that
// fails writes its reason into the store (key "<job>/abort/<rank>") and closes its
// connections; a peer that then sees the connection close reads the reason and raises
// Aborted, while a peer that finds no reason within 200 ms (the process died) raises
// PeerLost. Destroying a transport that has not failed blocks until every peer has closed
// or failed too, for at most 2 s ("<job>/closed/<rank>"), so that no peer still finishing
// its run sees a closed connection.
#pragma once

#include <memory>

#include "src/engines/gloo/gloo_options.h"
#include "src/engines/native.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Makes a transport with `options.lanes` lanes among the `options.size` processes that call
// it with the same store and job. The folder of a file store is created if missing. Keys
// are never deleted: a store holding the keys of an earlier run with the same job name is an
// error, so give each run a fresh folder, or a fresh job name on a shared Redis.
//
// Collective: every process must call it with the same store, job, size and lanes; it
// blocks until all have connected or `options.timeout` has passed. The first call in a
// process makes SIGPIPE ignored if it had the default action (Gloo writes to sockets that
// a dead peer may have closed; the default action would kill this process). Throws:
//   InvalidArgument  rank, size, lanes or timeout out of range, or an empty job;
//   ConfigError      a malformed store URL (the message shows it and the accepted forms);
//                    the store cannot be used (Redis unreachable: names host:port; folder
//                    not writable; keys of an earlier run with this job); the rendezvous
//                    timed out (says how many processes joined), a peer could not be
//                    connected (with a hint about --host), or the closing barrier of the
//                    rendezvous failed (a peer died meanwhile).
// Where every process runs on this host (and options.shared_memory), every message goes
// through shared memory instead (src/engines/shm/shm_transport.h, composed with this
// transport by a SplitTransport): failures are told the same way (the notice in the store,
// and in each process's segment with a flag in every peer's), a dead peer is seen through its
// process's exit, and the traits differ (receives may be longer than their messages; frames
// as long as OpenMPI's).
// The transport is thread-safe in the sense of Transport: one thread per lane at a time,
// different lanes at once; abort() from any thread at any time. post() allocates only
// small per-message objects of Gloo (no data copies, no big buffers); it skips zero-byte
// messages (both sides skip the same ones) and copies messages to this process itself at
// once (the k-th send to self is the k-th receive from self, in one post; unmatched ones
// are InvalidArgument). Known limit of Gloo 0.5: a message whose transfer was under
// way when its peer died is not failed by Gloo; its wait ends at the deadline, as Timeout.
std::unique_ptr<Transport> make_gloo_transport(const GlooOptions& options);

}  // namespace replicator::detail
