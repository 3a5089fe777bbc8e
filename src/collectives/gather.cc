// gather on shared memory: the root copies every replica's input (from its staging area on
// the staged path, from its buffer on the direct path) into its own output, in replica-id
// order; the others do nothing. R·S bytes read and written by the root. The direct path
// needs the exit barrier: the root reads its peers' inputs.
#include <cstring>

#include "src/collectives/table.h"

namespace replicator::detail {

void gather(const Peers& p) {
  const Descriptor& mine = p.mine();
  if (p.me != mine.root) return;
  const std::size_t block = mine.call.input.bytes();
  if (block == 0) return;
  for (int j = 0; j < p.n; ++j) {
    auto* dst =
        static_cast<std::byte*>(mine.call.output.data) + static_cast<std::size_t>(j) * block;
    const std::byte* src = p.input_of(j);
    if (dst != src) std::memcpy(dst, src, block);
  }
}

}  // namespace replicator::detail
