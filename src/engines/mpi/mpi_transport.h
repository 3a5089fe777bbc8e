// The mpi transport: the Transport of a job launched by mpirun or srun, over OpenMPI.
//
// Each lane is its own duplicate of MPI_COMM_WORLD, so the threads of a process drive their
// lanes at once (MPI_THREAD_MULTIPLE); one more duplicate carries abort notices. Every
// communicator returns its errors (MPI_ERRORS_RETURN), and each MPI error becomes a
// replicator error naming MPI's own message and the peer rank.
#pragma once

#include <cstddef>
#include <memory>

#include "src/base/launch_env.h"  // launched_by_mpi()
#include "src/engines/mpi/mpi_options.h"
#include "src/engines/native.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Makes a transport with `options.lanes` lanes (its NativeCollectives: MPI_Allreduce) over every
// process of MPI_COMM_WORLD. Initialises MPI with MPI_THREAD_MULTIPLE if nobody has yet; an MPI
// initialised here is finalised once, at process exit, and is shared by every transport of the
// process (MPI cannot be initialised twice), so several transports may be made, one after another
// or side by side.
//
// Collective: every process must call it, in the same order relative to its other calls,
// with the same `options`; it blocks until all have. Not to be called concurrently with
// itself by two threads of one process. Throws:
//   ConfigError  MPI was already finalised, its initialisation failed, it provides less than
//                MPI_THREAD_MULTIPLE (the message says what it provides), or the processes
//                asked for different numbers of lanes (raised on every process);
//   InvalidArgument `options.lanes` < 1 (raised on every process);
//   Error        duplicating MPI_COMM_WORLD failed.
// With `options.shared_memory`, where every process runs on one host
// (ShmMesh::host_identity), messages that half a ring holds (512 KiB in a small job: a
// collective's frames, and the data of small and middle collectives) go through shared
// memory (src/engines/shm/shm_transport.h, composed with MPI by a SplitTransport,
// src/engines/split_transport.h) instead of MPI: no rendezvous handshake, and one round trip of
// a small message costs a fraction of a microsecond. Frames may then be 16 KiB. A send and its
// receive are either both that small or both not (only a frame's receive is longer than its
// message, and it is at most 16 KiB), so each path keeps its own order. Longer messages, the
// engine's own collectives and abort notices stay on MPI. A failure on either path poisons
// both and is announced on both.
// The transport is thread-safe in the sense of Transport: one thread per lane at a time,
// different lanes at once; abort() from any thread at any time. When a wait fails, the
// lane's receives are cancelled, but OpenMPI cannot cancel a send: one a late peer has not
// taken yet is freed unfinished after 50 ms, and that peer may still read its buffer.
std::unique_ptr<Transport> make_mpi_transport(const MpiOptions& options);

// Whether a process whose transport failed in a way a peer may not survive (a timeout, a lost
// or broken peer) ends the whole job at exit with MPI_Abort, saying why once, instead of
// waiting in MPI_Finalize for a peer that may never come (default: yes). For tests that make
// transports fail on purpose while every process stays alive. Thread-safe; never throws.
void set_abort_job_at_exit(bool enabled);

}  // namespace replicator::detail
