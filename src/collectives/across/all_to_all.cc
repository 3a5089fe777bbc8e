// all_to_all across processes: lane l carries, from each process q, block (p·L + l) of
// each of q's local inputs to replica (p, l). Each process sends and receives
// L·S·(P-1)/P bytes.
#include <cstring>

#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void all_to_all_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                       Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  const std::size_t block = d.call.output.bytes() / static_cast<std::size_t>(layout.replicas());
  auto* out = static_cast<std::byte*>(d.call.output.data);
  const int L = layout.local;
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    for (int l = 0; l < L; ++l) {
      lane.sends.push_back(
          {q, p.input_of(l) + static_cast<std::size_t>(q * L + p.me) * block, block});
      lane.recvs.push_back({q, out + static_cast<std::size_t>(q * L + l) * block, block});
    }
  }
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  if (block == 0) return;
  for (int l = 0; l < L; ++l) {
    std::memcpy(out + static_cast<std::size_t>(layout.rank * L + l) * block,
                p.input_of(l) + static_cast<std::size_t>(layout.rank * L + p.me) * block, block);
  }
}

}  // namespace replicator::detail
