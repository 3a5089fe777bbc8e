// TrajectoryQueue<Item>: the bounded FIFO between actors and the learner (Reverb's queue
// table: FIFO, each item taken by the sample that returns it, an optional rate limiter).
//
// - Items are moved in by insert() and moved out by sample() / sample_batch(), oldest
//   first; every item inserted is returned by exactly one sample or by close(), never lost
//   or duplicated. Items of one producer thread come out in the order it inserted them.
// - At most `max_size` items are inside: insert() waits while the queue is full. sample()
//   waits while it is empty, sample_batch(n) until n items can be taken at once.
// - With a RateLimit (rate_limiter.h), inserts also wait while the samplers lag behind the
//   samples-per-insert ratio and samples wait while the inserts lag behind it. The size
//   bound comes first: a sample from a full queue always goes ahead. Inserts and samples
//   never wait for each other for ever: whenever an insert waits, every sample the queue
//   accepts can go ahead.
// - Every waiting call has a deadline and throws Timeout naming what it waited for (room,
//   items, min_size_to_sample or the ratio) and the counts; Timeout::op() is
//   "TrajectoryQueue::insert", "...::sample" or "...::sample_batch", sequence() the items
//   inserted (sampled) before, missing() empty. On Timeout or close nothing was inserted or
//   taken.
// - close() wakes every waiting call with Aborted, makes every later call throw Aborted,
//   and hands back the items still inside (they are not sampled after close).
// Threads: every member function may be called from any thread, concurrently (actors,
// learner replicas, an RPC service's threads); no call depends on which thread makes it.
// The queue must outlive the calls in flight: close() it and join the callers before it is
// destroyed. Waiters are not served in arrival order: a sample_batch(n) may wait while
// smaller samples take the items that arrive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "replicator/options.h"
#include "replicator/rl/rate_limiter.h"

namespace replicator::rl {

struct QueueOptions {
  std::int64_t max_size = 1024;         // items inside at most, >= 1
  std::optional<RateLimit> rate_limit;  // empty: a plain bounded FIFO
  // Deadline of a call whose own `timeout` is empty; > 0. Config::timeout's default.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Counts since construction, read together under the queue's lock.
struct QueueStats {
  std::int64_t inserted = 0;  // items inserted
  std::int64_t sampled = 0;   // items taken by sample() and sample_batch()
  std::int64_t size = 0;      // items inside now
  std::int64_t max_size = 0;
  std::int64_t left_at_close = 0;           // items handed back by close()
  std::int64_t inserts_waited = 0;          // insert calls that had to wait (ended in any way)
  std::int64_t samples_waited = 0;          // sample calls that had to wait
  std::chrono::nanoseconds insert_wait{0};  // time those insert calls spent waiting
  std::chrono::nanoseconds sample_wait{0};
  int inserts_waiting = 0;  // calls waiting now
  int samples_waiting = 0;
  bool closed = false;
};

namespace detail {

// The part of TrajectoryQueue that does not depend on the item type: the lock, the counts,
// the rate limiter, the waiting and the errors. The template keeps only the items, and
// touches them only under the lock that wait_to_insert / wait_to_sample return.
class QueueCore {
 public:
  using Clock = std::chrono::steady_clock;

  explicit QueueCore(const QueueOptions& options);

  // Wait until one insert may go ahead; return with the lock held. Throw Timeout or
  // Aborted (closed), with the lock released.
  std::unique_lock<std::mutex> wait_to_insert(Deadline timeout);
  // Count the insert made under `lock` and wake the samplers.
  void inserted(std::unique_lock<std::mutex>& lock);
  // As wait_to_insert, for a sample of n items; InvalidArgument for an n the queue can
  // never serve.
  std::unique_lock<std::mutex> wait_to_sample(std::int64_t n, Deadline timeout);
  void sampled(std::unique_lock<std::mutex>& lock, std::int64_t n);
  // Mark closed and wake everyone; return with the lock held, or an unlocked lock if the
  // queue was already closed. The caller then counts the items it hands back.
  std::unique_lock<std::mutex> close();
  void left_at_close(std::unique_lock<std::mutex>& lock, std::int64_t n);

