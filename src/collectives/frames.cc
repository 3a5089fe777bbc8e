#include "src/collectives/frames.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "replicator/errors.h"
#include "src/collectives/table.h"
#include "src/comm/site_files.h"

namespace replicator::detail {

FrameHeader header_of(const Descriptor& d) {
  return {.sequence = d.sequence,
          .count = d.count,
          .layout = d.layout,
          .root = d.root,
          .kind = d.kind,
          .op = static_cast<std::uint8_t>(d.op),
          .dtype = static_cast<std::uint8_t>(d.dtype),
          .flags = 0,
          .memory = static_cast<std::uint8_t>(d.memory),
          .num_buffers = d.num_buffers,
          .site_file = file_id(d.call.where.file),
          .site_line = d.call.where.line};
}

bool same_call(const FrameHeader& a, const FrameHeader& b) {
  return a.sequence == b.sequence && a.count == b.count && a.layout == b.layout &&
         a.root == b.root && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype &&
         a.flags == b.flags && a.memory == b.memory;
}

std::string describe(const FrameHeader& h) {
  Descriptor d;
  d.kind = h.kind;
  if (h.kind < static_cast<std::uint8_t>(OpKind::kCount)) d.traits = &definition(h.kind).traits;
  d.op = static_cast<ReduceOp>(h.op);
  d.dtype = static_cast<DType>(h.dtype);
  d.root = h.root;
  d.count = h.count;
  d.layout = h.layout;
  d.sequence = h.sequence;
  d.memory = static_cast<MemoryKind>(h.memory);
  return d.describe() +
         (h.num_buffers > 1 ? " [" + std::to_string(h.num_buffers) + " buffers]" : std::string()) +
         site_suffix(h.site_file, h.site_line);
}

namespace {

// Posts the receives of the next collective's frames on this lane. Frames have a fixed size,
// so they can be received before anyone knows what the next collective is; the peer's
// frame then lands at once, without a round trip to announce the receive. Posted at the
// end of every collective (after every receive of its data, so messages still match in
// order), and before the first one.
// The receives of every other process's frame, into lane.recvs (emptied first).
void frame_receives(const ProcessLayout& layout, LaneScratch& lane) {
  lane.recvs.clear();
  const std::size_t bytes = frame_bytes(layout.traits);
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    lane.recvs.push_back({q, lane.frames.data() + static_cast<std::size_t>(q) * bytes, bytes});
  }
}

void post_frame_receives(const ProcessLayout& layout, int me, LaneScratch& lane,
                         const Descriptor& d) {
  frame_receives(layout, lane);
  post(layout, me, {}, lane.recvs, d);
  lane.frames_ahead = true;
}

}  // namespace

void start_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane) {
  lane.frames.resize(static_cast<std::size_t>(layout.processes) * frame_bytes(layout.traits));
  if (!lane.frames_ahead && layout.traits.receives_ahead) {
    post_frame_receives(layout, p.me, lane, p.mine());
  }
}

// After a collective: the next frames' receives, unless the run ends here. A process may
// exit after a run, and a socket closed with control messages of Gloo unread (those a
// posted receive sends) is reset, which can drop data a slower peer has yet to read.
void next_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane) {
  if (!layout.traits.receives_ahead) return;
  if (p.mine().kind == static_cast<std::uint8_t>(OpKind::kEndStep)) {
    lane.frames_ahead = false;
  } else {
    post_frame_receives(layout, p.me, lane, p.mine());
  }
}

// Posts this lane's frame (header + `payload`) to every other process, and the receives of
// theirs unless they were posted ahead. Returns the ticket check_frames waits for.
Transport::Ticket post_frame(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                             const void* payload, std::size_t payload_bytes,
                             const FrameHeader* flagged) {
  const int P = layout.processes;
  std::byte* frames = lane.frames.data();
  const std::size_t bytes = frame_bytes(layout.traits);
  std::byte* mine = frames + static_cast<std::size_t>(layout.rank) * bytes;
  const FrameHeader header = flagged ? *flagged : header_of(p.mine());
  std::memcpy(mine, &header, sizeof header);
  if (payload_bytes > 0) std::memcpy(mine + kHeaderBytes, payload, payload_bytes);
  const std::size_t sent = layout.traits.receives_shorter ? kHeaderBytes + payload_bytes : bytes;
  lane.sends.clear();
  for (int q = 0; q < P; ++q) {
    if (q != layout.rank) lane.sends.push_back({q, mine, sent});
  }
  if (lane.frames_ahead) {
    lane.recvs.clear();
  } else {
    frame_receives(layout, lane);
  }
  return post(layout, p.me, lane.sends, lane.recvs, p.mine());
}

