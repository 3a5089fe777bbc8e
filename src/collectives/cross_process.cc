#include "src/collectives/cross_process.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

// Frames are fixed-size so that two processes that disagree about a collective still
// exchange well-formed messages and can say what each called.
// 256 bytes, four cache lines: what a small all-reduce costs is mostly the lines that
// cross between cores, so the frame is kept small (up to 216 bytes of partials ride in it),
// and where the transport lets a receive take a shorter message, only its header and
// payload are sent.
constexpr std::size_t kFrameBytes = 256;
constexpr std::size_t kHeaderBytes = 40;
constexpr std::size_t kFramePayload = kFrameBytes - kHeaderBytes;
// Up to this many bytes of partials per process, an all-reduce sends every process's
// partials of the whole slice to every other (one exchange after the frames) instead of
// owner parts and results (two).
constexpr std::size_t kGatherBytes = std::size_t{16} << 10;
// A pipelined step's results at least this large are written past the cache where peers copy
// them straight out of this process's memory (Transport::streamed_results).
constexpr std::size_t kStreamBytes = std::size_t{16} << 10;

struct FrameHeader {
  std::uint64_t sequence;
  std::uint64_t count;
  std::uint64_t layout;
  std::int32_t root;
  std::uint8_t kind;
  std::uint8_t op;
  std::uint8_t dtype;
  std::uint8_t unused;
  std::uint32_t num_buffers;
};
static_assert(sizeof(FrameHeader) <= kHeaderBytes);

FrameHeader header_of(const Descriptor& d) {
  return {.sequence = d.sequence,
          .count = d.count,
          .layout = d.layout,
          .root = d.root,
          .kind = static_cast<std::uint8_t>(d.kind),
          .op = static_cast<std::uint8_t>(d.op),
          .dtype = static_cast<std::uint8_t>(d.dtype),
          .unused = 0,
          .num_buffers = static_cast<std::uint32_t>(d.call.buffers.size())};
}

bool same_call(const FrameHeader& a, const FrameHeader& b) {
  return a.sequence == b.sequence && a.count == b.count && a.layout == b.layout &&
         a.root == b.root && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype;
}

std::string describe(const FrameHeader& h) {
  Descriptor d;
  d.kind = static_cast<OpKind>(h.kind);
  d.op = static_cast<ReduceOp>(h.op);
  d.dtype = static_cast<DType>(h.dtype);
  d.root = h.root;
  d.count = h.count;
  d.layout = h.layout;
  d.sequence = h.sequence;
  return d.describe() + (h.num_buffers > 1 ? " [" + std::to_string(h.num_buffers) + " buffers]"
                                           : std::string());
}

std::string replicas_of(const ProcessLayout& layout, int process) {
  const int first = process * layout.local;
  if (layout.local == 1) return "replica " + std::to_string(first);
  return "replicas " + std::to_string(first) + "-" + std::to_string(first + layout.local - 1);
}

// Runs a call of the transport for collective `d`. Transport errors name processes; the user
// thinks in replicas.
template <typename Call>
auto on_transport(const ProcessLayout& layout, const Descriptor& d, Call&& call) {
  try {
    return call(*layout.transport);
  } catch (const Timeout& e) {
    std::vector<int> missing;
    std::string names;
    for (const int process : e.missing()) {
      for (int l = 0; l < layout.local; ++l) missing.push_back(process * layout.local + l);
      names += (names.empty() ? "" : ", ") + std::string("process ") + std::to_string(process) +
               " (" + replicas_of(layout, process) + ")";
    }
    throw Timeout(std::string(op_name(d.kind)) + " #" + std::to_string(d.sequence) + " (" +
                      d.describe() + ") timed out after " +
                      std::to_string(e.deadline().count()) + " ms waiting for " + names +
                      ". Check that every replica issues the same collectives, or raise the "
                      "timeout.",
                  std::string(op_name(d.kind)), d.sequence, e.deadline(), std::move(missing));
  } catch (const PeerLost& e) {
    throw PeerLost("lost process " + std::to_string(e.peer()) + " (" +
                       replicas_of(layout, e.peer()) + ") during " +
                       std::string(op_name(d.kind)) + " #" + std::to_string(d.sequence) + ": " +
                       e.what(),
                   e.peer());
  }
}

void exchange(const ProcessLayout& layout, int lane, std::span<const SendOp> sends,
              std::span<const RecvOp> recvs, Transport::Clock::time_point deadline,
              const Descriptor& d) {
  on_transport(layout, d, [&](Transport& t) { t.exchange(lane, sends, recvs, deadline); });
}

