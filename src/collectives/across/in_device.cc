// Collectives of device buffers across processes, in the device (across.h): the bytes move
// through the lane's DeviceComm, the copies and reductions run on the replica's stream.
//
// all_reduce: replica g of R (process g / L, lane g % L) owns slice g of the buffers'
// concatenation. Lane l of each process
// moves only the slices of the lane-l replicas, through the DeviceComm of its lane:
//   1. it sends every other process q slice q*L + l of each of its process's L buffers, and
//      receives slice g of each of q's L buffers into rows of device scratch;
//   2. the device kernel reduces slice g over all R replicas in id order (the canonical tree:
//      the same bits as the host path and the local engine for R replicas, whatever P x L),
//      straight from the local buffers and the rows, into every local buffer;
//   3. it sends the reduced slice to every other process, receives theirs (slices q*L + l) into
//      its own buffer, and copies them into the process's other buffers.
// Lanes touch disjoint slices, so the L lanes of a process run at once. Two processes of one
// replica each summing one dtype take the comm's own all-reduce where it has one (NCCL's), whose
// x0 + x1 is the canonical tree's.
//
// reduce_scatter is its steps 1 and 2 on blocks of the input (block g is replica g's output);
// all_gather and broadcast move what the host algorithms of the same names move, lane by lane
// (all_gather.cc, broadcast.cc in this folder), with device copies for memcpy.
//
// Every wait on the host
// (the comm's handshakes) is bounded by the collective's deadline; so is the wait for the
// stream, after which the comm is aborted.
#include <algorithm>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "src/collectives/across/across.h"
#include "src/collectives/device_path.h"
#include "src/collectives/frames.h"
#include "src/collectives/table.h"
#include "src/comm/site_files.h"

