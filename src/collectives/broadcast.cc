// broadcast from a root replica, on shared memory.
//
// Direct path: the root's (fused) buffers are cut into R slices; replica r copies slice r
// from the root into every other replica's buffers, so all threads copy at once.
// ·S bytes read and written. Entry and exit barriers.
// Staged path: the root staged its buffers; every other replica copies them from there.
// One barrier.
#include <cstring>

#include "src/collectives/table.h"

namespace replicator::detail {

void broadcast(const Peers& p) {
  const Descriptor& mine = p.mine();
  const int root = mine.root;
  if (p.path == Path::kStaged) {
    if (p.me == root) return;
    const std::byte* src = p.staging[static_cast<std::size_t>(root)];
    for (const Buffer& b : mine.call.buffers) {
      if (b.count > 0) std::memcpy(b.data, src, b.bytes());
      src += packed_size(b);
    }
    return;
  }
  const auto [lo, hi] = slice_of(mine.count, p.me, p.n);
  std::uint64_t base = 0;
  for (std::size_t i = 0; i < mine.call.buffers.size() && base < hi; ++i) {
    const Buffer& b = mine.call.buffers[i];
    const std::uint64_t begin = std::max(lo, base);
    const std::uint64_t end = std::min(hi, base + b.count);
    if (begin < end) {
      const std::size_t esize = dtype_size(b.dtype);
      const std::size_t offset = (begin - base) * esize;
      const auto* src = static_cast<const std::byte*>(p.of(root).call.buffers[i].data) + offset;
      for (int j = 0; j < p.n; ++j) {
        if (j == root) continue;
        std::memcpy(static_cast<std::byte*>(p.of(j).call.buffers[i].data) + offset, src,
                    (end - begin) * esize);
      }
    }
    base += b.count;
  }
}

}  // namespace replicator::detail