  QueueStats stats() const;
  const QueueOptions& options() const { return options_; }

 private:
  bool can_insert() const;
  bool can_sample(std::int64_t n) const;
  Clock::time_point deadline_of(const char* op, Deadline timeout) const;
  [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const char* op, std::int64_t n,
                         Deadline timeout);

  const QueueOptions options_;
  const std::optional<RateLimiter> limiter_;
  mutable std::mutex mu_;
  std::condition_variable can_insert_;
  std::condition_variable can_sample_;
  QueueStats stats_;
};

}  // namespace detail

template <typename Item>
class TrajectoryQueue {
  // A throwing move could lose an item half-way through a batch.
  static_assert(std::is_nothrow_move_constructible_v<Item>,
                "TrajectoryQueue items must be nothrow move-constructible");

 public:
  // Does not block. Throws InvalidArgument for max_size < 1, timeout <= 0, a bad RateLimit
  // or min_size_to_sample > max_size.
  explicit TrajectoryQueue(const QueueOptions& options = {}) : core_(options) {}
  TrajectoryQueue(const TrajectoryQueue&) = delete;
  TrajectoryQueue& operator=(const TrajectoryQueue&) = delete;

  // Moves `item` to the back of the queue. Blocks while the queue is full or, with a rate
  // limit, while the samplers lag behind the ratio. Throws Timeout after `timeout` (empty:
  // options().timeout), Aborted if the queue is or gets closed, InvalidArgument for a
  // timeout <= 0; on any throw `item` is left as it was.
  void insert(Item&& item, Deadline timeout = std::nullopt) {
    std::unique_lock<std::mutex> lock = core_.wait_to_insert(timeout);
    items_.push_back(std::move(item));
    core_.inserted(lock);
  }

  // Takes the oldest item. Blocks while the queue is empty or, with a rate limit, below
  // min_size_to_sample or while the inserts lag behind the ratio. Throws as insert().
  Item sample(Deadline timeout = std::nullopt) {
    std::unique_lock<std::mutex> lock = core_.wait_to_sample(1, timeout);
    Item item = std::move(items_.front());
    items_.pop_front();
    core_.sampled(lock, 1);
    return item;
  }

  // Takes the n oldest items at once (all or none), oldest first: a learner's batch of
  // unrolls. Blocks as sample() until n items can be taken. Throws as sample(), and
  // InvalidArgument unless 1 <= n <= max_size (and, with a rate limit, n <=
  // RateLimiter::max_batch(): a larger batch could wait for ever).
  std::vector<Item> sample_batch(std::int64_t n, Deadline timeout = std::nullopt) {
    std::unique_lock<std::mutex> lock = core_.wait_to_sample(n, timeout);
    std::vector<Item> batch;
    batch.reserve(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      batch.push_back(std::move(items_.front()));
      items_.pop_front();
    }
    core_.sampled(lock, n);
    return batch;
  }

  // Closes the queue: every waiting and every later insert or sample throws Aborted.
  // Returns the items still inside, oldest first (empty when already closed), so that a
  // caller may still use or count them. Does not block beyond the lock; idempotent.
  std::vector<Item> close() {
    std::unique_lock<std::mutex> lock = core_.close();
    std::vector<Item> left;
    if (!lock.owns_lock()) return left;
    left.reserve(items_.size());
    for (Item& item : items_) left.push_back(std::move(item));
    items_.clear();
    core_.left_at_close(lock, static_cast<std::int64_t>(left.size()));
    return left;
  }

  // The counts, read together. Does not block beyond the lock.
  QueueStats stats() const { return core_.stats(); }
  const QueueOptions& options() const { return core_.options(); }

 private:
  detail::QueueCore core_;
  std::deque<Item> items_;  // guarded by core_'s lock
};

}  // namespace replicator::rl
