// DeviceBackend: what the collectives need of a kind of device memory (CUDA, or the fake
// device that stands for it in the tests): memory, pinned host memory for staging, and
// streams that run copies and reduction kernels in order.
//
// A Stream is an ordered queue on one device: copy() and reduce() enqueue and return at once;
// synchronize() blocks until everything enqueued before it has run. A stream is used by one
// thread at a time. Errors of enqueued work surface at the next synchronize(), as Error
// naming the device and what failed.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "replicator/device.h"
#include "replicator/dtype.h"
#include "src/engines/device/element_reduce.h"

namespace replicator::detail {

// One reduction kernel: outputs[k][i] = tree(op, inputs[0][i], ..., inputs[n-1][i]) for
// i < count, in the canonical tree order (element_reduce.h). Pointers are device addresses
// (of any device the stream's device can reach); an output may alias an input element for
// element.
struct DeviceReduce {
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  int n = 0;
  int num_outputs = 0;
  std::size_t count = 0;
  std::size_t divisor = 1;
  const void* inputs[elementwise::kMaxInputs] = {};
  void* outputs[elementwise::kMaxInputs] = {};
};

// What one process hands another of the same host so that it can open memory or an event of
// the first (CUDA IPC's handles; the fake device's shared-memory names). Plain bytes.
struct IpcHandle {
  static constexpr std::size_t kBytes = 64;
  std::array<std::byte, kBytes> bytes{};
  friend bool operator==(const IpcHandle&, const IpcHandle&) = default;
};

// An event on a device: a point in a stream's work that another stream, maybe of another
// process of the host, can wait for. Made by DeviceBackend::make_shared_event (recorded by
// this process) or open_event (another process's, waited for here).
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

class DeviceStream {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~DeviceStream() = default;
  // Enqueues a copy of `bytes` from `src` to `dst` (device or host addresses).
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // Enqueues writing `bytes` zero bytes at `dst`.
  virtual void zero(void* dst, std::size_t bytes) = 0;
  // Enqueues a reduction kernel.
  virtual void reduce(const DeviceReduce& call) = 0;
  // Blocks until all enqueued work has run; throws Error if any of it failed.
  virtual void synchronize() = 0;
  // Blocks until the work the calling thread issued on the device's default stream before
  // the call has run (CUDA: the legacy default stream and the thread's per-thread one);
  // throws Error if any of it failed. What a collective waits for before it reads a buffer.
  virtual void wait_for_issued_work() = 0;
  // Blocks until all enqueued work has run (true) or `deadline` passes first (false: the work
  // is still enqueued, and the stream must not be destroyed until a synchronize() returns);
  // throws Error if any of it failed.
  virtual bool synchronize_until(Clock::time_point deadline) = 0;
  // Enqueues a record of `event` (one of this process's, make_shared_event): it completes
  // when the work enqueued before it has run.
  virtual void record(DeviceEvent& event) = 0;
  // Enqueues a wait: work enqueued after it starts once the last record of `event` enqueued
  // before this call (by whichever process) has completed.
  virtual void wait(DeviceEvent& event) = 0;
  // The stream as its runtime names it (CUDA: its cudaStream_t), for libraries that enqueue
  // work of their own on it (NCCL); null for the fake device.
  virtual void* native_handle() { return nullptr; }
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual MemoryKind kind() const = 0;
  // The devices this process can use (0: none). Never throws.
  virtual int count() const = 0;
  // Throws Error naming the device and the bytes when the device refuses.
  virtual void* allocate(int device, std::size_t bytes) = 0;
  virtual void release(int device, void* data) noexcept = 0;
  // Host memory the device copies to and from at full speed (pinned); plain host memory
  // where there is no such thing.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void release_host(void* data) noexcept = 0;
  // Whether a kernel on device `a` can read and write memory of device `b` (the same device,
  // or peer access between them). Never throws.
  virtual bool reaches(int a, int b) = 0;
  // A new stream on `device`. Throws Error.
  virtual std::unique_ptr<DeviceStream> make_stream(int device) = 0;

  // Memory of `device` that other processes of this host can open by the handle written to
  // `handle` (CUDA: cudaMalloc'd and cudaIpcGetMemHandle). Released by release_shared, which
  // the caller may only call once no process has it open. Throws Error.
  virtual void* allocate_shared(int device, std::size_t bytes, IpcHandle& handle) = 0;
  virtual void release_shared(int device, void* data) noexcept = 0;
  // Opens, for kernels and copies on `device`, memory another process allocated with
  // allocate_shared; close_shared when done. The same handle is opened once per process.
  // Throws Error (the handle names nothing, or the other process has gone).
  virtual void* open_shared(int device, const IpcHandle& handle) = 0;
  virtual void close_shared(int device, void* data) noexcept = 0;
  // An event of `device` that this process records and other processes of the host open by
  // the handle written to `handle`. Throws Error.
  virtual std::unique_ptr<DeviceEvent> make_shared_event(int device, IpcHandle& handle) = 0;
  // Another process's shared event, for waits on streams of `device`. Throws Error.
  virtual std::unique_ptr<DeviceEvent> open_event(int device, const IpcHandle& handle) = 0;
  // Ends every wait on this backend's streams for an opened event (open_event) that has not
  // completed, as a failure that the stream's synchronize() reports: what a job does once it
  // gives up on another process. Where the hardware cannot end such a wait (CUDA), it does
  // nothing, and the stream stays blocked until the other process's work completes. Never
  // throws.
  virtual void cancel_event_waits() noexcept = 0;
};

// The backend of `kind` (process-wide, made on first use, as the hardware it stands for).
// Throws InvalidArgument for the host, and Error for cuda in a build without CUDA.
DeviceBackend& device_backend(MemoryKind kind);

// Checks that `device` exists (index below its backend's count); throws InvalidArgument
// naming it and the count otherwise.
void check_device(Device device);

// The fake device's backend (fake_device.cc) and, in a build with CUDA, CUDA's
// (cuda_device.cu).
DeviceBackend& fake_backend();
DeviceBackend& cuda_backend();

// How many waits for another process's event (open_event) the fake device's streams have
// completed in this process: how the tests see that device memory moved between processes
// without the host. Never throws.
std::uint64_t fake_event_waits();

}  // namespace replicator::detail
