// all_reduce across processes, in frame: where every process's partials of the slice fit in
// a frame (frames.h), they ride in it: one round trip in all. Each process sends its k rows
// (k·row ≤ frame_payload() bytes) to each of the P-1 others and combines every process's.
#include <cstring>

#include "src/collectives/across/all_reduce_slice.h"
#include "src/collectives/frames.h"

namespace replicator::detail {

void all_reduce_in_frame(SliceReduce& s, Deadline deadline) {
  s.reduce_partials(/*rows_in_arena=*/true, 0, 0);
  // The frame carries my rows (gathered into the arena where some alias a buffer).
  const std::size_t row = s.row;
  for (std::size_t b = 0; b < s.mine.size(); ++b) {
    if (s.lane.rows[b] != s.arena + b * row && row > 0) {
      std::memcpy(s.arena + b * row, s.lane.rows[b], row);
    }
  }
  const std::byte* frames =
      exchange_frames(s.p, s.layout, s.lane, deadline, s.arena, s.mine.size() * row);
  s.combine(
      s.lo, s.hi,
      [&](int q, std::size_t t) -> const std::byte* {
        return (q == s.rank ? s.arena : payload_of(s.layout, frames, q)) + t * row;
      },
      [&](std::size_t i, std::uint64_t at, std::uint64_t) { s.local_outputs(i, at); });
}

}  // namespace replicator::detail
