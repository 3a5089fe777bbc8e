// Transport: what carries bytes between the processes of a job (MPI or Gloo over TCP).
//
// The collective algorithms across processes are written once against this small
// point-to-point vocabulary. A transport has `num_lanes()` independent lanes: lane l links
// the thread of local replica l in every process, so the L threads of a process drive
// their own inter-process traffic at once. One lane is used by one thread at a time;
// different lanes may be used concurrently.
//
// Messages are posted (post) and waited for (wait), so that a receive can be posted before the
// peer sends and data can move while the caller computes; exchange() does both at once.
// Every blocking call takes a deadline and throws:
//   Timeout   the deadline passed before the exchange completed (`missing` names the peer
//             processes that had not delivered);
//   PeerLost  a peer process died or closed its connections (`peer` is its rank);
//   Aborted   a peer process announced that its step failed.
// After any of these the transport is poisoned: every later call throws Aborted.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "replicator/dtype.h"
#include "src/engines/host_cores.h"

namespace replicator::detail {

struct SendOp {
  int peer;  // process rank
  const void* data;
  std::size_t bytes;
};

struct RecvOp {
  int peer;  // process rank
  void* data;
  std::size_t bytes;  // must equal what the peer sends
};

// What a transport is like: facts the chooser (src/collectives/plan.h) plans from.
struct TransportTraits {
  // A receive posted before the peer sends saves a round trip (Gloo: every message waits
  // for its receive to be announced), so the receives of the next collective's fixed-size
  // frames are best posted ahead. Over OpenMPI it only adds work.
  bool receives_ahead = false;
  // A receive may be matched by a shorter message (the rest of its buffer is left as it
  // was). OpenMPI: yes; Gloo: a message must be exactly as long as the receive it matches.
  bool receives_shorter = false;
  // Peers copy large messages straight out of this process's memory (OpenMPI's
  // single-copy transfers between processes on one host).
  bool streamed_results = false;
  // Messages up to this size go out at once; larger ones wait for the receiver first (a
  // rendezvous), which costs a round trip. 0: every message is the same.
  std::size_t eager_bytes = 0;
  // The range of message sizes a pipelined transfer is cut into: below `min_step_bytes`
  // a message costs more than its bytes; past `max_step_bytes` nothing more is gained.
  std::size_t min_step_bytes = std::size_t{64} << 10;
  std::size_t max_step_bytes = std::size_t{4} << 20;
  // Steps up to this size can instead stay in shared-memory rings between the processes
  // (0: the transport has none beside its steps above). A step there costs two copies and
  // no handshake, but both processes' threads must run at once to move it; so the chooser
  // cuts steps to it only where every replica thread has a core.
  std::size_t shared_step_bytes = 0;
  // The dtypes whose sums the engine's own all-reduce takes (NativeCollectives), a bit per
  // DType (native_sums()); 0: none, or the chooser is never to ask for it. Sums only: an
  // engine may apply min and max in either operand order on different processes.
  std::uint32_t native_sum_dtypes = 0;
  // Where the processes of this host tell each other the core of each replica thread
  // (host_cores.h): the engine's shared memory between them, owned by the transport and
  // living as long as it; null where the processes do not share this host's memory.
  HostCores* host_cores = nullptr;
  // Every process of the job runs on this host, so they can open each other's device memory
  // (CUDA IPC): device buffers then move between them without the host (device_comm.h).
  bool one_host = false;

  bool native_sums(DType dtype) const {
    return ((native_sum_dtypes >> static_cast<unsigned>(dtype)) & 1u) != 0;
  }
};

// The bit of `dtype` in TransportTraits::native_sum_dtypes.
constexpr std::uint32_t dtype_bit(DType dtype) {
  return std::uint32_t{1} << static_cast<unsigned>(dtype);
}

class PointToPoint;

class Transport {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;  // "mpi", "gloo"
  virtual int rank() const = 0;               // this process, 0..size()-1
  virtual int size() const = 0;               // number of processes P
  virtual int num_lanes() const = 0;

  // Which posts a wait() covers: post() numbers them 1, 2, ... on each lane.
  using Ticket = std::uint64_t;

