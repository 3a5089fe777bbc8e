#include "src/collectives/across/across.h"

#include <bit>
#include <string>

#include "replicator/errors.h"
#include "src/collectives/frames.h"
#include "src/collectives/table.h"
#include "src/comm/site_files.h"

namespace replicator::detail {
namespace {

// Runs a call of the transport for collective `d`. Transport errors name processes; the user
// thinks in replicas.
template <typename Fn>
auto on_transport(const ProcessLayout& layout, const Descriptor& d, Fn&& call) {
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
    // The transport counts from its own wait; the user set the collective's limit.
    const auto limit = d.timeout.count() > 0 ? d.timeout : e.deadline();
    throw Timeout(std::string(d.name()) + " #" + std::to_string(d.sequence) + " (" + d.describe() +
                      ")" + site_suffix(d.call.where) + " timed out after " +
                      std::to_string(limit.count()) + " ms waiting for " + names +
                      ". Check that every replica issues the same collectives, or raise the "
                      "timeout.",
                  std::string(d.name()), d.sequence, limit, std::move(missing));
  } catch (const PeerLost& e) {
    throw PeerLost("lost process " + std::to_string(e.peer()) + " (" +
                       replicas_of(layout, e.peer()) + ") during " + std::string(d.name()) + " #" +
                       std::to_string(d.sequence) + ": " + e.what(),
                   e.peer());
  }
}

}  // namespace

std::string replicas_of(const ProcessLayout& layout, int process) {
  const int first = process * layout.local;
  if (layout.local == 1) return "replica " + std::to_string(first);
  return "replicas " + std::to_string(first) + "-" + std::to_string(first + layout.local - 1);
}

void exchange(const ProcessLayout& layout, int lane, std::span<const SendOp> sends,
              std::span<const RecvOp> recvs, Deadline deadline, const Descriptor& d) {
  on_transport(layout, d, [&](Transport& t) { t.exchange(lane, sends, recvs, deadline); });
}

Transport::Ticket post(const ProcessLayout& layout, int lane, std::span<const SendOp> sends,
                       std::span<const RecvOp> recvs, const Descriptor& d) {
  return on_transport(layout, d, [&](Transport& t) { return t.post(lane, sends, recvs); });
}

void wait(const ProcessLayout& layout, int lane, Transport::Ticket ticket, Deadline deadline,
          const Descriptor& d) {
  on_transport(layout, d, [&](Transport& t) { t.wait(lane, ticket, deadline); });
}

// Bytes of [begin, end) as accumulators (op) or as elements.
std::size_t partial_bytes(std::span<const Buffer> buffers, std::uint64_t begin, std::uint64_t end,
                          ReduceOp op) {
  std::size_t bytes = 0;
  for_each_piece(buffers, begin, end,
                 [&](std::size_t i, std::uint64_t, std::uint64_t len, std::uint64_t) {
                   bytes += len * partial_size(buffers[i].dtype, op);
                 });
  return bytes;
}

std::size_t element_bytes(std::span<const Buffer> buffers, std::uint64_t begin, std::uint64_t end) {
  std::size_t bytes = 0;
  for_each_piece(buffers, begin, end,
                 [&](std::size_t i, std::uint64_t, std::uint64_t len, std::uint64_t) {
                   bytes += len * dtype_size(buffers[i].dtype);
                 });
  return bytes;
}

ProcessLayout make_process_layout(Transport& transport, int local, bool oversubscribed) {
  ProcessLayout layout;
  layout.transport = &transport;
  layout.rank = transport.rank();
  layout.processes = transport.size();
  layout.local = local;
  layout.traits = transport.traits();
  layout.native = dynamic_cast<NativeCollectives*>(&transport);
  layout.oversubscribed = oversubscribed;
  if (layout.traits.one_host) {
    for (const MemoryKind kind : {MemoryKind::kCuda, MemoryKind::kFake}) {
      if (kind == MemoryKind::kCuda && !built_with_cuda()) continue;
      layout.device_comms[static_cast<std::size_t>(kind)] =
          make_ipc_comm(kind, layout.rank, layout.processes, local);
    }
  }
  for (int q = 0; q < layout.processes; ++q) {
    layout.subtrees.push_back(canonical_subtrees(q * local, (q + 1) * local));
    layout.max_subtrees =
        std::max(layout.max_subtrees, static_cast<int>(layout.subtrees.back().size()));
  }
  return layout;
}

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
                   Deadline deadline, DeviceLane* device) {
  start_frames(p, layout, lane);
  try {
    if (device != nullptr) {
      in_device_across(p, layout, lane, *device, deadline);
    } else {
      definition(p.mine().kind).across(p, layout, lane, deadline);
    }
  } catch (const CollectiveMismatch&) {
    // Every process read the same frames and sent no data: all post the next frames alike.
    next_frames(p, layout, lane);
    throw;
  }
  next_frames(p, layout, lane);
}

void frames_only_across(const Peers& p, const ProcessLayout& layout, LaneScratch& lane,
                        Deadline deadline) {
  exchange_frames(p, layout, lane, deadline, nullptr, 0);
}

}  // namespace replicator::detail
