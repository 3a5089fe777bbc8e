// RateLimiter: Reverb's samples-per-insert ratio (SampleToInsertRatio) for a queue whose
// items are taken when sampled. A plain value type: it decides, from the counts it is
// given, whether an insert or a sample may go ahead; it neither blocks nor locks (the
// TrajectoryQueue holds the lock and does the waiting).
//
// With I items inserted, S sampled (taken), size = I − S items inside, spi =
// samples_per_insert, offset = spi · min_size_to_sample, and the window
//   min_diff = offset − error_buffer,  max_diff = offset + error_buffer,
// as in Reverb:
// - an insert may go ahead while size + 1 <= min_size_to_sample (filling up to the first
//   sample is free), else only if (I + 1)·spi − S <= max_diff: inserts wait while the
//   samplers lag behind the ratio;
// - a sample of n items may go ahead only if size >= max(n, min_size_to_sample) and
//   I·spi − S − n >= min_diff: samples wait while the inserts lag behind the ratio.
//
// Take-on-sample bounds the ratio. Each item is sampled exactly once, so S <= I always and
// S − I stays within the queue's size: only spi <= 1 can be held, and only spi = 1 for ever.
// - spi > 1 is rejected (InvalidArgument): the samplers could never catch up, and inserts
//   would stop for good once the error buffer is used up.
// - spi = 1 (the default): I − S is the fill, so the limiter is a band on it — samples wait
//   below max(n, min_size_to_sample, min_diff + n) items, inserts wait at max_diff items.
//   The natural setting for IMPALA: it bounds how far the actors run ahead of the learner.
// - spi < 1: the samplers are held to spi samples per insert, so the queue fills by
//   (1 − spi) items per insert. Nothing is ever dropped; once the queue is full
//   (TrajectoryQueue's max_size), a sample always goes ahead, whatever the ratio, so from
//   then on the queue runs at one sample per insert at full size. Use it to make the
//   learner start slowly behind a growing backlog, not as a steady-state ratio.
// The error buffer must satisfy 2·error_buffer >= 1 + spi: then, whenever an insert waits,
// a sample of one item can go ahead (and the other way round), so inserts and samples can
// never wait for each other for ever. max_batch() says the largest batch for which this
// still holds.
#pragma once

#include <cstdint>
#include <string>

namespace replicator::rl {

// Reverb's SampleToInsertRatio(samples_per_insert, min_size_to_sample, error_buffer).
struct RateLimit {
  double samples_per_insert = 1.0;      // spi, 0 < spi <= 1
  std::int64_t min_size_to_sample = 1;  // items inside before the first sample, >= 1
  double error_buffer = 1.0;  // how far I·spi − S may stray, 2·error_buffer >= 1 + spi
};

class RateLimiter {
 public:
  // Throws InvalidArgument, naming the field and its value, unless 0 < spi <= 1 (finite),
  // min_size_to_sample >= 1 and error_buffer is finite with 2·error_buffer >= 1 + spi.
  explicit RateLimiter(const RateLimit& limit);

  const RateLimit& limit() const { return limit_; }
  double min_diff() const { return min_diff_; }
  double max_diff() const { return max_diff_; }

  // The largest n for which a sample of n items can always go ahead while an insert waits
  // on the ratio: floor(min(2·error_buffer − spi, spi·(min_size_to_sample − 1) +
  // error_buffer + 1)), at least 1.
  std::int64_t max_batch() const;

  // Whether one more insert may go ahead after `inserted` inserts and `sampled` samples.
  bool can_insert(std::int64_t inserted, std::int64_t sampled) const;
  // Whether a sample of n >= 1 items may go ahead.
  bool can_sample(std::int64_t inserted, std::int64_t sampled, std::int64_t n) const;

  // Why a sample of n items may not go ahead, or why an insert may not (n = 0), as a clause
  // for an error message, e.g. "the samples-per-insert ratio: inserted*0.5 - sampled = -0.5,
  // a sample of 1 needs at least 0.5".
  std::string explain(std::int64_t inserted, std::int64_t sampled, std::int64_t n) const;

 private:
  RateLimit limit_;
  double min_diff_;
  double max_diff_;
};

}  // namespace replicator::rl
