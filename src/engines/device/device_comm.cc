#include "src/engines/device/device_comm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

// What a sender tells a receiver in each exchange: where its bytes for it are.
struct Ready {
  IpcHandle memory;  // the sender's staging buffer
  IpcHandle event;   // the event it recorded after filling it
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

constexpr std::size_t kAlign = 256;
constexpr std::size_t kMinHalf = 4096;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Whether the sends to peers `a` and `b` are the same ops (data and size) in the same order.
bool same_sends(std::span<const DeviceSendOp> sends, int a, int b) {
  std::size_t i = 0;
  std::size_t j = 0;
  for (;;) {
    while (i < sends.size() && sends[i].peer != a) ++i;
    while (j < sends.size() && sends[j].peer != b) ++j;
    if (i == sends.size() || j == sends.size()) return i == sends.size() && j == sends.size();
    if (sends[i].data != sends[j].data || sends[i].bytes != sends[j].bytes) return false;
    ++i;
    ++j;
  }
}

class IpcComm final : public DeviceComm {
 public:
  IpcComm(MemoryKind kind, int rank, int processes, int lanes)
      : kind_(kind), rank_(rank), processes_(processes), lanes_(static_cast<std::size_t>(lanes)) {
    for (Lane& s : lanes_) s.resize(processes);
  }
  ~IpcComm() override {
    for (Lane& s : lanes_) forget(s);
  }
  IpcComm(const IpcComm&) = delete;
  IpcComm& operator=(const IpcComm&) = delete;

  std::string_view name() const override { return "ipc"; }

  void exchange(int lane, Device device, DeviceStream& stream, std::span<const DeviceSendOp> sends,
                std::span<const DeviceRecvOp> recvs, const HostExchange& host,
                Transport::Clock::time_point /*deadline*/) override {
    if (aborted_.load()) {
      throw Aborted("the device transport between processes was aborted", std::nullopt);
    }
    Lane& s = lanes_.at(static_cast<std::size_t>(lane));
    if (s.event && s.device != device) forget(s);  // the lane's replica moved to another device
    s.device = device;
    DeviceBackend& backend = device_backend(kind_);
    close_stale(s);

    // The sends, by peer, into this exchange's half of the staging buffer.
    std::vector<std::size_t>& block = s.block;
    std::fill(block.begin(), block.end(), 0);
    std::vector<bool> to(static_cast<std::size_t>(processes_), false);
    for (const DeviceSendOp& op : sends) {
      check_peer(op.peer);
      block[static_cast<std::size_t>(op.peer)] += op.bytes;
      to[static_cast<std::size_t>(op.peer)] = true;
    }
    // A peer that is sent exactly what an earlier one is sent (a broadcast, an all-gather, the
    // all-reduce's results) reads that one's block: the bytes are copied once.
    std::vector<int>& same_as = s.same_as;
    std::size_t total = 0;
    for (int q = 0; q < processes_; ++q) {
      const auto i = static_cast<std::size_t>(q);
      same_as[i] = q;
      for (int e = 0; e < q && same_as[i] == q; ++e) {
        const auto k = static_cast<std::size_t>(e);
        if (to[i] && to[k] && same_as[k] == e && same_sends(sends, e, q)) same_as[i] = e;
      }
      if (same_as[i] == q) total += aligned(block[i]);
    }
    if (s.staging == nullptr || total > s.half) grow(s, total);
    std::size_t at = (s.exchanges++ & 1) * s.half;
    for (int q = 0; q < processes_; ++q) {
      const auto i = static_cast<std::size_t>(q);
      Ready& r = s.out[i];
      r.memory = s.staging_handle;
      r.bytes = block[i];
      if (same_as[i] != q) {
        r.offset = s.out[static_cast<std::size_t>(same_as[i])].offset;
      } else {
        r.offset = at;
        at += aligned(r.bytes);
      }
    }
    std::vector<std::size_t>& filled = s.filled;
    std::fill(filled.begin(), filled.end(), 0);
    for (const DeviceSendOp& op : sends) {
      const auto q = static_cast<std::size_t>(op.peer);
      if (same_as[q] != op.peer) continue;
      stream.copy(static_cast<std::byte*>(s.staging) + s.out[q].offset + filled[q], op.data,
                  op.bytes);
      filled[q] += op.bytes;
    }
    if (!s.event) s.event = backend.make_shared_event(device.index, s.event_handle);
    stream.record(*s.event);

    // The handshake: each receiver learns where its bytes are, once they are enqueued.
    std::vector<bool> from(static_cast<std::size_t>(processes_), false);
    for (const DeviceRecvOp& op : recvs) {
      check_peer(op.peer);
      from[static_cast<std::size_t>(op.peer)] = true;
    }
    s.host_sends.clear();
    s.host_recvs.clear();
    for (int q = 0; q < processes_; ++q) {
      const auto i = static_cast<std::size_t>(q);
      s.out[i].event = s.event_handle;
      if (to[i]) s.host_sends.push_back({q, &s.out[i], sizeof(Ready)});
      if (from[i]) s.host_recvs.push_back({q, &s.in[i], sizeof(Ready)});
    }
    host(s.host_sends, s.host_recvs);

    // Each sender's bytes, after its event.
    std::fill(filled.begin(), filled.end(), 0);
    for (const DeviceRecvOp& op : recvs) filled[static_cast<std::size_t>(op.peer)] += op.bytes;
    for (int q = 0; q < processes_; ++q) {
      const auto i = static_cast<std::size_t>(q);
      if (from[i] && s.in[i].bytes != filled[i]) {
        throw InvalidArgument("device exchange: process " + std::to_string(q) + " sends " +
                              std::to_string(s.in[i].bytes) + " bytes where process " +
                              std::to_string(rank_) + " receives " + std::to_string(filled[i]));
      }
      if (from[i]) stream.wait(opened_event(s, i));
    }
    std::fill(filled.begin(), filled.end(), 0);
    for (const DeviceRecvOp& op : recvs) {
      const auto q = static_cast<std::size_t>(op.peer);
      const auto* staging = static_cast<const std::byte*>(opened_memory(s, q));
      stream.copy(op.data, staging + s.in[q].offset + filled[q], op.bytes);
      filled[q] += op.bytes;
    }
  }

