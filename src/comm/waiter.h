// Spin-then-park waiting on a condition, with a deadline.
//
// A waiter spins for a short budget (cheap when peers are running on other cores), then
// yields, then parks on a futex "epoch" word that every state change bumps. Waking is
// free when nobody sleeps: the waker only makes the syscall if `sleepers` is non-zero.
//
// With a spin budget (every waiting thread has a core of its own), it yields for up to
// kYieldAfterSpin before it parks: nobody else wants that core, so yielding costs nothing
// and sees the condition at once, while a parked thread costs its waker a system call and
// itself the wake-up of an idle core, which on a virtual machine (a halted vCPU, stolen
// time) took long: two local replicas that parked after 50 µs trained at 836-1,091
// images/s against 1,229-1,393 spinning for 50 ms, three runs each, interleaved. The
// transports' waits do the same (mpi: kYield; gloo on shared memory: kSharedYield).
// Without a spin budget (more threads than cores) it yields a few times, then parks.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "src/comm/futex.h"

namespace replicator::detail {

class Waiter {
 public:
  using Clock = std::chrono::steady_clock;

  // Wakes every parked waiter. Call after making a condition true. Costs one load when
  // nobody is parked: a waiter registers in `sleepers_` before it re-checks its condition,
  // so either it sees the condition true or this sees it registered (all seq_cst).
  void notify() {
    if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&epoch_);
  }

  // Waits until done() is true; returns false if `deadline` passed first.
  // `spin` is how long to busy-wait before parking (zero when cores are oversubscribed).
  static constexpr std::chrono::milliseconds kYieldAfterSpin{50};

  template <typename Done>
  bool wait(Done&& done, Clock::time_point deadline, std::chrono::microseconds spin) {
    if (done()) return true;
    if (spin.count() > 0) {
      const auto spin_end = Clock::now() + spin;
      for (int i = 0;; ++i) {
        for (int k = 0; k < 16; ++k) {
          cpu_relax();
          if (done()) return true;
        }
        if ((i & 7) == 0 && Clock::now() >= spin_end) break;
      }
      const auto yield_end = std::min(deadline, spin_end + kYieldAfterSpin);
      for (int i = 0;; ++i) {
        sched_yield();
        if (done()) return true;
        if ((i & 15) == 0 && Clock::now() >= yield_end) break;
      }
    } else {
      for (int i = 0; i < 4; ++i) {
        sched_yield();
        if (done()) return true;
      }
    }
    for (;;) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = epoch_.load(std::memory_order_seq_cst);
      if (done()) {
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        return true;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        return false;
      }
      // Park at most 100 ms at a time so a deadline is never overslept by much.
      futex_wait(&epoch_, seen,
                 std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100)));
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      if (done()) return true;
    }
  }

 private:
  alignas(64) std::atomic<std::uint32_t> epoch_{0};
  alignas(64) std::atomic<std::uint32_t> sleepers_{0};
};

}  // namespace replicator::detail
