// LocalGroup: the replicas of one process and the shared memory through which their
// collectives run.
//
// A collective is: publish this replica's descriptor (and, on the staged path, a copy of
// its input) in its slot; arrive at the group's barrier; check that every replica made
// the same call; run the algorithm; on the direct path, arrive at the barrier again so no
// replica returns while a peer still touches its buffers.
//
// The barrier is one 64-bit counter of arrivals (phase k completes at k·n) whose top bit
// is the poison flag. Poisoning (a timeout, a failed step) sets that bit, so no phase can
// complete after it and every waiter wakes and throws; a phase that completed before it
// is unaffected, so no replica ever reads the buffers of a peer that has left.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "replicator/replica_context.h"
#include "src/collectives/cross_process.h"
#include "src/collectives/peers.h"
#include "src/core/waiter.h"

namespace replicator::detail {

class LocalGroup {
 public:
  // `num_replicas` local replicas; with `layout` (not owned, may be null for a one-process
  // job) they are replicas layout->rank * num_replicas + 0..num_replicas-1 of a job that
  // spans layout->processes processes.
  LocalGroup(int num_replicas, std::chrono::milliseconds timeout, std::chrono::microseconds spin,
             const ProcessLayout* layout = nullptr);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const { return n_; }

  // Runs one collective for replica `me` as its collective number `sequence`, which it
  // increments once the call is valid (a call refused by local checks takes no number,
  // so every replica's count stays in step with the barrier). Blocks until it completes;
  // throws as ReplicaContext documents.
  void collective(int me, std::uint64_t& sequence, const Call& call);

  // Releases every replica waiting now or later (until reset) with Aborted, naming
  // `replica` and its error. Called when a step throws. Thread-safe.
  void fail(int replica, const std::string& what);

  // Makes the group fresh for the next run. Only while no replica is inside it.
  void reset();

 private:
  struct Slot;
  static constexpr std::uint64_t kPoison = std::uint64_t{1} << 63;

  void arrive_and_wait(int me, const Descriptor& d, Waiter::Clock::time_point deadline,
                       std::chrono::milliseconds timeout);
  // Whether a phase whose arrivals must reach `target` completed, given the counter's
  // value `seen`; throws the poison's error if the group was poisoned before it did.
  bool phase_complete(int me, std::uint64_t seen, std::uint64_t target);
  [[noreturn]] void throw_poisoned(int me);
  // Across processes: waits until every local replica has left the data phase of the
  // current collective (normally or by an error), so no replica leaves while a peer thread
  // still reads or writes its buffers. Ignores the poison; bounded because a thread in an
  // exchange is released by its deadline or by the transport's abort.
  void depart(int me);
  // Sets the poison bit; the caller holds mu_ and has set cause_. Returns false if
  // `expected` (the counter value to poison at; empty: whatever it is) was stale.
  bool poison(std::optional<std::uint64_t> expected);
  void check_match(int me, const Descriptor& d, std::span<const Descriptor* const> calls);

  const int n_;                    // local replicas
  const ProcessLayout* layout_;    // null in a one-process job
  const int first_;                // global id of local replica 0
  const int total_;                // replicas in the job
  const std::chrono::milliseconds timeout_;
  const std::chrono::microseconds spin_;
  const std::size_t staging_capacity_;
  std::vector<std::unique_ptr<Slot>> slots_;

  alignas(64) std::atomic<std::uint64_t> arrivals_{0};
  // The arrival count when the poison bit was set: phases with a target at or below it
  // completed before the poison and finish normally. Written under mu_ before the bit.
  std::atomic<std::uint64_t> poisoned_at_{0};
  alignas(64) std::atomic<std::uint64_t> departures_{0};
  Waiter waiter_;

  // Why the group is poisoned; written once under mu_ before the poison bit is visible.
  std::mutex mu_;
  struct Cause {
    bool timed_out = false;
    int replica = -1;         // the failed replica, or the one that saw the timeout
    std::string what;         // the failure's message, or the Timeout's message
    std::string op;           // Timeout fields
    std::uint64_t sequence = 0;
    std::chrono::milliseconds deadline{0};
    std::vector<int> missing;
  };
  std::optional<Cause> cause_;
};

}  // namespace replicator::detail