void check_frame_calls(const ProcessLayout& layout, const std::byte* frames,
                       const FrameHeader& mine) {
  const int P = layout.processes;
  const std::size_t bytes = frame_bytes(layout.traits);
  bool same = true;
  for (int q = 0; q < P; ++q) {
    FrameHeader theirs;
    std::memcpy(&theirs, frames + static_cast<std::size_t>(q) * bytes, sizeof theirs);
    same = same && same_call(theirs, mine);
  }
  if (same) return;
  std::vector<std::string> calls;
  std::string message =
      "collective #" + std::to_string(mine.sequence) + " does not match across processes: ";
  for (int q = 0; q < P; ++q) {
    const std::byte* frame = frames + static_cast<std::size_t>(q) * bytes;
    FrameHeader theirs;
    std::memcpy(&theirs, frame, sizeof theirs);
    const std::string call = describe(theirs);
    message += (q ? "; " : "") + std::string("process ") + std::to_string(q) + " (" +
               replicas_of(layout, q) + ")";
    if ((theirs.flags & kLocalMismatch) == 0) {
      for (int l = 0; l < layout.local; ++l) calls.push_back(call);
      message += " called " + call;
      continue;
    }
    // That process's replicas disagree among themselves: local replicas before `other_local`
    // called the header's call, replica `other_local` another; of the later ones this frame
    // does not tell.
    LocalMismatch odd;
    std::memcpy(&odd, frame + kHeaderBytes, sizeof odd);
    const std::string other = describe(odd.other);
    const int first = q * layout.local;
    const auto k = static_cast<int>(
        std::min<std::uint32_t>(odd.other_local, static_cast<std::uint32_t>(layout.local - 1)));
    for (int l = 0; l < layout.local; ++l) {
      calls.push_back(l < k ? call : l == k ? other : "(not known across processes)");
    }
    message += " disagree among themselves: replica ";
    message += std::to_string(first) + " called " + call;
    message += ", replica " + std::to_string(first + k) + " called " + other;
  }
  message +=
      ". Every replica must issue the same collectives in the same order, with the "
      "same dtype, size, root and reduce op.";
  throw CollectiveMismatch(message, mine.sequence, std::move(calls));
}

// Waits for the frames of `ticket` (post_frame's); throws CollectiveMismatch if any process
// called something else. Returns the frames by process (this process's own at its rank).
const std::byte* check_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                              Transport::Ticket ticket, Transport::Clock::time_point deadline) {
  wait(layout, p.me, ticket, deadline, p.mine());
  check_frame_calls(layout, lane.frames.data(), header_of(p.mine()));
  return lane.frames.data();
}

const std::byte* exchange_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                                 Transport::Clock::time_point deadline, const void* payload,
                                 std::size_t payload_bytes) {
  return check_frames(p, layout, lane, post_frame(p, layout, lane, payload, payload_bytes),
                      deadline);
}

const Descriptor& start_exchange(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                                 Deadline deadline) {
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
  lane.sends.clear();
  lane.recvs.clear();
  return p.mine();
}

void exchange_local_mismatch(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                             Deadline deadline) {
  start_frames(p, layout, lane);
  std::size_t k = 0;
  while (k < p.calls.size() && p.calls[k]->matches(*p.calls[0])) ++k;
  FrameHeader flagged = header_of(*p.calls[0]);
  flagged.flags = kLocalMismatch;
  LocalMismatch odd{.other = header_of(*p.calls[std::min(k, p.calls.size() - 1)]),
                    .other_local = static_cast<std::uint32_t>(k)};
  try {
    check_frames(p, layout, lane, post_frame(p, layout, lane, &odd, sizeof odd, &flagged),
                 deadline);
  } catch (const CollectiveMismatch&) {
    next_frames(p, layout, lane);
    throw;
  }
}

}  // namespace replicator::detail
