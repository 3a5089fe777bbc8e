// permute across processes: the pair (s, d) travels on lane d % L, sent by that lane's
// thread in s's process (reading s's input from shared memory); a replica that is no
// destination gets zeros. At most S bytes per pair cross between processes.
#include <cstring>

#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void permute_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                    Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  const int L = layout.local;
  const int me = layout.rank * L + p.me;
  const Buffer& out = d.call.output;
  bool received = false;
  for (const auto& [src, dst] : d.call.pairs) {
    if (dst % L != p.me) continue;
    const int src_process = src / L;
    const int dst_process = dst / L;
    if (src_process == layout.rank && dst_process != layout.rank) {
      lane.sends.push_back({dst_process, p.input_of(src % L), out.bytes()});
    }
    if (dst == me) {
      received = true;
      if (src_process == layout.rank) {
        if (out.count > 0) std::memcpy(out.data, p.input_of(src % L), out.bytes());
      } else {
        lane.recvs.push_back({src_process, out.data, out.bytes()});
      }
    }
  }
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  if (!received && out.count > 0) std::memset(out.data, 0, out.bytes());
}

}  // namespace replicator::detail
