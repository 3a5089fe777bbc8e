// all_gather across processes: lane l carries replica (q, l)'s input between processes;
// thread l writes blocks {q·L + l} of every local output. Each process sends L·S·(P-1)
// bytes and receives as many (S the input of one replica).
#include <cstring>

#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void all_gather_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                       Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  const std::size_t block = d.call.input.bytes();
  auto* out = static_cast<std::byte*>(d.call.output.data);
  const auto block_of = [&](int q) {
    return static_cast<std::size_t>(q * layout.local + p.me) * block;
  };
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    lane.sends.push_back({q, d.call.input.data, block});
    lane.recvs.push_back({q, out + block_of(q), block});
  }
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  if (block == 0) return;
  for (int q = 0; q < layout.processes; ++q) {
    const std::byte* src =
        q == layout.rank ? static_cast<const std::byte*>(d.call.input.data) : out + block_of(q);
    for (int l = 0; l < layout.local; ++l) {
      std::byte* dst = static_cast<std::byte*>(p.of(l).call.output.data) + block_of(q);
      if (dst != src) std::memcpy(dst, src, block);
    }
  }
}

}  // namespace replicator::detail