  // Starts every send and receive and returns at once, without waiting for any: they complete
  // in later wait() calls on the lane. Returns the post's ticket. Messages between two processes
  // on one lane are delivered in the order they were posted: the k-th message one process
  // sends to another on a lane lands in the k-th receive the other posted from it. Sizes must
  // match the peer's (a send may be shorter than its receive where traits().receives_shorter); a
  // mismatch is an error of the caller (the algorithms exchange headers first). Send buffers are
  // read and receive buffers written until a wait() covering the ticket returns, or until the call
  // that reports a failure of the transport throws (every message of the lane is abandoned then;
  // OpenMPI cannot cancel a send that a peer has not taken, see mpi_transport.h). Throws
  // InvalidArgument (lane or peer out of range), Aborted (poisoned), PeerLost or Error (posting
  // failed; poisons).
  virtual Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) = 0;

  // Blocks until every message posted on `lane` with a ticket up to `ticket` has completed
  // (later posts may complete too, or not). Throws Timeout, PeerLost, Aborted (see above).
  virtual void wait(int lane, Ticket ticket, Clock::time_point deadline) = 0;

  // post() then wait() for it: blocks until every send and receive has completed.
  void exchange(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                Clock::time_point deadline) {
    wait(lane, post(lane, sends, recvs), deadline);
  }

  // Tells every peer that this process failed (`why` goes into their Aborted message, and
  // `cause_replica`, the global id of the replica whose failure it was, into its
  // cause_replica()) and poisons this transport. Best effort, never blocks for long, never
  // throws.
  virtual void abort(const std::string& why, std::optional<int> cause_replica) noexcept = 0;

  // What the transport is like; the collectives' chooser plans from it. Never blocks.
  virtual TransportTraits traits() const = 0;

  // The transport's point-to-point messages (below), or null where it has none (every
  // transport but gloo's). Never blocks.
  virtual PointToPoint* point_to_point() { return nullptr; }
};

// Point-to-point messages beside the lanes' collectives (torch.distributed's send and recv),
// between two processes only. They are not ordered with the lanes' exchanges; they are matched
// by peer and tag: the k-th send with a tag from one process to another lands in the k-th
// receive with that tag that the other makes from it (calls of one peer and tag made at once
// on several threads count in the order they post, which the caller does not control). Before any
// data moves the receiver compares the sender's call with its own (size and kind) and answers, so
// that a send and a receive that disagree both throw CollectiveMismatch naming the two calls, and
// the data of one never lands in the buffer of the other. Thread-safe: any number of threads may
// send and receive at once, beside the users of the lanes.
class PointToPoint {
 public:
  // What one side called, as the other sees it.
  struct Call {
    std::size_t bytes = 0;
    std::uint32_t kind = 0;  // what the bytes are (a dtype); the two sides must agree
    std::string text;        // the call and its site, for messages: "send(f32 x 4, to 1, tag 0)"
  };

  // Sends `call.bytes` of `data` to the receive `peer` makes with `tag`; blocks until the peer
  // has taken them (Gloo moves a message once its receive is posted). Throws InvalidArgument
  // (peer out of range, or this process) before anything is sent; CollectiveMismatch (the
  // peer's receive disagrees); Timeout (the deadline passed: `missing` names the peer);
  // PeerLost; Aborted (the transport is poisoned, or the peer announced a failure). Every
  // error but InvalidArgument poisons the transport, as a failed exchange does.
  virtual void send(int peer, std::uint64_t tag, const Call& call, const void* data,
                    Transport::Clock::time_point deadline) = 0;
  // Receives `call.bytes` into `data` from the send `peer` makes with `tag`; blocks until they
  // are there. Throws as send() does.
  virtual void recv(int peer, std::uint64_t tag, const Call& call, void* data,
                    Transport::Clock::time_point deadline) = 0;

 protected:
  ~PointToPoint() = default;
};

// A transport whose messages can be moved and looked at without blocking (MPI's requests,
// shared memory's rings; not Gloo's waits), so that one thread can wait on two transports at
// once (split_transport.h).
class PolledTransport : public Transport {
 public:
  // Moves what it can of the lane's messages, once, and says whether every message posted on
  // `lane` with a ticket up to `ticket` has completed (as a wait() that returned). Never
  // blocks; a transport that looks for failures only every so many calls may let a few
  // calls pass first. Throws as wait() does (PeerLost, Aborted, Error), never Timeout: the
  // caller keeps the clock, and calls wait() once it has passed.
  virtual bool test(int lane, Ticket ticket) = 0;
};

}  // namespace replicator::detail
