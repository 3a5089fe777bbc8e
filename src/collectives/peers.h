// What an algorithm in one process sees: every local replica's call (its descriptor) once
// all have arrived, where each replica's input can be read, and this replica's scratch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "replicator/dtype.h"
#include "src/collectives/reduce_kernel.h"
#include "src/comm/descriptor.h"

namespace replicator::detail {

enum class Path : std::uint8_t {
  kStaged,  // inputs copied to staging before the barrier; one barrier; latency path
  kDirect,  // peers read (and write) each other's buffers; entry and exit barriers
};

struct Peers {
  int me = 0;
  int n = 1;
  Path path = Path::kDirect;
  std::span<const Descriptor* const> calls;  // calls[j]: replica j's descriptor
  std::span<std::byte* const> staging;       // staging[j]: replica j's staged input
  ReduceScratch* scratch = nullptr;
  std::span<const void*> in_ptrs;  // n pointers of room, owned by this replica
  std::span<void*> out_ptrs;       // n pointers of room, owned by this replica

  const Descriptor& mine() const { return *calls[static_cast<std::size_t>(me)]; }
  const Descriptor& of(int j) const { return *calls[static_cast<std::size_t>(j)]; }
  // Where replica j's `input` can be read: its staging area or its own buffer.
  const std::byte* input_of(int j) const {
    if (path == Path::kStaged) return staging[static_cast<std::size_t>(j)];
    return static_cast<const std::byte*>(of(j).call.input.data);
  }
};

// Size of a buffer in a packed staging area: its bytes rounded up to 8.
inline std::size_t packed_size(const Buffer& b) { return (b.bytes() + 7) & ~std::size_t{7}; }

// Calls part(i, first, count) for every buffer i of a fused list that holds elements of
// [lo, hi) of the list's concatenation: its elements first .. first + count - 1.
template <typename Part>
void for_each_part(std::span<const Buffer> buffers, std::uint64_t lo, std::uint64_t hi,
                   Part&& part) {
  std::uint64_t base = 0;  // first element of buffer i in the concatenation
  for (std::size_t i = 0; i < buffers.size() && base < hi; ++i) {
    const std::uint64_t begin = std::max(lo, base);
    const std::uint64_t end = std::min(hi, base + buffers[i].count);
    if (begin < end) part(i, begin - base, end - begin);
    base += buffers[i].count;
  }
}

// Element range [begin, end) of `total` that replica `r` of `n` owns when work is
// sliced; boundaries are multiples of 64 elements so slices do not share cache lines.
std::pair<std::uint64_t, std::uint64_t> slice_of(std::uint64_t total, int r, int n);

}  // namespace replicator::detail
