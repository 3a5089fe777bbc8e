// all_reduce over R replicas of one process, on shared memory.
//
// Direct path (large): the concatenation of the fused buffers is cut into R slices
// (64-element aligned). Replica r reduces slice r across all R buffers in the canonical
// tree order, block by block in L1-resident accumulators, and writes the result into
// slice r of all R buffers. Every byte is read once and written once: 2·R·S bytes of
// memory traffic for S bytes per replica, spread over all R threads, no scratch copies.
// Two barriers: entry (buffers published) and exit (every slice written).
//
// Staged path (small): each replica has copied its buffers into its staging area before
// the entry barrier; after it, each replica reduces all R staged copies into its own
// buffers. One barrier; R·S bytes read per replica.
#include "src/collectives/table.h"

namespace replicator::detail {

void all_reduce(const Peers& p) {
  const Descriptor& mine = p.mine();
  const auto divisor = static_cast<std::size_t>(p.n);
  if (p.path == Path::kStaged) {
    std::size_t offset = 0;
    for (const Buffer& b : mine.call.buffers) {
      for (int j = 0; j < p.n; ++j)
        p.in_ptrs[static_cast<std::size_t>(j)] = p.staging[static_cast<std::size_t>(j)] + offset;
      void* out = b.data;
      tree_reduce(mine.op, b.dtype, p.in_ptrs.data(), p.n, &out, 1, b.count, divisor, *p.scratch);
      offset += packed_size(b);
    }
    return;
  }
  const auto [lo, hi] = slice_of(mine.count, p.me, p.n);
  for_each_part(mine.call.buffers, lo, hi,
                [&](std::size_t i, std::uint64_t first, std::uint64_t count) {
                  const Buffer& b = mine.call.buffers[i];
                  const std::size_t offset = first * dtype_size(b.dtype);
                  for (int j = 0; j < p.n; ++j) {
                    auto* data = static_cast<std::byte*>(p.of(j).call.buffers[i].data) + offset;
                    p.in_ptrs[static_cast<std::size_t>(j)] = data;
                    p.out_ptrs[static_cast<std::size_t>(j)] = data;
                  }
                  tree_reduce(mine.op, b.dtype, p.in_ptrs.data(), p.n, p.out_ptrs.data(), p.n,
                              count, divisor, *p.scratch);
                });
}

}  // namespace replicator::detail
