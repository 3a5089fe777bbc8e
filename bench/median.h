// The median the benchmarks report (mean of the two middle values for an even count).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace replicator::bench {

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace replicator::bench
