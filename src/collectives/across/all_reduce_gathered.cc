// all_reduce across processes, gathered: every process sends its k partial rows of the whole
// slice to every other (k·row·(P-1) bytes) and combines all of them itself: one exchange
// after the frames instead of two, where a message costs more than its bytes.
#include "src/collectives/across/all_reduce_slice.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void all_reduce_gathered(SliceReduce& s, Deadline deadline) {
  const std::size_t row = s.row;
  s.reduce_partials(/*rows_in_arena=*/false, s.received_rows() * row, 0);
  const ProcessLayout& layout = s.layout;
  LaneScratch& lane = s.lane;
  const bool early = layout.traits.receives_ahead;
  // Where a receive posted early saves a round trip, the data's receives go out right behind
  // the frame, before the frames are checked: on a mismatch no process sends data, and the
  // failed run aborts the transport, so they are never matched.
  const Transport::Ticket framed = post_frame(s.p, layout, lane, nullptr, 0);
  lane.recvs.clear();
  std::byte* cursor = s.received;
  for (int q = 0; q < s.P; ++q) {
    if (q == s.rank) continue;
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      lane.recvs.push_back({q, cursor, row});
      cursor += row;
    }
  }
  if (early) post(layout, s.p.me, {}, lane.recvs, s.d);
  check_frames(s.p, layout, lane, framed, deadline);
  lane.sends.clear();
  for (int q = 0; q < s.P; ++q) {
    if (q == s.rank) continue;
    for (std::size_t t = 0; t < s.mine.size(); ++t) lane.sends.push_back({q, lane.rows[t], row});
  }
  if (early) lane.recvs.clear();
  exchange(layout, s.p.me, lane.sends, lane.recvs, deadline, s.d);
  s.combine(
      s.lo, s.hi,
      [&](int q, std::size_t t) -> const std::byte* {
        return q == s.rank ? lane.rows[t] : s.received + s.row_index(q, t) * row;
      },
      [&](std::size_t i, std::uint64_t at, std::uint64_t) { s.local_outputs(i, at); });
}

}  // namespace replicator::detail
