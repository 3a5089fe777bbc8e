// DeviceBackend: what the collectives need of a kind of device memory (CUDA, or the fake
// device that stands for it in the tests): memory, pinned host memory for staging, and
// streams that run copies and reduction kernels in order.
//
// A Stream is an ordered queue on one device: copy() and reduce() enqueue and return at once;
// synchronize() blocks until everything enqueued before it has run. A stream is used by one
// thread at a time. Errors of enqueued work surface at the next synchronize(), as Error
// naming the device and what failed.
#pragma once

#include <cstddef>
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

class DeviceStream {
 public:
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

}  // namespace replicator::detail
