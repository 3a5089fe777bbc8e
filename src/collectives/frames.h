// Frames: the fixed-size message every process sends every other on a lane at the start of
// each collective. It carries the caller's descriptor, so a mismatch across processes is
// raised as CollectiveMismatch on every replica (never read as data), and for small
// all-reduces the data itself (one round trip in all).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/collectives/across/across.h"

namespace replicator::detail {

// Frames are fixed-size so that two processes that disagree about a collective still
// exchange well-formed messages and can say what each called.
// 256 bytes, four cache lines: what a small all-reduce costs is mostly the lines that
// cross between cores, so the frame is kept small (up to 208 bytes of partials ride in it),
// and where the transport lets a receive take a shorter message, only its header and
// payload are sent.
constexpr std::size_t kFrameBytes = 256;
constexpr std::size_t kHeaderBytes = 48;
constexpr std::size_t kFramePayload = kFrameBytes - kHeaderBytes;

// The frames of a transport. Where a receive may take a shorter message, the receive is as
// long as the transport sends at once (its eager size, whole cache lines) and each frame
// only as long as its header and payload: a small all-reduce up to that size still costs one
// round trip (over OpenMPI's shared memory: 3,968 bytes, against 208 where every frame has
// the same length, which must then stay small).
inline std::size_t frame_bytes(const TransportTraits& traits) {
  if (!traits.receives_shorter) return kFrameBytes;
  return std::max(kFrameBytes, traits.eager_bytes / 64 * 64);
}
inline std::size_t frame_payload(const TransportTraits& traits) {
  return frame_bytes(traits) - kHeaderBytes;
}

// A frame's flag: the replicas of the sending process called different collectives here;
// the header is its local replica 0's call, the payload a LocalMismatch.
inline constexpr std::uint8_t kLocalMismatch = 1;

// The header every frame starts with.
struct FrameHeader {
  std::uint64_t sequence;
  std::uint64_t count;
  std::uint64_t layout;
  std::int32_t root;
  std::uint8_t kind;
  std::uint8_t op;
  std::uint8_t dtype;
  std::uint8_t flags;  // kLocalMismatch
  std::uint8_t memory;
  std::uint32_t num_buffers;
  std::uint32_t site_file;  // where the caller called from (file_id, site_files.h; 0: unknown)
  std::uint32_t site_line;  // never compared: only for messages
};
static_assert(sizeof(FrameHeader) <= kHeaderBytes);

FrameHeader header_of(const Descriptor& d);
// The payload of a kLocalMismatch frame: the first local replica whose call differs from
// local replica 0's, and that call.
struct LocalMismatch {
  FrameHeader other;
  std::uint32_t other_local;
};
static_assert(sizeof(LocalMismatch) <= kFramePayload);

// Whether two headers name the same call (what every process must agree on).
bool same_call(const FrameHeader& a, const FrameHeader& b);
// "all_reduce(f32 x 1024, op=sum) at train.cc:120" for a received header, whatever its
// bytes.
std::string describe(const FrameHeader& h);

// Before the first collective on a lane: sizes the frames and, where the transport gains
// from it, posts the receives of the first frames.
void start_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane);

// After a collective: the receives of the next frames, where the transport gains from
// receives posted ahead, unless the run ends here (a process may exit after a run).
void next_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane);

// Posts this lane's frame (header + `payload`, at most frame_payload() bytes) to every other
// process, and the receives of theirs unless they were posted ahead. Returns the ticket
// check_frames waits for.
// `flagged`: a header to send instead of this replica's call's.
Transport::Ticket post_frame(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                             const void* payload, std::size_t payload_bytes,
                             const FrameHeader* flagged = nullptr);

// Throws CollectiveMismatch if a frame of `frames` (one per process, frame_bytes() each, this
// process's own at its rank) names another call than `mine`: the message and calls() name
// what each process's replicas called. The frames came from other processes and may hold any
// bytes; a header or payload that names no collective, op or dtype is described as such.
void check_frame_calls(const ProcessLayout& layout, const std::byte* frames,
                       const FrameHeader& mine);

// Waits for the frames of `ticket` (post_frame's); throws CollectiveMismatch on every
// replica if any process called something else (check_frame_calls). Returns the frames by process
// (this process's own at its rank).
const std::byte* check_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                              Transport::Ticket ticket, Deadline deadline);

// Where the local replicas of this process called different collectives (seen at the local
// barrier), tells every other process on this lane, so that every replica of the job raises
// CollectiveMismatch and none sends data: exchanges a kLocalMismatch frame and posts the next
// frames' receives. Throws the CollectiveMismatch the frames show (or the transport's
// errors).
void exchange_local_mismatch(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                             Deadline deadline);

// post_frame then check_frames.
const std::byte* exchange_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                                 Deadline deadline, const void* payload, std::size_t payload_bytes);

// The start of every algorithm whose data follows the frames: exchanges header-only frames
// (throws CollectiveMismatch), empties lane.sends and lane.recvs, returns this replica's
// descriptor.
const Descriptor& start_exchange(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                                 Deadline deadline);

// Process `process`'s payload in the frames check_frames returned.
inline const std::byte* payload_of(const ProcessLayout& layout, const std::byte* frames,
                                   int process) {
  return frames + static_cast<std::size_t>(process) * frame_bytes(layout.traits) + kHeaderBytes;
}

}  // namespace replicator::detail