  void abort() noexcept override {
    aborted_.store(true);
    try {
      device_backend(kind_).cancel_event_waits();
    } catch (...) {  // a kind without a backend in this build has no waits to end
    }
  }

 private:
  // One lane's staging buffer, event and what it opened of its peers'.
  struct Lane {
    Device device;
    void* staging = nullptr;
    std::size_t half = 0;  // bytes of each half
    IpcHandle staging_handle;
    std::vector<void*> retired;  // staging buffers peers may still have open
    std::unique_ptr<DeviceEvent> event;
    IpcHandle event_handle;
    std::uint64_t exchanges = 0;
    std::vector<IpcHandle> memory_handles;  // by peer: what `memory` was opened from
    std::vector<void*> memory;
    std::vector<IpcHandle> event_handles;
    std::vector<std::unique_ptr<DeviceEvent>> events;
    // Replaced peers' buffers and events, with the exchange count when they were replaced.
    std::vector<std::pair<std::uint64_t, void*>> stale_memory;
    std::vector<std::pair<std::uint64_t, std::unique_ptr<DeviceEvent>>> stale_events;
    std::vector<Ready> out, in;
    std::vector<std::size_t> block, filled;
    std::vector<int> same_as;  // by peer: the peer whose block it reads (itself: its own)
    std::vector<SendOp> host_sends;
    std::vector<RecvOp> host_recvs;

    void resize(int processes) {
      const auto n = static_cast<std::size_t>(processes);
      memory_handles.assign(n, {});
      memory.assign(n, nullptr);
      event_handles.assign(n, {});
      events.resize(n);
      out.assign(n, {});
      in.assign(n, {});
      block.assign(n, 0);
      filled.assign(n, 0);
      same_as.assign(n, 0);
    }
  };

