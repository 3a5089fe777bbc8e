// all_reduce across processes through the engine's own all-reduce (MPI_Allreduce), where
// it gives the bits of the canonical tree (two processes of one subtree each; see plan.h):
// the frames first (the mismatch check, and every process then calls the engine's
// collective with the same count), this process's partial row of the slice, the engine's
// all-reduce of that row in place, then the row into every local buffer (divided for
// kMean). With one local replica and the slice in one buffer, the row is that buffer:
// the engine reduces the replica's data where it lies. Bytes sent per process: what the
// engine's algorithm sends (its ring: the slice once, (P-1)/P of it each way).
#include "src/collectives/across/all_reduce_slice.h"
#include "src/collectives/frames.h"
#include "src/engines/native.h"

namespace replicator::detail {

void all_reduce_native(SliceReduce& s, Deadline deadline) {
  start_exchange(s.p, s.layout, s.lane, deadline);
  s.reduce_partials(/*rows_in_arena=*/false, 0, 0);
  const bool mean = s.op == ReduceOp::kMean;
  std::byte* const row = s.lane.rows[0];
  s.layout.native->native_all_reduce(s.p.me, row, s.hi - s.lo, s.d.dtype,
                                     mean ? ReduceOp::kSum : s.op, deadline);
  const bool in_place = s.layout.local == 1 && s.all_aliased();
  if (in_place && !mean) return;
  // The sum into every local buffer, divided as the tree's last combine divides.
  std::size_t offset = 0;
  for_each_piece(s.buffers, s.lo, s.hi,
                 [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                   const void* input = row + offset;
                   s.local_outputs(i, at);
                   tree_reduce({.op = s.op,
                                .dtype = s.buffers[i].dtype,
                                .inputs = &input,
                                .n = 1,
                                .inputs_partial = true,
                                .outputs = s.lane.outputs.data(),
                                .num_outputs = static_cast<int>(s.lane.outputs.size()),
                                .count = len,
                                .divisor = s.divisor},
                               *s.p.scratch);
                   offset += len * dtype_size(s.buffers[i].dtype);
                 });
}

}  // namespace replicator::detail