namespace replicator::detail {
namespace {

constexpr std::size_t kAlign = 256;  // of every piece in a row: any dtype's alignment
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// A buffer's part of a slice, and where it lies in a row that holds the slice.
struct Piece {
  std::size_t buffer;
  std::uint64_t first;
  std::uint64_t count;
  std::size_t offset;
  std::size_t bytes;
};

std::vector<Piece> pieces_of(std::span<const Buffer> buffers, std::uint64_t lo, std::uint64_t hi,
                             std::size_t& row_bytes) {
  std::vector<Piece> pieces;
  row_bytes = 0;
  for_each_part(buffers, lo, hi, [&](std::size_t i, std::uint64_t first, std::uint64_t count) {
    const std::size_t bytes = count * dtype_size(buffers[i].dtype);
    pieces.push_back({i, first, count, row_bytes, bytes});
    row_bytes += aligned(bytes);
  });
  return pieces;
}

// The row of device scratch that receives replica h's part (h of another process than this).
std::byte* row_of(std::byte* rows, std::size_t row_bytes, const ProcessLayout& layout, int h) {
  const int first_local = layout.rank * layout.local;
  const int index = h < first_local ? h : h - layout.local;
  return rows + static_cast<std::size_t>(index) * row_bytes;
}

// Timeout naming every other process's replicas (which of them stalled the device's copies is
// not known here); `stopped`: the device let go of the copies.
[[noreturn]] void device_timeout(const ProcessLayout& layout, const Descriptor& d, bool stopped) {
  std::vector<int> missing;
  std::string names;
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    for (int l = 0; l < layout.local; ++l) missing.push_back(q * layout.local + l);
    names += (names.empty() ? "" : ", ") + std::string("process ") + std::to_string(q) + " (" +
             replicas_of(layout, q) + ")";
  }
  throw Timeout(std::string(d.name()) + " #" + std::to_string(d.sequence) + " (" + d.describe() +
                    ")" + site_suffix(d.call.where) + " timed out after " +
                    std::to_string(d.timeout.count()) + " ms waiting for the device copies from " +
                    names +
                    (stopped ? "" : "; the device is still waiting for them, so end this process") +
                    ". Check that every replica issues the same collectives, or raise the timeout.",
                std::string(d.name()), d.sequence, d.timeout, std::move(missing));
}

// Ends the comm's waits and gives the stream a second to let go of the replicas' buffers;
// whether it did.
bool drain(DeviceStream& stream, DeviceComm& comm) {
  comm.abort();
  try {
    return stream.synchronize_until(Transport::Clock::now() + std::chrono::seconds(1));
  } catch (const Error&) {  // the ended waits fail the stream's work
    return true;
  }
}

// Steps 1 to 3 of the all-reduce, enqueued on `stream`; returns before the stream has run them.
void enqueue_all_reduce(const Peers& p, const ProcessLayout& layout, DeviceLane& device,
                        DeviceStream& stream, DeviceComm& comm, const HostExchange& host,
                        Deadline deadline) {
  const Descriptor& d = p.mine();
  const int L = layout.local;
  const int R = layout.replicas();
  const int rank = layout.rank;
  const int l = p.me;
  const auto buffers_of = [&](int j) { return std::span<const Buffer>(p.of(j).call.buffers); };
  const std::span<const Buffer> mine = buffers_of(l);
  const Device on = first_device(d.call);
  // Two processes of one replica each: the library's own sum, where it has one (its x0 + x1 is
  // the canonical tree's), over buffers of one dtype.
  if (layout.processes == 2 && L == 1 && d.op == ReduceOp::kSum &&
      std::all_of(mine.begin(), mine.end(),
                  [&](const Buffer& b) { return b.dtype == mine.front().dtype; })) {
    bool native = true;
    for (const Buffer& b : mine) {
      if (b.count == 0) continue;
      native = comm.native_sum(l, on, stream, b.data, b.count, b.dtype, host, deadline);
      if (!native) break;  // the same answer for every buffer: one dtype; nothing enqueued
    }
    if (native) return;
  }
  const auto slice = [&](int owner) { return slice_of(d.count, owner, R); };
  // Calls fn(buffer, first, count, bytes) for each piece of slice `owner` of `buffers`.
  const auto each_piece = [](std::span<const Buffer> buffers,
                             std::pair<std::uint64_t, std::uint64_t> s, auto&& fn) {
    for_each_part(buffers, s.first, s.second,
                  [&](std::size_t i, std::uint64_t first, std::uint64_t count) {
                    fn(buffers[i], first, count * dtype_size(buffers[i].dtype));
                  });
  };

  // 1. Slice g of every other process's buffers, into a row each.
  std::size_t row_bytes = 0;
  const std::vector<Piece> own =
      pieces_of(mine, slice(rank * L + l).first, slice(rank * L + l).second, row_bytes);
  std::byte* rows = device.scratch(on, row_bytes * static_cast<std::size_t>(R - L));
  const auto row = [&](int h) { return row_of(rows, row_bytes, layout, h); };
  std::vector<DeviceSendOp> sends;
  std::vector<DeviceRecvOp> recvs;
  for (int q = 0; q < layout.processes; ++q) {
    if (q == rank) continue;
    for (int j = 0; j < L; ++j) {
      each_piece(buffers_of(j), slice(q * L + l),
                 [&](const Buffer& b, std::uint64_t first, std::size_t bytes) {
                   sends.push_back({q, element(b, first), bytes});
                 });
      for (const Piece& piece : own) {
        recvs.push_back({q, row(q * L + j) + piece.offset, piece.bytes});
      }
    }
  }
  comm.exchange(l, on, stream, sends, recvs, host, deadline);

  // 2. All R replicas' slice g, reduced into every local buffer.
  for (const Piece& piece : own) {
    DeviceReduce r{.op = d.op,
                   .dtype = mine[piece.buffer].dtype,
                   .n = R,
                   .num_outputs = L,
                   .count = piece.count,
                   .divisor = static_cast<std::size_t>(R)};
    for (int h = 0; h < R; ++h) {
      r.inputs[h] = h / L == rank ? element(buffers_of(h - rank * L)[piece.buffer], piece.first)
                                  : row(h) + piece.offset;
    }
    for (int j = 0; j < L; ++j) r.outputs[j] = element(buffers_of(j)[piece.buffer], piece.first);
    stream.reduce(r);
  }

  // 3. The reduced slices, everywhere.
  sends.clear();
  recvs.clear();
  for (int q = 0; q < layout.processes; ++q) {
    if (q == rank) continue;
    for (const Piece& piece : own) {
      sends.push_back({q, element(mine[piece.buffer], piece.first), piece.bytes});
    }
    each_piece(mine, slice(q * L + l),
               [&](const Buffer& b, std::uint64_t first, std::size_t bytes) {
                 recvs.push_back({q, element(b, first), bytes});
               });
  }
  comm.exchange(l, on, stream, sends, recvs, host, deadline);
  for (int q = 0; q < layout.processes; ++q) {
    if (q == rank) continue;
    for (int j = 0; j < L; ++j) {
      if (j == l) continue;
      const std::span<const Buffer> theirs = buffers_of(j);
      for_each_part(mine, slice(q * L + l).first, slice(q * L + l).second,
                    [&](std::size_t k, std::uint64_t first, std::uint64_t count) {
                      stream.copy(element(theirs[k], first), element(mine[k], first),
                                  count * dtype_size(mine[k].dtype));
                    });
    }
  }
}

// reduce_scatter: block g of every replica's input, reduced over all R in id order into
// replica g's output.
void enqueue_reduce_scatter(const Peers& p, const ProcessLayout& layout, DeviceLane& device,
                            DeviceStream& stream, DeviceComm& comm, const HostExchange& host,
                            Deadline deadline) {
  const Descriptor& d = p.mine();
  const int L = layout.local;
  const int R = layout.replicas();
  const int rank = layout.rank;
  const int l = p.me;
  const Buffer& out = d.call.output;
  const std::size_t block = out.bytes();
  const Device on = first_device(d.call);
  const auto input_block = [&](int j, int owner) {
    return static_cast<std::byte*>(p.of(j).call.input.data) +
           static_cast<std::size_t>(owner) * block;
  };
  const std::size_t row_bytes = aligned(block);
  std::byte* rows = device.scratch(on, row_bytes * static_cast<std::size_t>(R - L));
  std::vector<DeviceSendOp> sends;
  std::vector<DeviceRecvOp> recvs;
  for (int q = 0; q < layout.processes; ++q) {
    if (q == rank) continue;
    for (int j = 0; j < L; ++j) {
      sends.push_back({q, input_block(j, q * L + l), block});
      recvs.push_back({q, row_of(rows, row_bytes, layout, q * L + j), block});
    }
  }
  comm.exchange(l, on, stream, sends, recvs, host, deadline);
  DeviceReduce r{.op = d.op,
                 .dtype = out.dtype,
                 .n = R,
                 .num_outputs = 1,
                 .count = out.count,
                 .divisor = static_cast<std::size_t>(R)};
  for (int h = 0; h < R; ++h) {
    r.inputs[h] = h / L == rank ? input_block(h - rank * L, rank * L + l)
                                : row_of(rows, row_bytes, layout, h);
  }
  r.outputs[0] = out.data;
  stream.reduce(r);
}

// all_gather: lane l carries replica (q, l)'s input between processes and writes blocks
// {q*L + l} of every local output.
void enqueue_all_gather(const Peers& p, const ProcessLayout& layout, DeviceStream& stream,
                        DeviceComm& comm, const HostExchange& host, Deadline deadline) {
  const Descriptor& d = p.mine();
  const std::size_t block = d.call.input.bytes();
  auto* out = static_cast<std::byte*>(d.call.output.data);
  const auto block_of = [&](int q) {
    return static_cast<std::size_t>(q * layout.local + p.me) * block;
  };
  std::vector<DeviceSendOp> sends;
  std::vector<DeviceRecvOp> recvs;
  for (int q = 0; q < layout.processes; ++q) {
    if (q == layout.rank) continue;
    sends.push_back({q, d.call.input.data, block});
    recvs.push_back({q, out + block_of(q), block});
  }
  comm.exchange(p.me, first_device(d.call), stream, sends, recvs, host, deadline);
  for (int q = 0; q < layout.processes; ++q) {
    const std::byte* src =
        q == layout.rank ? static_cast<const std::byte*>(d.call.input.data) : out + block_of(q);
    for (int l = 0; l < layout.local; ++l) {
      std::byte* dst = static_cast<std::byte*>(p.of(l).call.output.data) + block_of(q);
      if (dst != src) stream.copy(dst, src, block);
    }
  }
}

// broadcast: lane l carries slice l of the root's buffers from the root's process to every
// other, then copies it into the other local buffers.
void enqueue_broadcast(const Peers& p, const ProcessLayout& layout, DeviceStream& stream,
                       DeviceComm& comm, const HostExchange& host, Deadline deadline) {
  const Descriptor& d = p.mine();
  const int root_process = d.root / layout.local;
  const bool have_root = root_process == layout.rank;
  const int source = have_root ? d.root % layout.local : 0;  // where this process's copy lands
  const std::span<const Buffer> buffers = d.call.buffers;
  const auto [lo, hi] = slice_of(d.count, p.me, layout.local);
  std::vector<DeviceSendOp> sends;
  std::vector<DeviceRecvOp> recvs;
  for_each_piece(buffers, lo, hi,
                 [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                   const std::size_t bytes = len * dtype_size(buffers[i].dtype);
                   std::byte* data = element(p.of(source).call.buffers[i], at);
                   if (!have_root) {
                     recvs.push_back({root_process, data, bytes});
                     return;
                   }
                   for (int q = 0; q < layout.processes; ++q) {
                     if (q != layout.rank) sends.push_back({q, data, bytes});
                   }
                 });
  comm.exchange(p.me, first_device(d.call), stream, sends, recvs, host, deadline);
  for_each_piece(buffers, lo, hi,
                 [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                   const std::byte* src = element(p.of(source).call.buffers[i], at);
                   for (int l = 0; l < layout.local; ++l) {
                     if (l != source) {
                       stream.copy(element(p.of(l).call.buffers[i], at), src,
                                   len * dtype_size(buffers[i].dtype));
                     }
                   }
                 });
}

}  // namespace

