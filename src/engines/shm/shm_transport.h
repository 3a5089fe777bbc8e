// The shm transport: the processes of one host talking through shared memory (a ShmMesh), as
// a Transport of its own. The mpi and gloo engines meet their peers their own way (MPI's
// control communicator, Gloo's store), make and attach the mesh there, and compose this
// transport with theirs (split_transport.h): the gloo engine sends every message through it,
// the mpi engine those that half a ring holds.
//
// post() copies messages to this process itself at once (as the gloo transport does) and hands
// the rest to the mesh; wait() spins, yields, then parks on the lane's bell (or naps, where
// the mesh has no bells); test() moves what it can and returns.
//
// Failures: abort() writes this process's notice into its segment and flags it in every peer's
// (ShmMesh::announce_failure), so a peer's wait throws Aborted("process q failed: why", with
// the replica) at once. A peer whose process exited is PeerLost, or Aborted where it left a
// notice. A wait that fails (timeout, lost peer, a message longer than its receive) poisons
// the transport and announces it as abort() does; `on_fatal` hears first of those a peer may
// not survive (every failure but a peer's announced one).
//
// Threads: as Transport (one thread per lane at a time, different lanes at once; abort() from
// any thread at any time).
#pragma once

#include <memory>

#include "src/engines/shm/shm_mesh.h"
#include "src/engines/shm/shm_options.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Makes the transport over `mesh`, which every peer has attached to (ShmMesh::attach_offers or
// attach); the transport owns it, and its traits name it as the host's cores. Its name() is
// "shm"; its traits: two copies and no handshake a message, so receives may be longer than
// their message, nothing is gained by posting early, and steps from 64 KiB to half a ring
// keep two in flight without waiting for room. Never blocks; throws InvalidArgument for a
// null mesh.
std::unique_ptr<PolledTransport> make_shm_transport(std::unique_ptr<ShmMesh> mesh,
                                                    ShmOptions options);

}  // namespace replicator::detail