Transport::Ticket post(const ProcessLayout& layout, int lane, std::span<const SendOp> sends,
                       std::span<const RecvOp> recvs, const Descriptor& d) {
  return on_transport(layout, d, [&](Transport& t) { return t.post(lane, sends, recvs); });
}

void wait(const ProcessLayout& layout, int lane, Transport::Ticket ticket,
          Transport::Clock::time_point deadline, const Descriptor& d) {
  on_transport(layout, d, [&](Transport& t) { t.wait(lane, ticket, deadline); });
}

// Posts the receives of the next collective's frames on this lane. Frames have a fixed size,
// so they can be received before anyone knows what the next collective is; the peer's
// frame then lands at once, without a round trip to announce the receive. Posted at the
// end of every collective (after every receive of its data, so messages still match in
// order), and before the first one.
// The receives of every other process's frame, into lane.recvs (emptied first).
void frame_receives(const ProcessLayout& layout, LaneScratch& lane) {
  lane.recvs.clear();
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    lane.recvs.push_back(
        {q, lane.frames.data() + static_cast<std::size_t>(q) * kFrameBytes, kFrameBytes});
  }
}

void post_frame_receives(const ProcessLayout& layout, int me, LaneScratch& lane,
                         const Descriptor& d) {
  frame_receives(layout, lane);
  post(layout, me, {}, lane.recvs, d);
  lane.frames_ahead = true;
}

// After a collective: the next frames' receives, unless the run ends here. A process may
// exit after a run, and a socket closed with control messages of Gloo unread (those a
// posted receive sends) is reset, which can drop data a slower peer has yet to read.
void next_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane) {
  if (!layout.transport->receives_ahead()) return;
  if (p.mine().kind == OpKind::kEndStep) {
    lane.frames_ahead = false;
  } else {
    post_frame_receives(layout, p.me, lane, p.mine());
  }
}

// Posts this lane's frame (header + `payload`) to every other process, and the receives of
// theirs unless they were posted ahead. Returns the ticket check_frames waits for.
Transport::Ticket post_frame(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                             const void* payload, std::size_t payload_bytes) {
  const int P = layout.processes;
  std::byte* frames = lane.frames.data();
  std::byte* mine = frames + static_cast<std::size_t>(layout.rank) * kFrameBytes;
  const FrameHeader header = header_of(p.mine());
  std::memcpy(mine, &header, sizeof header);
  if (payload_bytes > 0) std::memcpy(mine + kHeaderBytes, payload, payload_bytes);
  const std::size_t sent =
      layout.transport->receives_shorter() ? kHeaderBytes + payload_bytes : kFrameBytes;
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

// Waits for the frames of `ticket` (post_frame's); throws CollectiveMismatch if any process
// called something else. Returns the frames by process (this process's own at its rank).
const std::byte* check_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                              Transport::Ticket ticket, Transport::Clock::time_point deadline) {
  wait(layout, p.me, ticket, deadline, p.mine());
  const int P = layout.processes;
  std::byte* frames = lane.frames.data();
  const FrameHeader header = header_of(p.mine());
  bool same = true;
  for (int q = 0; q < P; ++q) {
    FrameHeader theirs;
    std::memcpy(&theirs, frames + static_cast<std::size_t>(q) * kFrameBytes, sizeof theirs);
    same = same && same_call(theirs, header);
  }
  if (same) return frames;
  std::vector<std::string> calls;
  std::string message = "collective #" + std::to_string(header.sequence) +
                        " does not match across processes: ";
  for (int q = 0; q < P; ++q) {
    FrameHeader theirs;
    std::memcpy(&theirs, frames + static_cast<std::size_t>(q) * kFrameBytes, sizeof theirs);
    const std::string call = describe(theirs);
    for (int l = 0; l < layout.local; ++l) calls.push_back(call);
    message += (q ? "; " : "") + std::string("process ") + std::to_string(q) + " (" +
               replicas_of(layout, q) + ") called " + call;
  }
  message += ". Every replica must issue the same collectives in the same order, with the "
             "same dtype, size, root and reduce op.";
  throw CollectiveMismatch(message, header.sequence, std::move(calls));
}

const std::byte* exchange_frames(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                                 Transport::Clock::time_point deadline, const void* payload,
                                 std::size_t payload_bytes) {
  return check_frames(p, layout, lane, post_frame(p, layout, lane, payload, payload_bytes),
                      deadline);
}

