// broadcast across processes: thread l carries slice l of the root's buffers from the
// root's process to every other process, then copies it into the other local buffers.
// The root's process sends (P-1)·S bytes in all; every other process receives S.
#include <cstring>

#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void broadcast_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                      Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  const int root_process = d.root / layout.local;
  const int root_local = d.root % layout.local;
  const std::span<const Buffer> buffers = d.call.buffers;
  const auto [lo, hi] = slice_of(d.count, p.me, layout.local);
  const bool have_root = root_process == layout.rank;
  const int source = have_root ? root_local : 0;  // where this process's copy lands first
  for_each_piece(buffers, lo, hi,
                 [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                   const std::size_t bytes = len * dtype_size(buffers[i].dtype);
                   std::byte* data = element(p.of(source).call.buffers[i], at);
                   if (have_root) {
                     for (int q = 0; q < layout.processes; ++q) {
                       if (q != layout.rank) lane.sends.push_back({q, data, bytes});
                     }
                   } else {
                     lane.recvs.push_back({root_process, data, bytes});
                   }
                 });
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  for_each_piece(buffers, lo, hi,
                 [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                   const std::byte* src = element(p.of(source).call.buffers[i], at);
                   for (int l = 0; l < layout.local; ++l) {
                     if (l != source) {
                       std::memcpy(element(p.of(l).call.buffers[i], at), src,
                                   len * dtype_size(buffers[i].dtype));
                     }
                   }
                 });
}

}  // namespace replicator::detail
