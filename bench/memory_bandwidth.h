// The machine's own memory bandwidth, measured the STREAM way, and page-aligned memory
// that is faulted in before any timing. Plain C++ (no replicator dependency) so that the
// plain-MPI reference benchmark links it too.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace replicator::bench {

// The largest data cache of this machine (sysfs, cpu0), or 0 where it cannot be read.
// Never throws.
std::size_t last_level_cache_bytes();

// The array size of a copy-bandwidth measurement that sees memory, not a cache: as STREAM
// asks, at least 4 x the last-level cache (and at least 256 MiB), at most 1/8 of the
// physical memory. Never throws.
std::size_t stream_array_bytes();

struct CopyBandwidth {
  double median_gbps = 0;
  double best_gbps = 0;
};

// The two ways a kernel can write memory, which the memory system charges differently:
//   kCopy    a[i] = b[i]: the written lines were not read first, so each store first reads
//            its line for ownership (3 transfers for the 2 bytes counted: STREAM "copy");
//   kUpdate  a[i] = b[i] = a[i] + b[i]: every written line was just read (the pattern of an
//            in-place reduction: an all-reduce reads each replica's buffer and writes the
//            result back into it), 2 transfers for 2 bytes counted.
// On this kind of machine kUpdate's counted rate is 1.6-2.2x kCopy's for arrays far past
// the last-level cache, so a collective that updates in place must be held against kUpdate.
enum class MemoryKernel { kCopy, kUpdate };

// `kernel` over two arrays of `bytes_per_array` bytes each, run by `threads` threads, each on
// its contiguous share. The arrays are allocated once (asking for huge pages, so the first
// touch is short) and every page is written by its owning thread before timing; one untimed
// pass, then 7 timed passes. Returns the median and the best pass in GB/s (1e9 bytes per
// second), counting bytes read plus bytes written as STREAM does (kCopy: 2 x
// bytes_per_array a pass, kUpdate: 4 x). Blocks for the whole measurement (about 0.2 s for
// 256 MiB arrays, plus the first touch); threads < 1 counts as 1. Throws std::bad_alloc.
CopyBandwidth memory_bandwidth(MemoryKernel kernel, int threads, std::size_t bytes_per_array);
inline CopyBandwidth copy_bandwidth(int threads, std::size_t bytes_per_array) {
  return memory_bandwidth(MemoryKernel::kCopy, threads, bytes_per_array);
}
inline double copy_bandwidth_gbps(int threads, std::size_t bytes_per_array) {
  return copy_bandwidth(threads, bytes_per_array).median_gbps;
}

// `bytes` of page-aligned memory, every page written (zeroed) by the constructing thread,
// so that later use never page-faults and the pages are local to that thread's node.
// Movable, not copyable. Throws std::bad_alloc when the memory is not available.
class PrefaultedBuffer {
 public:
  PrefaultedBuffer() = default;
  explicit PrefaultedBuffer(std::size_t bytes);

  std::byte* data() { return memory_.get(); }
  const std::byte* data() const { return memory_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], Free> memory_;
  std::size_t size_ = 0;
};

}  // namespace replicator::bench