const std::byte* payload_of(const std::byte* frames, int process) {
  return frames + static_cast<std::size_t>(process) * kFrameBytes + kHeaderBytes;
}

// Calls fn(buffer index, element offset in the buffer, length, offset from `begin`) for
// each piece of the element range [begin, end) of the concatenation of `buffers`.
template <typename Fn>
void for_each_piece(std::span<const Buffer> buffers, std::uint64_t begin, std::uint64_t end,
                    Fn&& fn) {
  std::uint64_t base = 0;
  for (std::size_t i = 0; i < buffers.size() && base < end; ++i) {
    const std::uint64_t lo = std::max(begin, base);
    const std::uint64_t hi = std::min(end, base + buffers[i].count);
    if (lo < hi) fn(i, lo - base, hi - lo, lo - begin);
    base += buffers[i].count;
  }
}

// Bytes of [begin, end) as accumulators (op) or as elements.
std::size_t partial_bytes(std::span<const Buffer> buffers, std::uint64_t begin,
                          std::uint64_t end, ReduceOp op) {
  std::size_t bytes = 0;
  for_each_piece(buffers, begin, end, [&](std::size_t i, std::uint64_t, std::uint64_t len,
                                          std::uint64_t) {
    bytes += len * partial_size(buffers[i].dtype, op);
  });
  return bytes;
}

std::size_t element_bytes(std::span<const Buffer> buffers, std::uint64_t begin,
                          std::uint64_t end) {
  std::size_t bytes = 0;
  for_each_piece(buffers, begin, end, [&](std::size_t i, std::uint64_t, std::uint64_t len,
                                          std::uint64_t) {
    bytes += len * dtype_size(buffers[i].dtype);
  });
  return bytes;
}

std::byte* element(const Buffer& b, std::uint64_t offset) {
  return static_cast<std::byte*>(b.data) + offset * dtype_size(b.dtype);
}

