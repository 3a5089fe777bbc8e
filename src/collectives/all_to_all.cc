// all_to_all on shared memory: block j of replica r's output is block r of replica j's
// input. Each replica fills its own output: S bytes read and written per replica.
#include <cstring>

#include "src/collectives/table.h"

namespace replicator::detail {

void all_to_all(const Peers& p) {
  const Buffer& out = p.mine().call.output;
  const std::size_t block = out.bytes() / static_cast<std::size_t>(p.n);
  if (block == 0) return;
  for (int j = 0; j < p.n; ++j) {
    std::memcpy(static_cast<std::byte*>(out.data) + static_cast<std::size_t>(j) * block,
                p.input_of(j) + static_cast<std::size_t>(p.me) * block, block);
  }
}

}  // namespace replicator::detail
