// all_reduce across processes: the slice geometry and partials (SliceReduce), and the entry
// that asks the chooser (plan.h) which of the three algorithms moves them.
//
// Bytes sent per process: in frame, the partials of every subtree in one frame to every
// other process; gathered, k·row to each of the P-1 others (k its subtrees); pipelined,
// about (k + 1)·(P-1)/P of the slice (k = 1 when L is a power of two).
#include <cstring>
#include <optional>

#include "src/collectives/across/all_reduce_slice.h"
#include "src/collectives/frames.h"
#include "src/collectives/plan.h"
#include "src/collectives/reduce_kernel.h"

namespace replicator::detail {

SliceReduce::SliceReduce(const Peers& peers, const ProcessLayout& process_layout,
                         LaneScratch& lane_scratch)
    : p(peers),
      layout(process_layout),
      lane(lane_scratch),
      d(peers.mine()),
      buffers(d.call.buffers),
      op(d.op),
      rank(process_layout.rank),
      P(process_layout.processes),
      first_local(process_layout.rank * process_layout.local),
      lo(slice_of(d.count, peers.me, process_layout.local).first),
      hi(slice_of(d.count, peers.me, process_layout.local).second),
      mine(process_layout.subtrees[static_cast<std::size_t>(process_layout.rank)]),
      row(partial_bytes(buffers, lo, hi, op)),
      divisor(static_cast<std::size_t>(process_layout.replicas())),
      sizes_(lane_scratch.sizes) {
  for (std::uint64_t base = 0; seg < buffers.size(); base += buffers[seg++].count) {
    if (lo >= base && hi <= base + buffers[seg].count) {
      single = hi > lo;
      seg_base = base;
      break;
    }
  }
  alias_rows = single && partial_size(buffers[seg].dtype, op) == dtype_size(buffers[seg].dtype);
  sizes_.clear();
  for (int q = 0; q < P; ++q) {
    for (const Subtree& s : layout.subtrees[static_cast<std::size_t>(q)]) sizes_.push_back(s.size);
  }
}

bool SliceReduce::all_aliased() const {
  bool all = alias_rows;
  for (const Subtree& s : mine) all = all && s.size == 1;
  return all;
}

std::size_t SliceReduce::row_index(int q, std::size_t t) const {
  std::size_t index = 0;
  for (int k = 0; k < q; ++k) {
    if (k != rank) index += layout.subtrees[static_cast<std::size_t>(k)].size();
  }
  return index + t;
}

void SliceReduce::reduce_partials(bool rows_in_arena, std::size_t received_bytes,
                                  std::size_t result_bytes) {
  const std::size_t rows_bytes = rows_in_arena || !all_aliased() ? mine.size() * row : 0;
  arena = lane.reserve(rows_bytes + received_bytes + result_bytes);
  received = arena + rows_bytes;
  result = received + received_bytes;
  lane.rows.assign(mine.size(), nullptr);
  for (std::size_t b = 0; b < mine.size(); ++b) {
    if (alias_rows && mine[b].size == 1) {
      lane.rows[b] = element(p.of(mine[b].first - first_local).call.buffers[seg], lo - seg_base);
      continue;
    }
    lane.rows[b] = arena + b * row;
    std::size_t offset = 0;
    for_each_piece(buffers, lo, hi,
                   [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                     lane.inputs.clear();
                     for (int r = mine[b].first; r < mine[b].first + mine[b].size; ++r) {
                       lane.inputs.push_back(element(p.of(r - first_local).call.buffers[i], at));
                     }
                     void* out = lane.rows[b] + offset;
                     tree_reduce({.op = op,
                                  .dtype = buffers[i].dtype,
                                  .inputs = lane.inputs.data(),
                                  .n = mine[b].size,
                                  .outputs = &out,
                                  .num_outputs = 1,
                                  .outputs_partial = true,
                                  .count = len},
                                 *p.scratch);
                     offset += len * partial_size(buffers[i].dtype, op);
                   });
  }
}

void SliceReduce::local_outputs(std::size_t i, std::uint64_t at) {
  lane.outputs.clear();
  for (int l = 0; l < layout.local; ++l) {
    lane.outputs.push_back(element(p.of(l).call.buffers[i], at));
  }
}

AllReducePlan plan_all_reduce(const ProcessLayout& layout, const LaneShape& lane) {
  const std::size_t partial = partial_size(lane.dtype, lane.op);
  const bool native_same_bits = lane.one_dtype && layout.processes == 2 &&
                                layout.max_subtrees == 1 && layout.native != nullptr &&
                                partial == dtype_size(lane.dtype) &&
                                (lane.op == ReduceOp::kSum || lane.op == ReduceOp::kMean) &&
                                layout.traits.native_sums(lane.dtype);
  return choose_all_reduce({.row_bytes = lane.row_bytes,
                            .max_subtrees = layout.max_subtrees,
                            .processes = layout.processes,
                            .largest_part_bytes = lane.largest_part_bytes,
                            .native_same_bits = native_same_bits,
                            .oversubscribed = layout.oversubscribed,
                            .costs = layout.costs,
                            .cache_share_bytes = layout.cache_share_bytes},
                           layout.traits);
}

namespace {

// With one replica per process and one buffer, the slice is the whole buffer: its plan is
// known without SliceReduce (nullopt for any other call).
std::optional<AllReducePlan> plan_of_one_row(const Descriptor& d, const ProcessLayout& layout) {
  if (layout.local != 1 || d.call.buffers.size() != 1) return std::nullopt;
  const Buffer& b = d.call.buffers[0];
  const std::size_t partial = partial_size(b.dtype, d.op);
  const auto P = static_cast<std::uint64_t>(layout.processes);
  return plan_all_reduce(layout, {.dtype = b.dtype,
                                  .op = d.op,
                                  .row_bytes = b.count * partial,
                                  .largest_part_bytes = (b.count + P - 1) / P * partial,
                                  .one_dtype = true});
}

// In frame, one replica per process, one buffer whose elements are their own accumulators:
// the buffer is this process's only row, rides in the frame as it is, and the P rows
// combine straight into it, in id order (the canonical tree over P leaves, the bits of
// every other path).
void all_reduce_one_row_in_frame(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                                 Deadline deadline) {
  const Descriptor& d = p.mine();
  const Buffer& b = d.call.buffers[0];
  const std::byte* frames =
      exchange_frames(p, layout, lane, deadline, b.data, b.count * dtype_size(b.dtype));
  lane.inputs.clear();
  for (int q = 0; q < layout.processes; ++q) {
    lane.inputs.push_back(q == layout.rank ? static_cast<const std::byte*>(b.data)
                                           : payload_of(layout, frames, q));
  }
  void* out = b.data;
  tree_reduce(d.op, b.dtype, lane.inputs.data(), layout.processes, &out, 1, b.count,
              static_cast<std::size_t>(layout.processes), *p.scratch);
}

}  // namespace

void all_reduce_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                       Deadline deadline) {
  const Descriptor& d = p.mine();
  const std::optional<AllReducePlan> one_row = plan_of_one_row(d, layout);
  if (one_row && one_row->algorithm == AllReduceAlgorithm::kInFrame &&
      partial_size(d.call.buffers[0].dtype, d.op) == dtype_size(d.call.buffers[0].dtype)) {
    return all_reduce_one_row_in_frame(p, layout, lane, deadline);
  }
  SliceReduce s(p, layout, lane);
  const auto P = static_cast<std::uint64_t>(s.P);
  bool one_dtype = true;
  for (const Buffer& b : s.buffers) one_dtype = one_dtype && b.dtype == s.d.dtype;
  const AllReducePlan plan =
      one_row ? *one_row
              : plan_all_reduce(layout, {.dtype = s.d.dtype,
                                         .op = s.op,
                                         .row_bytes = s.row,
                                         .largest_part_bytes = (s.hi - s.lo + P - 1) / P *
                                                               partial_size(s.d.dtype, s.op),
                                         .one_dtype = one_dtype});
  switch (plan.algorithm) {
    case AllReduceAlgorithm::kInFrame:
      return all_reduce_in_frame(s, deadline);
    case AllReduceAlgorithm::kGathered:
      return all_reduce_gathered(s, deadline);
    case AllReduceAlgorithm::kPipelined:
      return all_reduce_pipelined(s, plan, deadline);
    case AllReduceAlgorithm::kNative:
      return all_reduce_native(s, deadline);
  }
}

}  // namespace replicator::detail