// ---- all_reduce ---------------------------------------------------------------------
// Thread l reduces its slice [lo, hi): (1) its process's subtree partials of the slice,
// from the local buffers; (2) the slice is cut into P parts, part q is owned by process
// q: each process sends its partials of part q to q and receives everyone's partials of
// its own part; (3) the owner combines them in id order and sends the result to all;
// (4) the slice's result is written into every local buffer. Bytes sent per process:
// about (k + 1)·(P-1)/P of the slice, k = its number of subtrees (1 when L is a power of
// two). A slice whose partials fit in a frame travels in the frames: one round trip; up to
// kGatherBytes, every process gets every process's partials and combines the whole slice.
// Where peers copy results straight out of this process's memory (OpenMPI between processes
// of one host), a step's results from kStreamBytes on are written past the cache: the peer
// reads them from memory, and the next call's writes need not first take back lines the
// peer's core holds.
void all_reduce_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                       Transport::Clock::time_point deadline) {
  const Descriptor& d = p.mine();
  const std::span<const Buffer> buffers = d.call.buffers;
  const ReduceOp op = d.op;
  const int rank = layout.rank;
  const int P = layout.processes;
  const int first_local = rank * layout.local;
  const auto [lo, hi] = slice_of(d.count, p.me, layout.local);
  const std::vector<Subtree>& mine = layout.subtrees[static_cast<std::size_t>(rank)];
  const std::size_t row = partial_bytes(buffers, lo, hi, op);
  const auto divisor = static_cast<std::size_t>(layout.replicas());
  const bool small = static_cast<std::size_t>(layout.max_subtrees) * row <= kFramePayload;
  // ... unless that turns messages the transport sends at once into ones with a handshake.
  const std::size_t eager = layout.transport->eager_bytes();
  const bool gathered = !small &&
                        static_cast<std::size_t>(layout.max_subtrees) * row <= kGatherBytes &&
                        (row <= eager || row / static_cast<std::size_t>(P) > eager);

  // When one buffer holds the whole slice, results land straight in the buffers, and a
  // single-replica subtree's partials are that replica's buffer itself (where the
  // accumulator is the element type): no copies beyond what the reduction needs.
  std::size_t seg = 0;
  std::uint64_t seg_base = 0;
  bool single = false;
  for (std::uint64_t base = 0; seg < buffers.size(); base += buffers[seg++].count) {
    if (lo >= base && hi <= base + buffers[seg].count) {
      single = hi > lo;
      seg_base = base;
      break;
    }
  }
  const bool alias_rows =
      single && partial_size(buffers[seg].dtype, op) == dtype_size(buffers[seg].dtype);

  // Pipelined geometry (the path past the frames and the gathered one): the slice is cut
  // into P parts, each part into steps of about pipeline_bytes.
  const bool pipelined = !small && !gathered;
  const bool early = layout.transport->receives_ahead();
  const auto part = [&](int q) {
    const auto [a, b] = slice_of(hi - lo, q, P);
    return std::pair<std::uint64_t, std::uint64_t>{lo + a, lo + b};
  };
  std::uint64_t step_elements = 1;
  if (pipelined) {
    const std::uint64_t largest_part = (hi - lo + P - 1) / static_cast<std::uint64_t>(P);
    const std::size_t step_bytes =
        layout.transport->pipeline_bytes(largest_part * partial_size(d.dtype, op));
    step_elements = std::max<std::uint64_t>(64, step_bytes / partial_size(d.dtype, op));
  }
  const auto chunk = [&](int q, std::uint64_t k) {
    const auto [a, b] = part(q);
    const std::uint64_t ca = std::min(b, a + k * step_elements);
    return std::pair<std::uint64_t, std::uint64_t>{ca, std::min(b, ca + step_elements)};
  };
  std::uint64_t steps = 0;
  for (int q = 0; pipelined && q < P; ++q) {
    const auto [a, b] = part(q);
    steps = std::max(steps, (b - a + step_elements - 1) / step_elements);
  }
  const auto [my_a, my_b] = part(rank);
  // Where a received step of partials lands: with every receive posted at once, each step
  // has its own place in rows as long as my part; otherwise a step is combined before the
  // next is received, so every step reuses one row as long as the largest step, which
  // stays in cache instead of streaming the whole part through memory.
  std::uint64_t received_row_bytes = 0;
  if (pipelined && early) {
    received_row_bytes = partial_bytes(buffers, my_a, my_b, op);
  } else if (pipelined) {
    for (std::uint64_t step = 0; step < steps; ++step) {
      const auto [ma, mb] = chunk(rank, step);
      received_row_bytes = std::max(received_row_bytes, partial_bytes(buffers, ma, mb, op));
    }
  }
  const auto received_offset_of = [&](std::uint64_t at) {
    return early ? partial_bytes(buffers, my_a, at, op) : 0;
  };

  // Arena: my partial rows (unless they all alias buffers) | received partial rows (of
  // my part) | result row (elements, unless results land in the buffers).
  bool all_aliased = alias_rows;
  for (const Subtree& s : mine) all_aliased = all_aliased && s.size == 1;
  const std::size_t rows_bytes = small || !all_aliased ? mine.size() * row : 0;
  // Received rows are stored process by process, subtree by subtree: row_index(q, t) is
  // where q's subtree t goes among the other processes' rows.
  const auto row_index = [&](int q, std::size_t t) {
    std::size_t index = 0;
    for (int k = 0; k < q; ++k) {
      if (k != rank) index += layout.subtrees[static_cast<std::size_t>(k)].size();
    }
    return index + t;
  };
  const std::size_t received_rows = row_index(P, 0);
  std::size_t recv_bytes = 0;
  if (gathered) {
    recv_bytes = received_rows * row;
  } else if (pipelined) {
    recv_bytes = received_rows * received_row_bytes;
  }
  const std::size_t result_bytes =
      small || gathered || single ? 0 : element_bytes(buffers, lo, hi);
  std::byte* arena = lane.reserve(rows_bytes + recv_bytes + result_bytes);
  std::byte* received = arena + rows_bytes;
  std::byte* result = received + recv_bytes;

  // (1) Partials over my subtrees, straight from the local replicas' buffers.
  lane.rows.assign(mine.size(), nullptr);
  for (std::size_t b = 0; b < mine.size(); ++b) {
    if (alias_rows && mine[b].size == 1) {
      lane.rows[b] = element(p.of(mine[b].first - first_local).call.buffers[seg], lo - seg_base);
      continue;
    }
    lane.rows[b] = arena + b * row;
    std::size_t offset = 0;
    for_each_piece(buffers, lo, hi, [&](std::size_t i, std::uint64_t at, std::uint64_t len,
                                        std::uint64_t) {
      lane.inputs.clear();
      for (int r = mine[b].first; r < mine[b].first + mine[b].size; ++r) {
        lane.inputs.push_back(element(p.of(r - first_local).call.buffers[i], at));
      }
      void* out = lane.rows[b] + offset;
      tree_reduce({.op = op,
                   .dtype = buffers[i].dtype,
                   .inputs = lane.inputs.data(),
                   .n = mine[b].size,
                   .outputs = &out,
                   .num_outputs = 1,
                   .outputs_partial = true,
                   .count = len},
                  *p.scratch);
      offset += len * partial_size(buffers[i].dtype, op);
    });
  }
  // The local buffers at [at, at + len) of buffer i, as outputs.
  const auto local_outputs = [&](std::size_t i, std::uint64_t at) {
    lane.outputs.clear();
    for (int l = 0; l < layout.local; ++l) lane.outputs.push_back(element(p.of(l).call.buffers[i], at));
  };

  // Combines everyone's partials of [a, b) (at byte `offset` of a row; others' rows from
  // `row_of(q, b)`) into `outputs_of(piece)`.
  lane.sizes.clear();
  for (int q = 0; q < P; ++q) {
    for (const Subtree& s : layout.subtrees[static_cast<std::size_t>(q)]) lane.sizes.push_back(s.size);
  }
  const auto combine = [&](std::uint64_t a, std::uint64_t b, auto&& row_of, auto&& outputs_of,
                           bool streaming = false) {
    std::size_t offset = 0;
    for_each_piece(buffers, a, b, [&](std::size_t i, std::uint64_t at, std::uint64_t len,
                                      std::uint64_t from_a) {
      lane.inputs.clear();
      for (int q = 0; q < P; ++q) {
        const auto& trees = layout.subtrees[static_cast<std::size_t>(q)];
        for (std::size_t t = 0; t < trees.size(); ++t) lane.inputs.push_back(row_of(q, t) + offset);
      }
      outputs_of(i, at, from_a);
      tree_reduce({.op = op,
                   .dtype = buffers[i].dtype,
                   .inputs = lane.inputs.data(),
                   .n = static_cast<int>(lane.inputs.size()),
                   .sizes = lane.sizes.data(),
                   .inputs_partial = true,
                   .outputs = lane.outputs.data(),
                   .num_outputs = static_cast<int>(lane.outputs.size()),
                   .count = len,
                   .divisor = divisor,
                   .streaming = streaming},
                  *p.scratch);
      offset += len * partial_size(buffers[i].dtype, op);
    });
  };

  if (small) {
    // The frame carries my rows (gathered into the arena if some alias a buffer).
    for (std::size_t b = 0; b < mine.size(); ++b) {
      if (lane.rows[b] != arena + b * row && row > 0) std::memcpy(arena + b * row, lane.rows[b], row);
    }
    const std::byte* frames = exchange_frames(p, layout, lane, deadline, arena, rows_bytes);
    combine(
        lo, hi,
        [&](int q, std::size_t t) -> const std::byte* {
          return (q == rank ? arena : payload_of(frames, q)) + t * row;
        },
        [&](std::size_t i, std::uint64_t at, std::uint64_t) { local_outputs(i, at); });
    return;
  }
  // Where a receive posted early saves a round trip, the data's receives go out right behind
  // the frame, before the frames are checked: on a mismatch no process sends data, and the
  // failed run aborts the transport, so they are never matched.
  const Transport::Ticket framed = post_frame(p, layout, lane, nullptr, 0);
  if (gathered) {
    // Every process sends its rows of the whole slice to every other and combines them all:
    // one exchange instead of two, where a message costs more than its bytes.
    lane.recvs.clear();
    std::byte* cursor = received;
    for (int q = 0; q < P; ++q) {
      if (q == rank) continue;
      for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
        lane.recvs.push_back({q, cursor, row});
        cursor += row;
      }
    }
    if (early) post(layout, p.me, {}, lane.recvs, d);
    check_frames(p, layout, lane, framed, deadline);
    lane.sends.clear();
    for (int q = 0; q < P; ++q) {
      if (q == rank) continue;
      for (std::size_t t = 0; t < mine.size(); ++t) lane.sends.push_back({q, lane.rows[t], row});
    }
    if (early) lane.recvs.clear();
    exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
    combine(
        lo, hi,
        [&](int q, std::size_t t) -> const std::byte* {
          return q == rank ? lane.rows[t] : received + row_index(q, t) * row;
        },
        [&](std::size_t i, std::uint64_t at, std::uint64_t) { local_outputs(i, at); });
    return;
  }

  // (2)-(3) Pipelined.
  const auto received_row = [&](int q, std::size_t t) {
    return received + row_index(q, t) * received_row_bytes;
  };
  // Results: into local buffer 0 (one buffer) or the result row (several).
  std::byte* const results =
      single ? element(p.of(0).call.buffers[seg], lo - seg_base) : result;

  // My partials of chunk `step` of q's part, my result of chunk `step` of my part, to q; q's
  // partials of chunk `step` of my part, q's result of chunk `step` of its part.
  const auto send_partials = [&](int q, std::uint64_t step) {
    const auto [ca, cb] = chunk(q, step);
    if (cb <= ca) return;
    const std::size_t off = partial_bytes(buffers, lo, ca, op);
    const std::size_t bytes = partial_bytes(buffers, ca, cb, op);
    for (std::size_t t = 0; t < mine.size(); ++t) lane.sends.push_back({q, lane.rows[t] + off, bytes});
  };
  const auto send_result = [&](int q, std::uint64_t step) {
    const auto [ma, mb] = chunk(rank, step);
    if (mb > ma) {
      lane.sends.push_back(
          {q, results + element_bytes(buffers, lo, ma), element_bytes(buffers, ma, mb)});
    }
  };
  const auto recv_partials = [&](int q, std::uint64_t step) {
    const auto [ma, mb] = chunk(rank, step);
    if (mb <= ma) return;
    const std::size_t off = received_offset_of(ma);
    const std::size_t bytes = partial_bytes(buffers, ma, mb, op);
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      lane.recvs.push_back({q, received_row(q, t) + off, bytes});
    }
  };
  const auto recv_result = [&](int q, std::uint64_t step) {
    const auto [ca, cb] = chunk(q, step);
    if (cb > ca) {
      lane.recvs.push_back(
          {q, results + element_bytes(buffers, lo, ca), element_bytes(buffers, ca, cb)});
    }
  };
  // Combines everyone's partials of chunk `step` of my part into the results.
  const auto combine_step = [&](std::uint64_t step) {
    const auto [ma, mb] = chunk(rank, step);
    if (mb <= ma) return;
    const std::size_t own_offset = partial_bytes(buffers, lo, ma, op);
    const std::size_t received_offset = received_offset_of(ma);
    const std::size_t result_offset = element_bytes(buffers, lo, ma);
    combine(
        ma, mb,
        [&](int q, std::size_t t) -> const std::byte* {
          return q == rank ? lane.rows[t] + own_offset : received_row(q, t) + received_offset;
        },
        [&](std::size_t i, std::uint64_t at, std::uint64_t from_a) {
          if (single) return local_outputs(i, at);
          lane.outputs.clear();
          lane.outputs.push_back(result + result_offset + element_bytes(buffers, ma, ma + from_a));
        },
        layout.transport->streamed_results() && element_bytes(buffers, ma, mb) >= kStreamBytes);
  };
  // Runs add(q) for every other process, into lane.sends / lane.recvs emptied first.
  const auto for_peers = [&](auto&& add) {
    lane.sends.clear();
    lane.recvs.clear();
    for (int q = 0; q < P; ++q) {
      if (q != rank) add(q);
    }
  };

  if (early) {
    // Every receive is posted first (the partials of my part step by step, then the
    // owners' results), then every partial is sent; step s is combined as soon as it has
    // arrived and its result sent at once, while later steps still move.
    lane.tickets.clear();
    for (std::uint64_t step = 0; step < steps; ++step) {
      for_peers([&](int q) { recv_partials(q, step); });
      lane.tickets.push_back(post(layout, p.me, {}, lane.recvs, d));
    }
    for_peers([&](int q) {
      for (std::uint64_t step = 0; step < steps; ++step) recv_result(q, step);
    });
    post(layout, p.me, {}, lane.recvs, d);
    check_frames(p, layout, lane, framed, deadline);
    for_peers([&](int q) {
      for (std::uint64_t step = 0; step < steps; ++step) send_partials(q, step);
    });
    Transport::Ticket last = post(layout, p.me, lane.sends, {}, d);
    for (std::uint64_t step = 0; step < steps; ++step) {
      wait(layout, p.me, lane.tickets[step], deadline, d);
      combine_step(step);
      for_peers([&](int q) { send_result(q, step); });
      last = post(layout, p.me, lane.sends, {}, d);
    }
    wait(layout, p.me, last, deadline, d);
  } else {
    // One exchange a step: everyone's partials of step s and the owners' results of step
    // s - 1; step s is combined in between, while its data is still in cache.
    check_frames(p, layout, lane, framed, deadline);
    for (std::uint64_t step = 0; step <= steps; ++step) {
      for_peers([&](int q) {
        if (step < steps) {
          send_partials(q, step);
          recv_partials(q, step);
        }
        if (step > 0) {
          send_result(q, step - 1);
          recv_result(q, step - 1);
        }
      });
      exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
      if (step < steps) combine_step(step);
    }
  }
  if (single) {
    // Local buffer 0 holds the whole slice now; the others lack the other parts.
    for (int q = 0; q < P; ++q) {
      if (q == rank) continue;
      const auto [a, b] = part(q);
      for (int l = 1; l < layout.local; ++l) {
        std::memcpy(element(p.of(l).call.buffers[seg], a - seg_base),
                    element(p.of(0).call.buffers[seg], a - seg_base),
                    element_bytes(buffers, a, b));
      }
    }
    return;
  }

  // (4) The slice's result into every local buffer.
  std::size_t offset = 0;
  for_each_piece(buffers, lo, hi, [&](std::size_t i, std::uint64_t at, std::uint64_t len,
                                      std::uint64_t) {
    const std::size_t bytes = len * dtype_size(buffers[i].dtype);
    for (int l = 0; l < layout.local; ++l) {
      std::memcpy(element(p.of(l).call.buffers[i], at), result + offset, bytes);
    }
    offset += bytes;
  });
}

