// reduce_scatter on shared memory: replica r reduces block r of every replica's input in
// the canonical tree order straight into its output. R·S/R bytes read per replica (S the
// whole input), S/R written; all replicas at once.
#include "src/collectives/table.h"

namespace replicator::detail {

void reduce_scatter(const Peers& p) {
  const Buffer& out = p.mine().call.output;
  const std::size_t block = out.bytes();
  for (int j = 0; j < p.n; ++j) {
    p.in_ptrs[static_cast<std::size_t>(j)] = p.input_of(j) + static_cast<std::size_t>(p.me) * block;
  }
  void* dst = out.data;
  tree_reduce(p.mine().op, out.dtype, p.in_ptrs.data(), p.n, &dst, 1, out.count,
              static_cast<std::size_t>(p.n), *p.scratch);
}

}  // namespace replicator::detail