bool runs_in_device_across(const ProcessLayout& layout, MemoryKind kind, OpKind op) {
  const bool algorithm = op == OpKind::kAllReduce || op == OpKind::kReduceScatter ||
                         op == OpKind::kAllGather || op == OpKind::kBroadcast;
  return algorithm && layout.device_comm(kind) != nullptr &&
         layout.replicas() <= elementwise::kMaxInputs && reduces_in_device(kind, layout.local);
}

void in_device_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                      DeviceLane& device, Deadline deadline) {
  const Descriptor& d = start_exchange(p, layout, lane, deadline);
  if (d.count == 0) return;
  DeviceStream& stream = device.stream(first_device(d.call));
  DeviceComm& comm = *layout.device_comm(d.memory);
  const HostExchange host = [&](std::span<const SendOp> s, std::span<const RecvOp> r) {
    exchange(layout, p.me, s, r, deadline, d);
  };
  try {
    switch (static_cast<OpKind>(d.kind)) {
      case OpKind::kAllReduce:
        enqueue_all_reduce(p, layout, device, stream, comm, host, deadline);
        break;
      case OpKind::kReduceScatter:
        enqueue_reduce_scatter(p, layout, device, stream, comm, host, deadline);
        break;
      case OpKind::kAllGather:
        enqueue_all_gather(p, layout, stream, comm, host, deadline);
        break;
      case OpKind::kBroadcast:
        enqueue_broadcast(p, layout, stream, comm, host, deadline);
        break;
      default:
        throw InvalidArgument(std::string(d.name()) + " does not run in the device");
    }
  } catch (const Timeout& e) {
    // The stream may still read and write the replicas' buffers, which their owners free once
    // the error reaches them: it drains first. A timeout of the comm's own (NCCL's setup or
    // group) is named as the collective's.
    const bool stopped = drain(stream, comm);
    if (!e.missing().empty()) throw;
    device_timeout(layout, d, stopped);
  } catch (...) {
    drain(stream, comm);
    throw;
  }
  if (!stream.synchronize_until(deadline)) device_timeout(layout, d, drain(stream, comm));
}

}  // namespace replicator::detail
