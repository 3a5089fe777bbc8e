// The frame decoder across processes: check_frame_calls on the frames of P processes, as they
// arrive from the wire (any bytes), against this process's own call.
//
// Input: byte 0 picks the process count P (1..8), byte 1 the local replicas L (1..8), byte 2
// this process's rank; the rest are the P frames (kFrameBytes each, zero-filled past the
// input). This process's frame is its own header, as post_frame writes it (flagged when the
// input's is), so the call it checks against is a real one.
// Promises: returns only when every frame names this call; otherwise CollectiveMismatch with
// one description per replica (P·L) and this call's sequence number; nothing else.
#include <algorithm>
#include <cstring>
#include <vector>

#include "replicator/errors.h"
#include "src/collectives/frames.h"
#include "src/collectives/table.h"
#include "tests/fuzz/fuzz.h"

namespace rd = replicator::detail;
using replicator::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  rd::ProcessLayout layout;
  layout.processes = 1 + data[0] % 8;
  layout.local = 1 + data[1] % 8;
  layout.rank = data[2] % layout.processes;
  const auto P = static_cast<std::size_t>(layout.processes);
  std::vector<std::byte> frames(P * rd::kFrameBytes);
  std::memcpy(frames.data(), data + 3, std::min(size - 3, frames.size()));

  std::byte* own = frames.data() + static_cast<std::size_t>(layout.rank) * rd::kFrameBytes;
  rd::FrameHeader mine;
  std::memcpy(&mine, own, sizeof mine);
  mine.kind %= static_cast<std::uint8_t>(rd::OpKind::kCount);
  mine.op %= 5;     // ReduceOp
  mine.dtype %= 7;  // DType
  const bool flagged = (mine.flags & rd::kLocalMismatch) != 0;
  mine.flags = 0;
  rd::FrameHeader sent = mine;
  sent.flags = flagged ? rd::kLocalMismatch : 0;
  std::memcpy(own, &sent, sizeof sent);

  try {
    rd::check_frame_calls(layout, frames.data(), mine);
  } catch (const replicator::CollectiveMismatch& e) {
    require(e.calls().size() == P * static_cast<std::size_t>(layout.local),
            "a mismatch names a call for every replica");
    require(e.sequence() == mine.sequence, "a mismatch names this call's sequence number");
    return 0;
  }
  for (std::size_t q = 0; q < P; ++q) {
    rd::FrameHeader theirs;
    std::memcpy(&theirs, frames.data() + q * rd::kFrameBytes, sizeof theirs);
    require(rd::same_call(theirs, mine), "frames that name another call are not let through");
  }
  return 0;
}
