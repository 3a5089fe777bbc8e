// DeviceComm: device memory moved between the processes of a job without a trip through host
// memory, for the collectives that stay in the device across processes
// (src/collectives/across/in_device.cc).
//
// Two implementations: IPC between the processes of one host (CUDA IPC; POSIX shared memory
// behind the fake device), described here, and NCCL's point-to-point between the processes of
// several hosts (CUDA only; make_nccl_comm). Each lane of each process has a staging buffer in
// device memory that the other processes open, in two halves, and an event that they wait for. An
// exchange copies the lane's sends into one half, records the event, tells each receiving peer
// over the host transport where its bytes are (a handshake of one small message each way,
// which carries the handles, so a staging buffer that grew is opened anew), and enqueues, for
// each sending peer, a wait for its event and the copies out of its staging into the receives.
// Sends that are the same for several peers (a broadcast, an all-gather) are staged once. The
// data never leave the devices: two device copies per message, none through the host.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "replicator/device.h"
#include "replicator/dtype.h"
#include "src/engines/device/device_backend.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// A message between device memory of two processes: `peer` is a process rank; pointers are
// device addresses of the lane's device.
struct DeviceSendOp {
  int peer;
  const void* data;
  std::size_t bytes;
};
struct DeviceRecvOp {
  int peer;
  void* data;
  std::size_t bytes;
};

// The host messages of a handshake: the caller's exchange on the lane's host transport, with
// its deadline and its errors (Timeout, PeerLost, Aborted).
using HostExchange = std::function<void(std::span<const SendOp>, std::span<const RecvOp>)>;

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;

  // "ipc".
  virtual std::string_view name() const = 0;

  // Enqueues on `stream` (of `device`, the lane's) the moves of every send into the receive the
  // peer posts for it: the k-th send to a peer lands in the k-th receive that peer posts from
  // this process, and their sizes must be equal. Sends are read after the work enqueued on the
  // stream before the call; receives are written before the work enqueued after it. Blocks until
  // every peer it exchanges with has enqueued its side (the handshake through `host`), not until
  // the data have moved: stream.synchronize() says when. The staging half an exchange fills is
  // filled again two exchanges later on the lane, so the caller makes sure that every peer's
  // copies of an exchange have completed before the one two later starts (the collectives do:
  // each ends with its stream synchronised, and the next starts with a frame from every peer).
  // One thread per lane at a time. `deadline` bounds what the comm waits for itself (NCCL's
  // setup and group calls). Throws what `host` throws, Timeout (past `deadline`: `missing` is
  // empty, the caller names the peers), Aborted (after abort()), InvalidArgument (a peer's
  // sizes differ from the receives), Error (the device or its library failed).
  virtual void exchange(int lane, Device device, DeviceStream& stream,
                        std::span<const DeviceSendOp> sends, std::span<const DeviceRecvOp> recvs,
                        const HostExchange& host, Transport::Clock::time_point deadline) = 0;

  // The library's own all-reduce, summing `count` elements of `dtype` at `data` in place over
  // the processes (NCCL: ncclAllReduce), enqueued on `stream`. Only where it gives the
  // canonical tree's bits: two processes of one replica each, whose sum x0 + x1 rounds the
  // same in either order, over a dtype the library adds in that dtype (f32, f64, i32, i64).
  // Returns false, doing nothing, where the comm has none or takes no such dtype (the same
  // answer in every process). Otherwise as exchange().
  virtual bool native_sum(int /*lane*/, Device /*device*/, DeviceStream& /*stream*/, void* /*data*/,
                          std::size_t /*count*/, DType /*dtype*/, const HostExchange& /*host*/,
                          Transport::Clock::time_point /*deadline*/) {
    return false;
  }

  // Gives up on the other processes: later exchanges throw Aborted, and streams waiting for a
  // peer's event are released where the device can do it (the fake device; not CUDA, whose
  // wait ends only once the peer's work does). Never blocks, never throws.
  virtual void abort() noexcept = 0;
};

// The comm for device memory of `kind` between the `processes` processes of one host (this one
// is `rank`), with `lanes` lanes. Its staging memory and events are made on first use. Never
// throws.
std::unique_ptr<DeviceComm> make_ipc_comm(MemoryKind kind, int rank, int processes, int lanes);

// NCCL's point-to-point for CUDA memory between `processes` processes of any hosts, one per GPU
// on each lane (NCCL refuses two ranks on one GPU): per lane, a communicator of the processes
// on the lane's GPU, made at the lane's first exchange (process 0's unique id goes to the
// others through `host`); an exchange is one group of ncclSend and ncclRecv on the stream.
// NCCL is loaded when first needed (the one the process already has, as LibTorch's, or
// libnccl.so.2); null where this build has no CUDA or found no nccl.h. Never throws.
std::unique_ptr<DeviceComm> make_nccl_comm(int rank, int processes, int lanes);

}  // namespace replicator::detail
