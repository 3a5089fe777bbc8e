#include "replicator/rl/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "replicator/errors.h"

namespace replicator::rl {

namespace {

std::string number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

RateLimiter::RateLimiter(const RateLimit& limit) : limit_(limit) {
  const double spi = limit.samples_per_insert;
  if (!std::isfinite(spi) || spi <= 0 || spi > 1) {
    throw InvalidArgument(
        "RateLimit: samples_per_insert must be in (0, 1] (each item is taken when sampled, "
        "so samples can never outnumber inserts), got " +
        number(spi));
  }
  if (limit.min_size_to_sample < 1) {
    throw InvalidArgument("RateLimit: min_size_to_sample must be at least 1, got " +
                          std::to_string(limit.min_size_to_sample));
  }
  if (!std::isfinite(limit.error_buffer) || 2 * limit.error_buffer < 1 + spi) {
    throw InvalidArgument(
        "RateLimit: error_buffer must be finite and at least (1 + samples_per_insert) / 2 = " +
        number((1 + spi) / 2) +
        " (else inserts and samples could wait for each other for ever), got " +
        number(limit.error_buffer));
  }
  const double offset = spi * static_cast<double>(limit.min_size_to_sample);
  min_diff_ = offset - limit.error_buffer;
  max_diff_ = offset + limit.error_buffer;
}

std::int64_t RateLimiter::max_batch() const {
  const double spi = limit_.samples_per_insert;
  // While an insert waits on the ratio, (I + 1)·spi − S > max_diff, so I·spi − S − n >=
  // min_diff holds for n <= max_diff − min_diff − spi; and size >= I·spi − S > max_diff −
  // spi (spi <= 1), so size >= n for n <= max_diff − spi + 1.
  const double bound = std::min(max_diff_ - min_diff_ - spi, max_diff_ - spi + 1);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(bound)));
}

bool RateLimiter::can_insert(std::int64_t inserted, std::int64_t sampled) const {
  if (inserted + 1 - sampled <= limit_.min_size_to_sample) return true;
  return static_cast<double>(inserted + 1) * limit_.samples_per_insert -
             static_cast<double>(sampled) <=
         max_diff_;
}

bool RateLimiter::can_sample(std::int64_t inserted, std::int64_t sampled, std::int64_t n) const {
  const std::int64_t size = inserted - sampled;
  if (size < std::max(n, limit_.min_size_to_sample)) return false;
  return static_cast<double>(inserted) * limit_.samples_per_insert -
             static_cast<double>(sampled + n) >=
         min_diff_;
}

std::string RateLimiter::explain(std::int64_t inserted, std::int64_t sampled,
                                 std::int64_t n) const {
  const std::int64_t size = inserted - sampled;
  const double diff =
      static_cast<double>(inserted) * limit_.samples_per_insert - static_cast<double>(sampled);
  const std::string ratio = "the samples-per-insert ratio: inserted*" +
                            number(limit_.samples_per_insert) + " - sampled = " + number(diff);
  if (n == 0) {
    return ratio + ", an insert needs it at most " + number(max_diff_ - limit_.samples_per_insert);
  }
  if (size < limit_.min_size_to_sample) {
    return "min_size_to_sample: " + std::to_string(size) + " items inside, a sample needs " +
           std::to_string(limit_.min_size_to_sample);
  }
  return ratio + ", a sample of " + std::to_string(n) + " needs it at least " +
         number(min_diff_ + static_cast<double>(n));
}

}  // namespace replicator::rl
