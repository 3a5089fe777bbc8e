// Collectives across processes: the part each local replica thread runs, on its own lane
// of the transport, after the local entry barrier and before the local exit barrier.
//
// Every collective starts with one frame exchange on every lane between every pair of
// processes (frames.h): a fixed-size frame holding the caller's descriptor (so a mismatch
// across processes is raised as CollectiveMismatch on every replica, never read as data)
// and, for small all-reduces, the data itself (one round trip in all). The data phases
// are written against the Transport's post/wait only, so they run unchanged over MPI,
// Gloo and the tests' in-memory transport. One file per algorithm in this folder.
//
// Layout: replica g lives in process g / L as local replica g % L. Local thread l drives
// lane l and owns slice l of every buffer (64-element aligned), so the L threads of a
// process and all their connections work at once.
//
// Determinism: process p first reduces its replicas' values over the canonical subtrees
// (aligned power-of-two blocks of replica ids) that lie inside its id range, into
// accumulators; the owner of each piece then combines all processes' subtree partials in
// id order with the same binary-counter tree. The result has the same bits as the local
// engine's for the same R, whatever P x L.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/collectives/peers.h"
#include "src/collectives/plan.h"
#include "src/engines/device/device_comm.h"
#include "src/engines/native.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// A canonical subtree: replicas [first, first + size), size a power of two.
struct Subtree {
  int first;
  int size;
};

// The canonical subtrees that cover replicas [begin, end) (of any tree over at least
// `end` replicas): aligned power-of-two blocks, largest first.
std::vector<Subtree> canonical_subtrees(int begin, int end);

// Shared by the local threads of one process.
struct ProcessLayout {
  Transport* transport = nullptr;
  TransportTraits traits;                      // transport->traits(), read once
  NativeCollectives* native = nullptr;         // the engine's own collectives, if any
  bool oversubscribed = false;                 // more replica threads on the host than cores
  int rank = 0;                                // this process
  int processes = 1;                           // P
  int local = 1;                               // L
  std::vector<std::vector<Subtree>> subtrees;  // per process
  int max_subtrees = 1;
  TransportCosts costs;               // measured at start (zero: not measured)
  std::size_t cache_share_bytes = 0;  // this thread's share of the last-level cache (0: unknown)
  // By MemoryKind: what moves device memory of that kind between the processes without the
  // host (null: device buffers go through host memory). IPC where every process runs on this
  // host; none otherwise.
  std::array<std::shared_ptr<DeviceComm>, 3> device_comms;

  int replicas() const { return processes * local; }
  DeviceComm* device_comm(MemoryKind kind) const {
    return device_comms[static_cast<std::size_t>(kind)].get();
  }
};

// Per local thread: memory reused by every collective (grown, never shrunk).
struct LaneScratch {
  std::vector<std::byte> arena;
  std::vector<std::byte> frames;  // one frame per process (this one's at its rank)
  bool frames_ahead = false;      // the receives of the next frames are posted
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<int> sizes;
  std::vector<std::byte*> rows;            // this process's partial rows, by subtree
  std::vector<Transport::Ticket> tickets;  // of the receives of each pipeline step

  std::byte* reserve(std::size_t bytes);  // arena of at least `bytes`
};

class DeviceLane;
enum class OpKind : std::uint8_t;  // table.h

// Replica `local_me`'s part of collective `peers` across processes on lane `local_me`:
// frames, the table's algorithm (or, given `device`, the one in the device below), the next
// frames. Throws CollectiveMismatch, Timeout (naming replicas), PeerLost, Aborted.
void cross_process(const Peers& peers, const ProcessLayout& layout, LaneScratch& lane,
                   Transport::Clock::time_point deadline, DeviceLane* device = nullptr);

// Whether collective `op` on `kind` memory runs in the device across the processes of `layout`
// (in_device_across): it is an all_reduce, reduce_scatter, all_gather or broadcast, the kind
// has a DeviceComm, the kernel takes every replica's input, and the local replicas' devices
// reach each other. The same answer in every process.
bool runs_in_device_across(const ProcessLayout& layout, MemoryKind kind, OpKind op);

// What the chooser is asked for one lane's slice of an all-reduce across processes.
struct LaneShape {
  DType dtype = DType::kF32;  // of the first buffer
  ReduceOp op = ReduceOp::kSum;
  std::size_t row_bytes = 0;           // one subtree's partials of the slice
  std::size_t largest_part_bytes = 0;  // partials of the largest owner part (slice / P)
  bool one_dtype = true;               // every buffer of the call has `dtype`
};
// The plan all_reduce_across runs for that slice in `layout` (the engine's own all-reduce
// only where it gives the canonical tree's bits: see plan.h). Pure; never throws.
AllReducePlan plan_all_reduce(const ProcessLayout& layout, const LaneShape& lane);

// The layout of a job of `transport`'s processes with `local` replicas each (subtrees of the
// canonical tree, the transport's traits and collectives of its own); `oversubscribed`: more
// replica threads on this host than cores.
ProcessLayout make_process_layout(Transport& transport, int local, bool oversubscribed);

// The algorithms across processes (one file each): replica p.me's part on its lane;
// `deadline` bounds every wait.
using Deadline = Transport::Clock::time_point;
using AcrossAlgorithm = void(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                             Deadline deadline);
AcrossAlgorithm all_reduce_across, all_gather_across, broadcast_across, reduce_scatter_across,
    all_to_all_across, permute_across, gather_across;
// Barrier and the end of a step: the frames alone.
AcrossAlgorithm frames_only_across;
// A collective of device buffers (runs_in_device_across), in the device (in_device.cc): the
// bytes move through the lane's DeviceComm. The all_reduce: replica g of R owns slice g of the
// buffers; each lane receives its slice of every other process's replicas, reduces all R in the
// canonical tree with the device kernel (the host's bits) into its process's buffers, and sends
// the result to the other processes; reduce_scatter is its first half; all_gather and
// broadcast move what their host algorithms move.
void in_device_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                      DeviceLane& device, Deadline deadline);

// ---- what the algorithms share ----------------------------------------------------------

// "replica 3" or "replicas 2-3": the replicas of `process`.
std::string replicas_of(const ProcessLayout& layout, int process);

// The transport's calls for collective `d`; its errors renamed in terms of replicas.
void exchange(const ProcessLayout& layout, int lane, std::span<const SendOp> sends,
              std::span<const RecvOp> recvs, Deadline deadline, const Descriptor& d);
Transport::Ticket post(const ProcessLayout& layout, int lane, std::span<const SendOp> sends,
                       std::span<const RecvOp> recvs, const Descriptor& d);
void wait(const ProcessLayout& layout, int lane, Transport::Ticket ticket, Deadline deadline,
          const Descriptor& d);

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
std::size_t partial_bytes(std::span<const Buffer> buffers, std::uint64_t begin, std::uint64_t end,
                          ReduceOp op);
std::size_t element_bytes(std::span<const Buffer> buffers, std::uint64_t begin, std::uint64_t end);
inline std::byte* element(const Buffer& b, std::uint64_t offset) {
  return static_cast<std::byte*>(b.data) + offset * dtype_size(b.dtype);
}

}  // namespace replicator::detail
