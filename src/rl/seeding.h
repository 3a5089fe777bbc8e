// Per-env random streams: env i of a batch seeded with `seed` draws from a stream that is a
// fixed function of (seed, i), independent of the batch size.
#pragma once

#include <cstdint>

namespace replicator::rl {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The seed of env `index` in a batch seeded with `seed`.
inline std::uint64_t env_seed(std::uint64_t seed, std::uint64_t index) {
  return splitmix64(splitmix64(seed) ^ splitmix64(index + 0x632be59bd9b4e019ULL));
}

// A MinAtar env's seed for numpy.random.RandomState: the low 32 bits of env_seed.
inline std::uint32_t minatar_seed(std::uint64_t seed, std::uint64_t index) {
  return static_cast<std::uint32_t>(env_seed(seed, index));
}

// A SplitMix64 generator: 8 bytes of state, a few cycles per draw (CartPole's resets).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed = 0) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) for n >= 1, unbiased: Lemire's multiply-and-reject (2019), the high
  // word of a 64 x 64-bit product, drawing again for the few low words that would bias it.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (true) {
      const auto product = static_cast<unsigned __int128>(next()) * n;
      if (static_cast<std::uint64_t>(product) >= threshold) {
        return static_cast<std::uint64_t>(product >> 64);
      }
    }
  }
  // The generator's state, from which SplitMix64(state()) goes on with the same draws.
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

}  // namespace replicator::rl
