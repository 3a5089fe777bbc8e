// ShmMesh: the processes of one host talking through shared memory, the same-host path of
// both engines where every process of a job runs on one host: the gloo engine's messages
// skip TCP and Gloo's event loop (gloo_transport.h), the mpi engine's up to half a ring
// skip OpenMPI's handshakes (mpi_transport.h).
//
// Each process owns one segment in /dev/shm holding, for every lane and every other
// process, a ring that the other process writes into and this one reads from (a byte
// stream of messages, each an 8-byte length and its bytes padded to 8), and per lane a
// "bell": a 32-bit word on which a waiting thread parks (a futex shared between
// processes), and that a peer bumps when it wrote into one of this process's rings or
// freed room this process waits for, while a thread is parked there. A message between
// two spinning threads makes no system call and rings no bell.
//
// There is no thread of its own: a send is copied into its ring by post() as far as the
// ring has room, and the rest, like every receive, by wait(), which moves every pending
// message of its lane (not only those it waits for), so two processes that wait on each
// other always make progress. A send completes once its last byte is in the ring.
//
// Failures: announce_failure() writes this process's notice (why it failed) into its own
// segment, then flags it in every peer's segment and rings all their bells, so a peer that
// sees the flag reads the notice (notice_of); a peer that died is seen through a pidfd (its
// exit, zombie or not), polled whenever a waiting thread wakes from its park (at least every
// 50 ms).
//
// Threads: one thread per lane at a time, different lanes at once (as Transport);
// announce_failure() and wake_local() from any thread at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/comm/poison.h"
#include "src/engines/host_cores.h"
#include "src/engines/transport.h"

namespace replicator::detail {

class ShmMesh final : public HostCores {
 public:
  using Clock = std::chrono::steady_clock;
  using Ticket = std::uint64_t;

  // What makes two processes "one host" here: the same hostname, boot, and ipc, mount, pid
  // and network namespaces (so they see the same /dev/shm, each other's pids, and the same
  // addresses). Empty where it cannot be read. Never throws.
  static std::string host_identity() noexcept;

  // Creates this process's segment for `size` processes and `lanes` lanes, rings of
  // `ring_bytes` (0: ring_bytes_for(size, lanes); every process of a host must use the same),
  // its memory allocated at once. Does not block. Throws Error where /dev/shm refuses or has
  // no room (the message says why) and InvalidArgument for a rank, size or lanes out of range
  // or a ring size that is not a power of two from 64 KiB to 1 MiB.
  //
  // `parks`: whether the job's threads park in wait(); every process of a job must pass the
  // same. With it, each write of a ring's index is a full fence followed by a look at the
  // reader's (or writer's) sleepers, so that a thread about to park is always rung. Without
  // it (the mpi engine's, whose waits never park), the indices are written with release
  // stores and no bell is rung for data: the fence waits for every store before it to land
  // (in a profile of 256 KiB all-reduces through MPI_Allreduce, 87 % of the next frame's
  // send, about 0.9 µs a call; three interleaved runs with and without it did not tell the
  // two apart). wait() then naps 50 µs where it would park.
  ShmMesh(int rank, int size, int lanes, bool parks = true, std::size_t ring_bytes = 0);
  // Unmaps every segment and removes this process's name from /dev/shm if unlink() has not.
  ~ShmMesh();
  ShmMesh(const ShmMesh&) = delete;
  ShmMesh& operator=(const ShmMesh&) = delete;

  // Ring size: 1 MiB for up to 16 rings per segment, shrinking (to 64 KiB at least) as the
  // job grows so that a segment stays near 16 MiB; with `l2` (a core's L2 cache in bytes; 0:
  // no bound), at most an eighth of it, so that a step's ring, its peer's, its source and its
  // destination fit in half of it. A power of two. Every process of a host computes the same.
  static std::size_t ring_bytes_for(int size, int lanes, std::size_t l2 = 0);
  // This host's L2 cache per core in bytes, as the C library reports it; 0 when it does not.
  static std::size_t l2_bytes() noexcept;
  std::size_t ring_bytes() const { return ring_bytes_; }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int lanes() const noexcept override { return lanes_; }
  // The segment's name in /dev/shm (unique to this process and moment).
  const std::string& name() const { return name_; }

  // Makes a mesh for this process, or null where this host's identity cannot be read or
  // /dev/shm refuses (the job then talks another way). Never throws but for bad arguments.
  static std::unique_ptr<ShmMesh> try_make(int rank, int size, int lanes, bool parks = true,
                                           std::size_t ring_bytes = 0);
  // What this process tells its peers so they can attach: host identity, segment name, pid.
  std::string offer() const;
  // Attaches to the peers whose offers (by rank; this process's own is skipped) say they run
  // on this host; false, with nothing attached, if one does not, an offer is malformed, or a
  // segment or process cannot be opened. Never throws.
  bool attach_offers(const std::vector<std::string>& offers) noexcept;

  // Maps every peer's segment (names[q]) and opens a pidfd on its process (pids[q]); this
  // process's own entries are ignored. Blocks only on the system calls. Throws Error naming
  // the peer whose segment or process cannot be opened (nothing is kept then).
  void attach(const std::vector<std::string>& names, const std::vector<int>& pids);
  // Removes this process's name from /dev/shm (the mappings stay). Call once every peer has
  // attached. Never throws.
  void unlink() noexcept;

