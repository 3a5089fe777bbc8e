// Transport: what carries bytes between the processes of a job (MPI or Gloo over TCP).
//
// The collective algorithms across processes are written once against this small
// point-to-point vocabulary. A transport has `num_lanes()` independent lanes: lane l links
// the thread of local replica l in every process, so the L threads of a process drive
// their own inter-process traffic at once. One lane is used by one thread at a time;
// different lanes may be used concurrently.
//
// Every blocking call takes a deadline and throws:
//   Timeout   the deadline passed before the exchange completed (`missing` names the peer
//             processes that had not delivered);
//   PeerLost  a peer process died or closed its connections (`peer` is its rank);
//   Aborted   a peer process announced that its step failed.
// After any of these the transport is poisoned: every later call throws Aborted.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace replicator::detail {

struct SendOp {
  int peer;            // process rank
  const void* data;
  std::size_t bytes;
};

struct RecvOp {
  int peer;            // process rank
  void* data;
  std::size_t bytes;   // must equal what the peer sends
};

class Transport {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;  // "mpi", "gloo"
  virtual int rank() const = 0;               // this process, 0..size()-1
  virtual int size() const = 0;               // number of processes P
  virtual int num_lanes() const = 0;

  // Starts every send and receive, then blocks until all have completed. Messages between
  // two processes on one lane arrive in the order they were sent. Sizes must match the
  // peer's; a mismatch is an error of the caller (the algorithms exchange headers first).
  virtual void exchange(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                        Clock::time_point deadline) = 0;

  // Bytes per step of a pipelined exchange that pay on this transport: large transfers
  // are cut into steps of this size so each arrives while the last is reduced in cache.
  // 0: do not cut (a transport whose every message costs a round trip of tens of µs).
  virtual std::size_t pipeline_bytes() const = 0;

  // Tells every peer that this process failed (`why` goes into their Aborted message) and
  // poisons this transport. Best effort, never blocks for long, never throws.
  virtual void abort(const std::string& why) noexcept = 0;

  // The engine's own all-reduce (MPI_Allreduce, gloo::allreduce) of f32 sums on lane 0,
  // for benchmarks that compare against it. Blocks.
  virtual void native_all_reduce_f32(float* data, std::size_t count) = 0;
};

}  // namespace replicator::detail