// ---- all_gather: lane l carries replica (q, l)'s input between processes; thread l
// writes blocks {q·L + l} of every local output.
void all_gather_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                       Transport::Clock::time_point deadline) {
  const Descriptor& d = p.mine();
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
  const std::size_t block = d.call.input.bytes();
  auto* out = static_cast<std::byte*>(d.call.output.data);
  const auto block_of = [&](int q) {
    return static_cast<std::size_t>(q * layout.local + p.me) * block;
  };
  lane.sends.clear();
  lane.recvs.clear();
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

// ---- broadcast: thread l carries slice l of the root's buffers to the other processes.
void broadcast_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                      Transport::Clock::time_point deadline) {
  const Descriptor& d = p.mine();
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
  const int root_process = d.root / layout.local;
  const int root_local = d.root % layout.local;
  const std::span<const Buffer> buffers = d.call.buffers;
  const auto [lo, hi] = slice_of(d.count, p.me, layout.local);
  const bool have_root = root_process == layout.rank;
  const int source = have_root ? root_local : 0;  // where this process's copy lands first
  lane.sends.clear();
  lane.recvs.clear();
  for_each_piece(buffers, lo, hi, [&](std::size_t i, std::uint64_t at, std::uint64_t len,
                                      std::uint64_t) {
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
  for_each_piece(buffers, lo, hi, [&](std::size_t i, std::uint64_t at, std::uint64_t len,
                                      std::uint64_t) {
    const std::byte* src = element(p.of(source).call.buffers[i], at);
    for (int l = 0; l < layout.local; ++l) {
      if (l != source) {
        std::memcpy(element(p.of(l).call.buffers[i], at), src, len * dtype_size(buffers[i].dtype));
      }
    }
  });
}

// ---- reduce_scatter: thread l computes its process's partials of the blocks of local
// replica l of every process, sends block q·L + l's partials to process q, and combines
// the partials of its own block from all processes in id order.
void reduce_scatter_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                           Transport::Clock::time_point deadline) {
  const Descriptor& d = p.mine();
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
  const Buffer& out = d.call.output;
  const int P = layout.processes;
  const int first_local = layout.rank * layout.local;
  const std::vector<Subtree>& mine = layout.subtrees[static_cast<std::size_t>(layout.rank)];
  const std::size_t row = out.count * partial_size(out.dtype, d.op);
  std::size_t recv_rows = 0;
  for (int q = 0; q < P; ++q) {
    if (q != layout.rank) recv_rows += layout.subtrees[static_cast<std::size_t>(q)].size();
  }
  std::byte* rows = lane.reserve((static_cast<std::size_t>(P) * mine.size() + recv_rows) * row);
  std::byte* received = rows + static_cast<std::size_t>(P) * mine.size() * row;
  const std::size_t block = out.bytes();
  for (int q = 0; q < P; ++q) {
    const std::size_t at = static_cast<std::size_t>(q * layout.local + p.me) * block;
    for (std::size_t t = 0; t < mine.size(); ++t) {
      lane.inputs.clear();
      for (int r = mine[t].first; r < mine[t].first + mine[t].size; ++r) {
        lane.inputs.push_back(p.input_of(r - first_local) + at);
      }
      void* dst = rows + (static_cast<std::size_t>(q) * mine.size() + t) * row;
      tree_reduce({.op = d.op, .dtype = out.dtype, .inputs = lane.inputs.data(),
                   .n = mine[t].size, .outputs = &dst, .num_outputs = 1,
                   .outputs_partial = true, .count = out.count},
                  *p.scratch);
    }
  }
  lane.sends.clear();
  lane.recvs.clear();
  std::byte* cursor = received;
  for (int q = 0; q < P; ++q) {
    if (q == layout.rank) continue;
    for (std::size_t t = 0; t < mine.size(); ++t) {
      lane.sends.push_back({q, rows + (static_cast<std::size_t>(q) * mine.size() + t) * row, row});
    }
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      lane.recvs.push_back({q, cursor, row});
      cursor += row;
    }
  }
  exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
  lane.inputs.clear();
  lane.sizes.clear();
  cursor = received;
  for (int q = 0; q < P; ++q) {
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      if (q == layout.rank) {
        lane.inputs.push_back(rows + (static_cast<std::size_t>(q) * mine.size() + t) * row);
      } else {
        lane.inputs.push_back(cursor);
        cursor += row;
      }
      lane.sizes.push_back(layout.subtrees[static_cast<std::size_t>(q)][t].size);
    }
  }
  void* dst = out.data;
  tree_reduce({.op = d.op, .dtype = out.dtype, .inputs = lane.inputs.data(),
               .n = static_cast<int>(lane.inputs.size()), .sizes = lane.sizes.data(),
               .inputs_partial = true, .outputs = &dst, .num_outputs = 1, .count = out.count,
               .divisor = static_cast<std::size_t>(layout.replicas())},
              *p.scratch);
}

