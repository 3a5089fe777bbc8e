// LocalEngine: the replicas (threads) of one process and the shared memory through which
// they meet: a slot per replica where it publishes its call (and, on the staged path, a
// copy of its input), and a barrier with a deadline and a poison flag. The collectives
// layer runs its algorithms between the barriers; this engine never looks at the data.
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

#include "src/comm/descriptor.h"
#include "src/comm/waiter.h"

namespace replicator::detail {

class LocalEngine {
 public:
  using Clock = Waiter::Clock;
  // Bytes of each replica's staging area (one per parity of the sequence number).
  static constexpr std::size_t kStagingBytes = std::size_t{16} << 10;

  // `num_replicas` local replicas, global ids first .. first + num_replicas - 1 of a job of
  // `total` replicas. `timeout` is the default deadline; `spin` how long a waiting
  // replica busy-waits before it parks.
  LocalEngine(int num_replicas, int first, int total, std::chrono::milliseconds timeout,
              std::chrono::microseconds spin);
  ~LocalEngine();
  LocalEngine(const LocalEngine&) = delete;
  LocalEngine& operator=(const LocalEngine&) = delete;

  int size() const { return n_; }
  int first() const { return first_; }
  int total() const { return total_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Replica `me`'s published descriptor and staging area for collectives of `parity`
  // (sequence & 1). A replica cannot start collective k+2, and overwrite k's slot, before
  // all have arrived at k+1, that is, before all have finished reading slot k.
  Descriptor& descriptor(int me, int parity);
  std::byte* staging(int me, int parity);
  // Every replica's descriptor / staging area of `parity`, by local id (read-only views
  // owned by `me`, valid for the engine's lifetime).
  std::span<const Descriptor* const> calls(int me, int parity) const;
  std::span<std::byte* const> staging_of(int me, int parity) const;

  // Arrives at the barrier and blocks until every local replica has arrived, until the
  // deadline (throws Timeout naming the replicas that never arrived, after poisoning the
  // engine so that they fail too), or until the engine is poisoned (throws Aborted or the
  // Timeout that poisoned it). `d` names the collective in messages.
  void arrive_and_wait(int me, const Descriptor& d, Clock::time_point deadline,
                       std::chrono::milliseconds timeout);

  // Waits until every local replica has departed from the current collective (normally
  // or by an error), ignoring the poison: so no replica leaves while a peer thread still
  // reads or writes its buffers. Bounded because a replica in an exchange across processes
  // is released by its deadline or by the transport's abort.
  void depart(int me);

  // Throws (as arrive_and_wait) if the engine is poisoned. Never blocks.
  void check_poison(int me);

  // Releases every replica waiting now or later (until reset) with Aborted, naming
  // `replica` (a global id) and its error. Called when a step throws. Thread-safe.
  void fail(int replica, const std::string& what);

  // Makes the engine fresh for the next run. Only while no replica is inside it.
  void reset();

 private:
  struct Slot;
  static constexpr std::uint64_t kPoison = std::uint64_t{1} << 63;

  // Whether a phase whose arrivals must reach `target` completed, given the counter's
  // value `seen`; throws the poison's error if the group was poisoned before it did.
  bool phase_complete(int me, std::uint64_t seen, std::uint64_t target);
  [[noreturn]] void throw_poisoned(int me);
  // Sets the poison bit; the caller holds mu_ and has set cause_. Returns false if
  // `expected` (the counter value to poison at; empty: whatever it is) was stale.
  bool poison(std::optional<std::uint64_t> expected);

  const int n_;      // local replicas
  const int first_;  // global id of local replica 0
  const int total_;  // replicas in the job
  const std::chrono::milliseconds timeout_;
  const std::chrono::microseconds spin_;
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
    int replica = -1;  // the failed replica, or the one that saw the timeout
    std::string what;  // the failure's message, or the Timeout's message
    std::string op;    // Timeout fields
    std::uint64_t sequence = 0;
    std::chrono::milliseconds deadline{0};
    std::vector<int> missing;
  };
  std::optional<Cause> cause_;
};

}  // namespace replicator::detail