  void check_peer(int peer) const {
    if (peer < 0 || peer >= processes_ || peer == rank_) {
      throw InvalidArgument("device exchange: no peer process " + std::to_string(peer) +
                            " (this is process " + std::to_string(rank_) + " of " +
                            std::to_string(processes_) + ")");
    }
  }

  // A staging buffer of two halves of at least `total` bytes each, grown by half again; the
  // old one stays allocated (a peer may still have it open) until the comm goes.
  void grow(Lane& s, std::size_t total) {
    const std::size_t half = std::max({aligned(total), kMinHalf, s.half + s.half / 2});
    IpcHandle handle;
    void* staging = device_backend(kind_).allocate_shared(s.device.index, 2 * half, handle);
    if (s.staging != nullptr) s.retired.push_back(s.staging);
    s.staging = staging;
    s.staging_handle = handle;
    s.half = half;
  }

  // A peer's staging buffer, opened once; one it replaced stays open until the stream's copies
  // out of it have surely run (close_stale).
  void* opened_memory(Lane& s, std::size_t peer) {
    const IpcHandle& handle = s.in[peer].memory;
    if (s.memory[peer] != nullptr && s.memory_handles[peer] == handle) return s.memory[peer];
    if (s.memory[peer] != nullptr) s.stale_memory.push_back({s.exchanges, s.memory[peer]});
    s.memory[peer] = nullptr;
    s.memory[peer] = device_backend(kind_).open_shared(s.device.index, handle);
    s.memory_handles[peer] = handle;
    return s.memory[peer];
  }

  DeviceEvent& opened_event(Lane& s, std::size_t peer) {
    const IpcHandle& handle = s.in[peer].event;
    if (!s.events[peer] || !(s.event_handles[peer] == handle)) {
      if (s.events[peer]) s.stale_events.push_back({s.exchanges, std::move(s.events[peer])});
      s.events[peer] = device_backend(kind_).open_event(s.device.index, handle);
      s.event_handles[peer] = handle;
    }
    return *s.events[peer];
  }

  // What was replaced two exchanges ago or earlier: the stream has run its copies and waits
  // (the promise exchange() asks of its caller).
  void close_stale(Lane& s) {
    DeviceBackend& backend = device_backend(kind_);
    std::erase_if(s.stale_memory, [&](const auto& stale) {
      if (stale.first + 2 > s.exchanges) return false;
      backend.close_shared(s.device.index, stale.second);
      return true;
    });
    std::erase_if(s.stale_events,
                  [&](const auto& stale) { return stale.first + 2 <= s.exchanges; });
  }

  // Closes what the lane opened and releases what it made.
  void forget(Lane& s) noexcept {
    if (s.staging == nullptr && !s.event) return;
    DeviceBackend& backend = device_backend(kind_);
    for (void*& p : s.memory) {
      if (p != nullptr) backend.close_shared(s.device.index, p);
      p = nullptr;
    }
    for (const auto& [at, p] : s.stale_memory) backend.close_shared(s.device.index, p);
    s.stale_memory.clear();
    s.stale_events.clear();
    for (auto& e : s.events) e.reset();
    s.event.reset();
    s.retired.push_back(s.staging);
    for (void* p : s.retired) {
      if (p != nullptr) backend.release_shared(s.device.index, p);
    }
    s.retired.clear();
    s.staging = nullptr;
    s.half = 0;
    s.resize(processes_);
  }

  MemoryKind kind_;
  int rank_;
  int processes_;
  std::vector<Lane> lanes_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<DeviceComm> make_ipc_comm(MemoryKind kind, int rank, int processes, int lanes) {
  return std::make_unique<IpcComm>(kind, rank, processes, lanes);
}

#if !defined(REPLICATOR_HAVE_NCCL)
std::unique_ptr<DeviceComm> make_nccl_comm(int, int, int) { return nullptr; }
#endif

}  // namespace replicator::detail