  // Queues the sends and receives (messages to or from this process itself are skipped; the
  // caller copies them) under `ticket`, and copies what fits of the sends into their rings.
  // Only those of at most `max_bytes` are taken: a caller with another path for larger ones
  // posts those there. A receive takes a message of at most its size. Never blocks; throws
  // InvalidArgument for a lane out of range (peers are the caller's to check).
  void post(int lane, Ticket ticket, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            std::size_t max_bytes = SIZE_MAX);

  enum class Outcome {
    kDone,        // every message of the posts up to the ticket completed
    kPoisoned,    // `poison` was set (this process failed; wake_local() woke the wait)
    kTimedOut,    // the deadline passed first (see missing())
    kPeerFailed,  // `peer` announced a failure
    kPeerGone,    // `peer`'s process exited
    kTooLong,     // `peer` sent a message longer than its receive (`sent` > `expected`)
  };
  struct WaitResult {
    Outcome outcome = Outcome::kDone;
    int peer = -1;
    std::size_t sent = 0;
    std::size_t expected = 0;
  };

  // Blocks until every message of `lane` posted with a ticket up to `ticket` has completed,
  // moving every pending message of the lane meanwhile. Spins for `spin`, then yields the
  // core at every look for `yield` (at least a few times), then parks (without bells: naps
  // 50 µs between looks). Never throws; a result other than kDone leaves the lane's messages
  // pending, for missing() and then drop().
  WaitResult wait(int lane, Ticket ticket, Clock::time_point deadline,
                  std::chrono::microseconds spin, std::chrono::microseconds yield,
                  const Poison& poison) noexcept;

  // The longest a wait() parks before it looks at its peers' processes and the clock again
  // (50 ms unless set): a bell ends a park sooner. Tests lengthen it, so that only a bell
  // can end a park in time. Call before any wait(); never throws.
  void set_max_park(std::chrono::milliseconds longest) noexcept { max_park_ = longest; }

  // Moves what it can of the lane's pending messages, once, and says whether every message
  // of the posts up to `ticket` has completed (then forgets the completed ones, as wait()
  // does). For a caller that waits on other things too; it watches failures itself. Never
  // blocks or throws; a message longer than its receive is reported in `error` (kTooLong).
  bool poll(int lane, Ticket ticket, WaitResult* error) noexcept;

  // The peers of the posts up to `ticket` on `lane` whose receives have not all completed
  // (`receives_done` false), or, if those all have, whose sends have not. Sorted, unique.
  std::vector<int> missing(int lane, Ticket ticket, bool* receives_done) const;
  // Forgets every pending message of `lane` (their buffers are never touched again).
  void drop(int lane) noexcept;

  // HostCores (host_cores.h): the core the thread of `lane` started its last step on, for
  // the other processes of the host, kept in each process's own segment: publish_core()
  // writes this process's, core_of() reads `process`'s (this one's too; -1 where none was
  // published, or out of range). Never block or throw.
  void publish_core(int lane, int cpu) noexcept override;
  int core_of(int process, int lane) const noexcept override;

  // Writes `notice` (cut to 8 KiB) into this process's segment, then flags this process as
  // failed in every attached peer's segment and rings their bells. Only the first call
  // announces. Never blocks, never throws.
  void announce_failure(std::string_view notice = {}) noexcept;
  // The notice `process` announced its failure with (empty if it announced none, or out of
  // range). Throws only std::bad_alloc.
  std::string notice_of(int process) const;
  // A peer that announced a failure (kPeerFailed) or whose process exited (kPeerGone), else
  // kDone: what wait() watches, for a caller that only poll()s. Never blocks or throws.
  WaitResult peer_failure() const noexcept;
  // Rings this process's own bells, so its waits in progress look at `poison` again.
  void wake_local() noexcept;

 private:
  struct Segment;
  struct Op;
  struct Lane;

  // Moves what it can of the lane's pending messages; returns whether anything moved.
  bool progress(int lane, WaitResult* error) noexcept;
  bool send_some(int lane, int peer) noexcept;
  bool recv_some(int lane, int peer, WaitResult* error) noexcept;
  bool complete(const Lane& lane, Ticket ticket) const noexcept;
  void forget_completed(int lane) noexcept;
  // Bumps `process`'s bell of `lane` and wakes the threads parked on it.
  void ring_bell(int process, int lane) noexcept;
  // The same, only if a thread of `process` is parked (or about to park) on it.
  void ring_bell_if_parked(int process, int lane) noexcept;
  int failed_peer() const noexcept;
  int gone_peer() const noexcept;

  const int rank_;
  const int size_;
  const int lanes_;
  const bool parks_;
  std::chrono::milliseconds max_park_;
  const std::size_t ring_bytes_;
  const std::size_t segment_bytes_;
  std::string name_;
  std::string host_;  // host_identity() when made
  bool linked_ = false;
  std::atomic<bool> announced_{false};
  std::vector<std::byte*> segments_;  // by process; this process's own at rank_
  std::vector<int> pidfds_;           // by process; -1 for this process
  std::vector<Lane> lane_state_;
};

}  // namespace replicator::detail
