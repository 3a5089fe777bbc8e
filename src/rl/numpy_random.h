// numpy.random.RandomState for 32-bit integer seeds, draw for draw: MinAtar's games take all
// their randomness from one RandomState, so with this generator our games follow the
// reference implementation exactly (the conformance tests compare whole trajectories).
#pragma once

#include <cstdint>
#include <random>

namespace replicator::rl {

class NumpyRandom {
 public:
  // RandomState(seed) seeds MT19937 with init_genrand(seed), as std::mt19937(seed) does.
  explicit NumpyRandom(std::uint32_t seed = 0) : mt_(seed) {}

  // RandomState.rand(): 53 bits from two 32-bit draws (a >> 5, b >> 6).
  double rand() {
    const std::uint32_t a = next() >> 5;
    const std::uint32_t b = next() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

  // RandomState.randint(low, high), high exclusive, for high - low <= 2^32: the legacy
  // masked rejection sampler; no draw at all when the range holds one value.
  int randint(int low, int high) {
    const auto range = static_cast<std::uint32_t>(high - low - 1);
    if (range == 0) return low;
    std::uint32_t mask = range;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    std::uint32_t value = 0;
    do {
      value = next() & mask;
    } while (value > range);
    return low + static_cast<int>(value);
  }

 private:
  std::uint32_t next() { return static_cast<std::uint32_t>(mt_()); }

  std::mt19937 mt_;
};

}  // namespace replicator::rl