// ---- all_to_all: lane l carries, from each process q, block (p·L + l) of each of q's
// local inputs to replica (p, l).
void all_to_all_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                       Transport::Clock::time_point deadline) {
  const Descriptor& d = p.mine();
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
  const std::size_t block = d.call.output.bytes() / static_cast<std::size_t>(layout.replicas());
  auto* out = static_cast<std::byte*>(d.call.output.data);
  const int L = layout.local;
  lane.sends.clear();
  lane.recvs.clear();
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    for (int l = 0; l < L; ++l) {
      lane.sends.push_back({q, p.input_of(l) + static_cast<std::size_t>(q * L + p.me) * block, block});
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

// ---- permute: the pair (s, d) travels on lane d % L, sent by that lane's thread in s's
// process (reading s's input from shared memory).
void permute_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                    Transport::Clock::time_point deadline) {
  const Descriptor& d = p.mine();
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
  const int L = layout.local;
  const int me = layout.rank * L + p.me;
  const Buffer& out = d.call.output;
  lane.sends.clear();
  lane.recvs.clear();
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

}  // namespace

std::vector<Subtree> canonical_subtrees(int begin, int end) {
  // The canonical tree's nodes are the aligned power-of-two blocks inside [0, total):
  // greedily take the largest aligned block that starts at `begin` and fits.
  std::vector<Subtree> out;
  while (begin < end) {
    int size = begin == 0 ? static_cast<int>(std::bit_floor(static_cast<unsigned>(end)))
                          : (begin & -begin);
    while (begin + size > end) size /= 2;
    out.push_back({begin, size});
    begin += size;
  }
  return out;
}

std::byte* LaneScratch::reserve(std::size_t bytes) {
  if (arena.size() < bytes) arena.resize(bytes);
  return arena.data();
}

void cross_process(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                   Transport::Clock::time_point deadline) {
  lane.frames.resize(static_cast<std::size_t>(layout.processes) * kFrameBytes);
  if (!lane.frames_ahead && layout.transport->receives_ahead()) {
    post_frame_receives(layout, p.me, lane, p.mine());
  }
  try {
    switch (p.mine().kind) {
      case OpKind::kAllReduce: all_reduce_across(p, layout, lane, deadline); break;
      case OpKind::kAllGather: all_gather_across(p, layout, lane, deadline); break;
      case OpKind::kBroadcast: broadcast_across(p, layout, lane, deadline); break;
      case OpKind::kReduceScatter: reduce_scatter_across(p, layout, lane, deadline); break;
      case OpKind::kAllToAll: all_to_all_across(p, layout, lane, deadline); break;
      case OpKind::kPermute: permute_across(p, layout, lane, deadline); break;
      case OpKind::kBarrier:
      case OpKind::kEndStep: exchange_frames(p, layout, lane, deadline, nullptr, 0); break;
    }
  } catch (const CollectiveMismatch&) {
    // Every process read the same frames and sent no data: all post the next frames alike.
    next_frames(p, layout, lane);
    throw;
  }
  next_frames(p, layout, lane);
}

}  // namespace replicator::detail
