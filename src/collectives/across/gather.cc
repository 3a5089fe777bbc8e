// gather across processes: lane l carries replica (q, l)'s input from process q to the
// root's process, where thread l writes blocks {q·L + l} of the root's output (its own
// process's block from shared memory). Each other process sends L·S bytes; the root's
// process receives (P-1)·L·S.
#include <cstring>

#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void gather_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                   Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  const int L = layout.local;
  const int root_process = d.root / L;
  const std::size_t block = d.call.input.bytes();
  if (layout.rank != root_process) {
    lane.sends.push_back({root_process, d.call.input.data, block});
    exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
    return;
  }
  auto* out = static_cast<std::byte*>(p.of(d.root % L).call.output.data);
  const auto block_of = [&](int q) { return out + static_cast<std::size_t>(q * L + p.me) * block; };
  for (int q = 0; q < layout.processes; ++q) {
    if (q != layout.rank) lane.recvs.push_back({q, block_of(q), block});
  }
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  const std::byte* own = p.input_of(p.me);
  if (block > 0 && block_of(layout.rank) != own) std::memcpy(block_of(layout.rank), own, block);
}

}  // namespace replicator::detail
