// What the all-reduce algorithms across processes share: the geometry of one lane's slice,
// this process's partials of it over its canonical subtrees, and the combination of every
// process's partials in id order (the canonical tree, so the bits equal the local engine's).
//
// Thread l reduces its slice [lo, hi) of the concatenated buffers (64-element aligned):
// (1) its process's subtree partials of the slice, from the local buffers, into rows;
// then an algorithm (all_reduce_in_frame.cc, all_reduce_gathered.cc,
// all_reduce_pipelined.cc) moves partials between processes and combines them into every
// local buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "src/collectives/across/across.h"
#include "src/collectives/plan.h"

namespace replicator::detail {

class SliceReduce {
 public:
  SliceReduce(const Peers& p, const ProcessLayout& layout, LaneScratch& lane);

  // Reserves the lane's arena as [own rows | `received_bytes` | `result_bytes`] and
  // computes this process's partial rows into lane.rows. A row that can alias a single
  // replica's buffer does so; the arena has room for every own row if `rows_in_arena` or
  // some row cannot alias.
  void reduce_partials(bool rows_in_arena, std::size_t received_bytes, std::size_t result_bytes);

  // Whether every own row can alias a replica's buffer (one-replica subtrees, one buffer,
  // accumulators of the element type).
  bool all_aliased() const;

  // Where process q's subtree t goes among the other processes' received rows.
  std::size_t row_index(int q, std::size_t t) const;
  std::size_t received_rows() const { return row_index(P, 0); }

  // The local buffers at [at, ...) of buffer i, as the outputs of the next combine.
  void local_outputs(std::size_t i, std::uint64_t at);

  // Combines everyone's partials of [a, b): process q's subtree t's partials at
  // row_of(q, t) + the piece's offset, into the outputs that outputs_of(i, at, from_a)
  // sets; `streaming` writes them past the cache.
  template <typename RowOf, typename OutputsOf>
  void combine(std::uint64_t a, std::uint64_t b, RowOf&& row_of, OutputsOf&& outputs_of,
               bool streaming = false) {
    std::size_t offset = 0;
    for_each_piece(buffers, a, b,
                   [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t from_a) {
                     lane.inputs.clear();
                     for (int q = 0; q < P; ++q) {
                       const auto& trees = layout.subtrees[static_cast<std::size_t>(q)];
                       for (std::size_t t = 0; t < trees.size(); ++t) {
                         lane.inputs.push_back(row_of(q, t) + offset);
                       }
                     }
                     outputs_of(i, at, from_a);
                     tree_reduce({.op = op,
                                  .dtype = buffers[i].dtype,
                                  .inputs = lane.inputs.data(),
                                  .n = static_cast<int>(lane.inputs.size()),
                                  .sizes = sizes_.data(),
                                  .inputs_partial = true,
                                  .outputs = lane.outputs.data(),
                                  .num_outputs = static_cast<int>(lane.outputs.size()),
                                  .count = len,
                                  .divisor = divisor,
                                  .streaming = streaming},
                                 *p.scratch);
                     offset += len * partial_size(buffers[i].dtype, op);
                   });
  }

  const Peers& p;
  const ProcessLayout& layout;
  LaneScratch& lane;
  const Descriptor& d;
  const std::span<const Buffer> buffers;
  const ReduceOp op;
  const int rank;
  const int P;
  const int first_local;
  const std::uint64_t lo;
  const std::uint64_t hi;
  const std::vector<Subtree>& mine;  // this process's subtrees
  const std::size_t row;             // bytes of one subtree's partials of the slice
  const std::size_t divisor;
  // When one buffer holds the whole slice (`single`: buffer `seg`, whose first element is
  // element `seg_base` of the concatenation), results land straight in the buffers, and a
  // single-replica subtree's partials are that replica's buffer itself (where the
  // accumulator is the element type: `alias_rows`): no copies beyond the reduction's.
  std::size_t seg = 0;
  std::uint64_t seg_base = 0;
  bool single = false;
  bool alias_rows = false;

  std::byte* arena = nullptr;     // own rows, when in the arena
  std::byte* received = nullptr;  // received partial rows
  std::byte* result = nullptr;    // the result row

 private:
  std::vector<int>& sizes_;  // leaf sizes of every process's subtrees, in id order
};

// The algorithms; all_reduce_across (all_reduce.cc) picks one with plan_all_reduce
// (across.h).
void all_reduce_in_frame(SliceReduce& s, Deadline deadline);
void all_reduce_native(SliceReduce& s, Deadline deadline);
void all_reduce_gathered(SliceReduce& s, Deadline deadline);
void all_reduce_pipelined(SliceReduce& s, const AllReducePlan& plan, Deadline deadline);

}  // namespace replicator::detail
