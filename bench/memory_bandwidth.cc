#include "bench/memory_bandwidth.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

namespace replicator::bench {
namespace {

constexpr std::size_t kPage = 4096;
constexpr int kPasses = 7;

// The STREAM copy loop. GCC would otherwise turn it into a call to memcpy, which is a
// different kernel (glibc switches to non-temporal stores for large copies).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void copy_kernel(double* __restrict a, const double* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i];
}

// Thread t's share [lo, hi) of n elements, boundaries on 64-byte lines.
std::pair<std::size_t, std::size_t> share(std::size_t n, int t, int threads) {
  const auto bound = [&](int k) -> std::size_t {
    if (k >= threads) return n;
    return (n / static_cast<std::size_t>(threads) * static_cast<std::size_t>(k)) & ~std::size_t{7};
  };
  return {bound(t), bound(t + 1)};
}

}  // namespace

PrefaultedBuffer::PrefaultedBuffer(std::size_t bytes) {
  const std::size_t rounded = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  memory_.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  if (!memory_) throw std::bad_alloc();
  std::memset(memory_.get(), 0, rounded);  // every page faulted in now, by this thread
  size_ = bytes;
}

double copy_bandwidth_gbps(int threads, std::size_t bytes_per_array) {
  threads = std::max(threads, 1);
  const std::size_t n =
      std::max(bytes_per_array / sizeof(double), static_cast<std::size_t>(threads) * 8);
  const std::size_t bytes = n * sizeof(double);
  // Allocated here, faulted in below by the thread that owns each share.
  std::unique_ptr<double[], void (*)(double*)> a(
      static_cast<double*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage)),
      [](double* p) { std::free(p); });
  std::unique_ptr<double[], void (*)(double*)> b(
      static_cast<double*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage)),
      [](double* p) { std::free(p); });
  if (!a || !b) throw std::bad_alloc();

  std::vector<double> seconds(kPasses);
  std::barrier sync(threads);
  const auto worker = [&](int t) {
    const auto [lo, hi] = share(n, t, threads);
    std::fill(a.get() + lo, a.get() + hi, 0.0);
    std::fill(b.get() + lo, b.get() + hi, 1.0);
    sync.arrive_and_wait();
    copy_kernel(a.get() + lo, b.get() + lo, hi - lo);  // untimed pass
    for (int pass = 0; pass < kPasses; ++pass) {
      sync.arrive_and_wait();
      const auto start = std::chrono::steady_clock::now();
      copy_kernel(a.get() + lo, b.get() + lo, hi - lo);
      sync.arrive_and_wait();  // the pass ends when the slowest thread is done
      if (t == 0) {
        seconds[static_cast<std::size_t>(pass)] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
  };
  std::vector<std::thread> team;
  for (int t = 1; t < threads; ++t) team.emplace_back(worker, t);
  worker(0);
  for (auto& thread : team) thread.join();

  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[kPasses / 2];
  return 2.0 * static_cast<double>(bytes) / median / 1e9;
}

}  // namespace replicator::bench
