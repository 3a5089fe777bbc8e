// reduce_scatter across processes: thread l computes its process's partials of the blocks
// of local replica l of every process, sends block q·L + l's partials to process q, and
// combines the partials of its own block from all processes in id order (the canonical
// tree). Each process sends about (k·(P-1)/P)·S bytes, k its number of subtrees.
#include <cstring>

#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void reduce_scatter_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                           Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  const Buffer& out = d.call.output;
  const int P = layout.processes;
  const int first_local = layout.rank * layout.local;
  const std::vector<Subtree>& mine = layout.subtrees[static_cast<std::size_t>(layout.rank)];
  const std::size_t row = out.count * partial_size(out.dtype, d.op);
  std::size_t recv_rows = 0;
  for (int q = 0; q < P; ++q) {
    if (q != layout.rank) recv_rows += layout.subtrees[static_cast<std::size_t>(q)].size();
  }
  std::byte* rows = lane.reserve((static_cast<std::size_t>(P) * mine.size() + recv_rows) * row);
  std::byte* received = rows + static_cast<std::size_t>(P) * mine.size() * row;
  const std::size_t block = out.bytes();
  for (int q = 0; q < P; ++q) {
    const std::size_t at = static_cast<std::size_t>(q * layout.local + p.me) * block;
    for (std::size_t t = 0; t < mine.size(); ++t) {
      lane.inputs.clear();
      for (int r = mine[t].first; r < mine[t].first + mine[t].size; ++r) {
        lane.inputs.push_back(p.input_of(r - first_local) + at);
      }
      void* dst = rows + (static_cast<std::size_t>(q) * mine.size() + t) * row;
      tree_reduce({.op = d.op,
                   .dtype = out.dtype,
                   .inputs = lane.inputs.data(),
                   .n = mine[t].size,
                   .outputs = &dst,
                   .num_outputs = 1,
                   .outputs_partial = true,
                   .count = out.count},
                  *p.scratch);
    }
  }
  std::byte* cursor = received;
  for (int q = 0; q < P; ++q) {
    if (q == layout.rank) continue;
    for (std::size_t t = 0; t < mine.size(); ++t) {
      lane.sends.push_back({q, rows + (static_cast<std::size_t>(q) * mine.size() + t) * row, row});
    }
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      lane.recvs.push_back({q, cursor, row});
      cursor += row;
    }
  }
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  lane.inputs.clear();
  lane.sizes.clear();
  cursor = received;
  for (int q = 0; q < P; ++q) {
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      if (q == layout.rank) {
        lane.inputs.push_back(rows + (static_cast<std::size_t>(q) * mine.size() + t) * row);
      } else {
        lane.inputs.push_back(cursor);
        cursor += row;
      }
      lane.sizes.push_back(layout.subtrees[static_cast<std::size_t>(q)][t].size);
    }
  }
  void* dst = out.data;
  tree_reduce({.op = d.op,
               .dtype = out.dtype,
               .inputs = lane.inputs.data(),
               .n = static_cast<int>(lane.inputs.size()),
               .sizes = lane.sizes.data(),
               .inputs_partial = true,
               .outputs = &dst,
               .num_outputs = 1,
               .count = out.count,
               .divisor = static_cast<std::size_t>(layout.replicas())},
              *p.scratch);
}

}  // namespace replicator::detail
