// The tests' shared harness: run N replicas (or fake processes) as threads and keep what
// each threw, look at a kept exception as a type, describe it for failure output, and wait
// for another thread to reach a point without sleeping a fixed time. Header-only; needs
// the replicator errors, neither GoogleTest nor LibTorch (the multi-process program uses it).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"

namespace replicator::harness {

// Runs `fn()`; returns what it threw, nullptr when it returned.
template <typename Fn>
std::exception_ptr capture(Fn&& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// Runs `fn()`; whatever it throws is kept in `slot`, then rethrown (so a step still fails
// and releases the others, while the test sees what this replica caught).
template <typename Fn>
void keep_and_rethrow(std::exception_ptr& slot, Fn&& fn) {
  try {
    fn();
  } catch (...) {
    slot = std::current_exception();
    throw;
  }
}

// Runs `body(i)` for i in [0, n) on n threads and joins them; returns one slot per thread:
// what it threw, nullptr where it returned.
template <typename Fn>
std::vector<std::exception_ptr> run_threads(int n, Fn&& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back(
        [&, i] { errors[static_cast<std::size_t>(i)] = capture([&] { body(i); }); });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// The exception in `error` as an E, if it is one.
template <typename E>
std::optional<E> caught_as(const std::exception_ptr& error) {
  if (!error) return std::nullopt;
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return e;
  } catch (...) {
  }
  return std::nullopt;
}

// "<name>: <what()>" if `error` holds an E.
template <typename E>
std::optional<std::string> described_as(const std::exception_ptr& error, const char* name) {
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return std::string(name) + ": " + e.what();
  } catch (...) {
  }
  return std::nullopt;
}

// "Type: message" for failure output; "nothing" for nullptr.
inline std::string describe(const std::exception_ptr& error) {
  if (!error) return "nothing";
  std::optional<std::string> out;
  (out = described_as<CollectiveMismatch>(error, "CollectiveMismatch")) ||
      (out = described_as<Timeout>(error, "Timeout")) ||
      (out = described_as<Aborted>(error, "Aborted")) ||
      (out = described_as<PeerLost>(error, "PeerLost")) ||
      (out = described_as<InvalidArgument>(error, "InvalidArgument")) ||
      (out = described_as<ReplicaFailed>(error, "ReplicaFailed")) ||
      (out = described_as<Error>(error, "replicator::Error")) ||
      (out = described_as<std::exception>(error, "std::exception"));
  return out.value_or("a non-standard exception");
}

// Empty when every slot of `errors` holds an E, except the slots in `skip`; otherwise
// "<what> i caught <describe>" for the first slot that does not (checked with EXPECT_EQ(..., "")).
template <typename E>
std::string first_not_raising(const std::vector<std::exception_ptr>& errors,
                              const std::vector<int>& skip = {},
                              const std::string& what = "replica") {
  for (std::size_t i = 0; i < errors.size(); ++i) {
    bool skipped = false;
    for (const int s : skip) skipped = skipped || static_cast<std::size_t>(s) == i;
    if (skipped || caught_as<E>(errors[i])) continue;
    return what + " " + std::to_string(i) + " caught " + describe(errors[i]);
  }
  return {};
}

// Empty when no slot holds an exception; otherwise one line per slot that does.
inline std::string all_errors(const std::vector<std::exception_ptr>& errors,
                              const std::string& what = "replica") {
  std::string out;
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (errors[i]) out += what + " " + std::to_string(i) + ": " + describe(errors[i]) + "\n";
  }
  return out;
}

// A count another thread waits to see reach zero: what a test waits on instead of
// sleeping and hoping that the other thread got there (std::latch has no bounded wait).
class CountDown {
 public:
  explicit CountDown(int count = 1) : count_(count) {}
  void count_down() {
    std::lock_guard lock(mu_);
    if (count_ > 0 && --count_ == 0) cv_.notify_all();
  }
  // Whether the count reached zero within `bound` (a bound, so that a library that never
  // gets there fails the test instead of hanging it).
  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> bound) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, bound, [&] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;
};

// Polls `condition` until it holds or `bound` has passed; returns whether it held. For
// conditions outside this process (a port that accepts, a child that runs).
template <typename Condition, typename Rep, typename Period>
bool poll_until(Condition&& condition, std::chrono::duration<Rep, Period> bound,
                std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

// The calling thread's kernel id (for thread_sleeping).
inline pid_t this_thread_id() { return static_cast<pid_t>(::gettid()); }

// Whether thread `tid` of this process sleeps in the kernel (state S or D in
// /proc/self/task/<tid>/stat): a thread known to be past its last step before a blocking
// call, seen sleeping, is blocked in that call.
inline bool thread_sleeping(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'S' || state == 'D';
}

// What `interrupt_when_blocked` saw.
struct Interrupted {
  bool started = false;           // start() returned
  std::exception_ptr ended_with;  // what start() or block() threw; nullptr: block() returned
};

// Runs `block(start())` on a new thread and, once start() has returned and that thread is
// seen asleep in the kernel (polled for up to 5 s; past that, anyway: a blocking call
// entered after `interrupt()` must end the same), calls `interrupt()` on this one; then
// joins and returns what the blocking call ended with, as recorded inside the thread.
template <typename Start, typename Block, typename Interrupt>
Interrupted interrupt_when_blocked(Start&& start, Block&& block, Interrupt&& interrupt) {
  Interrupted out;
  CountDown started(1);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> ended{false};
  std::thread blocked([&] {
    tid = this_thread_id();
    out.ended_with = capture([&] {
      auto token = start();
      out.started = true;
      started.count_down();
      block(token);
    });
    ended = true;
    started.count_down();  // in case start() threw
  });
  started.wait_for(std::chrono::seconds(20));
  poll_until([&] { return ended || thread_sleeping(tid.load()); }, std::chrono::seconds(5),
             std::chrono::milliseconds(1));
  interrupt();
  blocked.join();
  return out;
}

// n floats of mixed magnitudes from `seed`: the association order of a sum changes their
// bits, so a reduction that does not keep its order shows.
inline std::vector<float> mixed_magnitudes(unsigned seed, std::size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = u(rng) * std::ldexp(1.f, static_cast<int>(i % 23) - 11);
  }
  return v;
}

}  // namespace replicator::harness
