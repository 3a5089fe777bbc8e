#include "bench/memory_bandwidth.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
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

// Both arrays read, their sum written back into both (the arrays hold zeros: nothing grows).
void update_kernel(double* __restrict a, double* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double sum = a[i] + b[i];
    a[i] = sum;
    b[i] = sum;
  }
}

// Thread t's share [lo, hi) of n elements, boundaries on 64-byte lines.
std::pair<std::size_t, std::size_t> share(std::size_t n, int t, int threads) {
  const auto bound = [&](int k) -> std::size_t {
    if (k >= threads) return n;
    return (n / static_cast<std::size_t>(threads) * static_cast<std::size_t>(k)) & ~std::size_t{7};
  };
  return {bound(t), bound(t + 1)};
}

// Page-aligned memory of at least `bytes`, in huge pages where the kernel gives them (one
// fault per 2 MiB instead of per 4 KiB).
double* allocate_array(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t align = bytes >= kHuge ? kHuge : kPage;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  auto* p = static_cast<double*>(std::aligned_alloc(align, rounded));
  if (p == nullptr) throw std::bad_alloc();
  if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);  // a hint: ignored where THP is off
  return p;
}

// "48K", "2048K", "260M" (sysfs cache sizes) in bytes; 0 if unreadable.
std::size_t parse_cache_size(const std::string& text) {
  std::size_t value = 0;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + static_cast<std::size_t>(text[i++] - '0');
  }
  if (i < text.size() && text[i] == 'K') value <<= 10;
  if (i < text.size() && text[i] == 'M') value <<= 20;
  if (i < text.size() && text[i] == 'G') value <<= 30;
  return value;
}

}  // namespace

std::size_t last_level_cache_bytes() {
  std::size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream type_file(dir + "/type");
    std::ifstream size_file(dir + "/size");
    std::string type;
    std::string size;
    if (!(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction") continue;
    largest = std::max(largest, parse_cache_size(size));
  }
  return largest;
}

std::size_t stream_array_bytes() {
  std::size_t bytes = std::max(std::size_t{256} << 20, 4 * last_level_cache_bytes());
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    bytes = std::min(bytes, static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 8);
  }
  return bytes;
}

PrefaultedBuffer::PrefaultedBuffer(std::size_t bytes) {
  const std::size_t rounded = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  memory_.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  if (!memory_) throw std::bad_alloc();
  std::memset(memory_.get(), 0, rounded);  // every page faulted in now, by this thread
  size_ = bytes;
}

CopyBandwidth memory_bandwidth(MemoryKernel kernel, int threads, std::size_t bytes_per_array) {
  threads = std::max(threads, 1);
  const std::size_t n =
      std::max(bytes_per_array / sizeof(double), static_cast<std::size_t>(threads) * 8);
  const std::size_t bytes = n * sizeof(double);
  // Allocated here, faulted in below by the thread that owns each share.
  std::unique_ptr<double[], void (*)(double*)> a(allocate_array(bytes),
                                                 [](double* p) { std::free(p); });
  std::unique_ptr<double[], void (*)(double*)> b(allocate_array(bytes),
                                                 [](double* p) { std::free(p); });

  std::vector<double> seconds(kPasses);
  std::barrier sync(threads);
  const auto worker = [&](int t) {
    const auto [lo, hi] = share(n, t, threads);
    std::fill(a.get() + lo, a.get() + hi, 0.0);
    std::fill(b.get() + lo, b.get() + hi, kernel == MemoryKernel::kCopy ? 1.0 : 0.0);
    sync.arrive_and_wait();
    const auto pass_once = [&] {
      if (kernel == MemoryKernel::kCopy) {
        copy_kernel(a.get() + lo, b.get() + lo, hi - lo);
      } else {
        update_kernel(a.get() + lo, b.get() + lo, hi - lo);
      }
    };
    pass_once();  // untimed
    for (int pass = 0; pass < kPasses; ++pass) {
      sync.arrive_and_wait();
      const auto start = std::chrono::steady_clock::now();
      pass_once();
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
  const double moved =
      (kernel == MemoryKernel::kCopy ? 2.0 : 4.0) * static_cast<double>(bytes) / 1e9;
  return {.median_gbps = moved / seconds[kPasses / 2], .best_gbps = moved / seconds[0]};
}

}  // namespace replicator::bench
