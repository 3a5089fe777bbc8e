// The non-template core of TrajectoryQueue: one mutex, two condition variables (room to
// insert, items to sample), the counts and the rate limiter. Each state change wakes all
// waiters of the side it may unblock (an insert the samplers, a sample the inserters,
// close both): waiters differ in what they need (sample_batch sizes), so waking one could
// wake the wrong one. An insert never unblocks another insert, nor a sample another
// sample, under any rule here.
#include "replicator/rl/trajectory_queue.h"

#include <algorithm>

#include "replicator/errors.h"

namespace replicator::rl::detail {

namespace {

std::optional<RateLimiter> make_limiter(const QueueOptions& options) {
  if (!options.rate_limit) return std::nullopt;
  return RateLimiter(*options.rate_limit);
}

std::string counts(const QueueStats& s) {
  return "inserted " + std::to_string(s.inserted) + ", sampled " + std::to_string(s.sampled) +
         ", " + std::to_string(s.size) + " of max_size " + std::to_string(s.max_size) +
         " items inside";
}

}  // namespace

QueueCore::QueueCore(const QueueOptions& options)
    : options_(options), limiter_(make_limiter(options_)) {
  if (options_.max_size < 1) {
    throw InvalidArgument("TrajectoryQueue: max_size must be at least 1, got " +
                          std::to_string(options_.max_size));
  }
  if (options_.timeout.count() <= 0) {
    throw InvalidArgument("TrajectoryQueue: timeout must be positive, got " +
                          std::to_string(options_.timeout.count()) + "ms");
  }
  if (limiter_ && limiter_->limit().min_size_to_sample > options_.max_size) {
    throw InvalidArgument("TrajectoryQueue: min_size_to_sample (" +
                          std::to_string(limiter_->limit().min_size_to_sample) +
                          ") must not exceed max_size (" + std::to_string(options_.max_size) +
                          "): no sample could ever go ahead");
  }
  stats_.max_size = options_.max_size;
}

bool QueueCore::can_insert() const {
  if (stats_.size >= options_.max_size) return false;
  return !limiter_ || limiter_->can_insert(stats_.inserted, stats_.sampled);
}

bool QueueCore::can_sample(std::int64_t n) const {
  if (stats_.size < n) return false;
  // The size bound comes first: a full queue always lets a sample through (rate_limiter.h).
  if (!limiter_ || stats_.size >= options_.max_size) return true;
  return limiter_->can_sample(stats_.inserted, stats_.sampled, n);
}

QueueCore::Clock::time_point QueueCore::deadline_of(const char* op, Deadline timeout) const {
  const std::chrono::milliseconds limit = timeout.value_or(options_.timeout);
  if (limit.count() <= 0) {
    throw InvalidArgument(std::string("TrajectoryQueue::") + op +
                          ": timeout must be positive, got " + std::to_string(limit.count()) +
                          "ms");
  }
  // A deadline beyond a century is as good as none; keep now + limit from overflowing.
  const auto capped = std::min<Clock::duration>(limit, std::chrono::hours(24 * 365 * 100));
  return Clock::now() + capped;
}

void QueueCore::fail(std::unique_lock<std::mutex>& lock, const char* op, std::int64_t n,
                     Deadline timeout) {
  const QueueStats s = stats_;
  lock.unlock();
  const std::string name = std::string("TrajectoryQueue::") + op;
  if (s.closed) {
    throw Aborted(name + ": the queue was closed (" + counts(s) + ")", std::nullopt);
  }
  const std::chrono::milliseconds limit = timeout.value_or(options_.timeout);
  std::string why;
  if (n == 0) {
    why = s.size >= s.max_size
              ? "the queue stayed full"
              : "inserts were held back by " + limiter_->explain(s.inserted, s.sampled, 0);
  } else if (s.size < n) {
    why = n == 1 ? std::string("the queue stayed empty")
                 : "the queue never held the " + std::to_string(n) + " items asked for";
  } else {
    why = "samples were held back by " + limiter_->explain(s.inserted, s.sampled, n);
  }
  throw Timeout(name + " timed out after " + std::to_string(limit.count()) + "ms: " + why + " (" +
                    counts(s) + ")",
                name, static_cast<std::uint64_t>(n == 0 ? s.inserted : s.sampled), limit, {});
}

std::unique_lock<std::mutex> QueueCore::wait_to_insert(Deadline timeout) {
  const Clock::time_point deadline = deadline_of("insert", timeout);
  std::unique_lock<std::mutex> lock(mu_);
  if (!stats_.closed && !can_insert()) {
    const Clock::time_point start = Clock::now();
    ++stats_.inserts_waiting;
    can_insert_.wait_until(lock, deadline, [&] { return stats_.closed || can_insert(); });
    --stats_.inserts_waiting;
    ++stats_.inserts_waited;
    stats_.insert_wait += Clock::now() - start;
  }
  if (stats_.closed || !can_insert()) fail(lock, "insert", 0, timeout);
  return lock;
}

void QueueCore::inserted(std::unique_lock<std::mutex>& lock) {
  ++stats_.inserted;
  ++stats_.size;
  lock.unlock();
  can_sample_.notify_all();
}

std::unique_lock<std::mutex> QueueCore::wait_to_sample(std::int64_t n, Deadline timeout) {
  const char* op = n == 1 ? "sample" : "sample_batch";
  if (n < 1 || n > options_.max_size) {
    throw InvalidArgument(std::string("TrajectoryQueue::") + op + ": n must be in [1, max_size " +
                          std::to_string(options_.max_size) + "], got " + std::to_string(n));
  }
  if (limiter_ && n > limiter_->max_batch()) {
    throw InvalidArgument(
        std::string("TrajectoryQueue::") + op + ": a batch of " + std::to_string(n) +
        " could wait for ever under the rate limit, whose error_buffer and min_size_to_sample "
        "allow batches of at most " +
        std::to_string(limiter_->max_batch()) + " (see RateLimiter::max_batch)");
  }
  const Clock::time_point deadline = deadline_of(op, timeout);
  std::unique_lock<std::mutex> lock(mu_);
  if (!stats_.closed && !can_sample(n)) {
    const Clock::time_point start = Clock::now();
    ++stats_.samples_waiting;
    can_sample_.wait_until(lock, deadline, [&] { return stats_.closed || can_sample(n); });
    --stats_.samples_waiting;
    ++stats_.samples_waited;
    stats_.sample_wait += Clock::now() - start;
  }
  if (stats_.closed || !can_sample(n)) fail(lock, op, n, timeout);
  return lock;
}

void QueueCore::sampled(std::unique_lock<std::mutex>& lock, std::int64_t n) {
  stats_.sampled += n;
  stats_.size -= n;
  lock.unlock();
  can_insert_.notify_all();
}

std::unique_lock<std::mutex> QueueCore::close() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stats_.closed) {
    lock.unlock();
    return lock;
  }
  stats_.closed = true;
  // Waiters re-check under the lock, which this holds until the caller has taken the items.
  can_insert_.notify_all();
  can_sample_.notify_all();
  return lock;
}

void QueueCore::left_at_close(std::unique_lock<std::mutex>& lock, std::int64_t n) {
  stats_.left_at_close += n;
  stats_.size -= n;
  lock.unlock();
}

QueueStats QueueCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace replicator::rl::detail
