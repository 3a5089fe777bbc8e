// CUDA's device backend: cudaMalloc'd memory, pinned host memory for staging, streams that
// keep order with the default stream, and the reduction kernel (element_reduce.h's arithmetic, one
// thread per element, grid-stride). Peer access between GPUs is enabled, where the hardware has it,
// when the backend is first used; a kernel reads its inputs wherever they are (the same GPU, or a
// peer through peer access).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "src/engines/device/cuda_scope.h"
#include "src/engines/device/device_backend.h"

namespace replicator::detail {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) <= IpcHandle::kBytes);
static_assert(sizeof(cudaIpcEventHandle_t) <= IpcHandle::kBytes);

// An interprocess event (no timing): this process's, or another's opened here.
class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
};

template <typename T, ReduceOp Op>
__global__ void reduce_kernel(DeviceReduce call) {
  using Storage = typename elementwise::Element<T, Op>::Storage;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < call.count; i += stride) {
    const Storage r = elementwise::reduce_element<T, Op>(call.inputs, call.n, i, call.divisor);
    for (int k = 0; k < call.num_outputs; ++k) static_cast<Storage*>(call.outputs[k])[i] = r;
  }
}

class CudaStream final : public DeviceStream {
 public:
  explicit CudaStream(int device) : device_(device) {
    const DeviceGuard guard(device);
    // A blocking stream: what it runs also waits for work issued later on the legacy default
    // stream to begin only after it (and the other way round).
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate", device);
    int sms = 0;
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute", device);
    max_blocks_ = sms * 8;
  }
  ~CudaStream() override { cudaStreamDestroy(stream_); }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    const DeviceGuard guard(device_);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync",
               device_);
  }
  void zero(void* dst, std::size_t bytes) override {
    if (bytes == 0) return;
    const DeviceGuard guard(device_);
    check_cuda(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync", device_);
  }
  void reduce(const DeviceReduce& call) override {
    if (call.count == 0 || call.num_outputs == 0) return;
    const DeviceGuard guard(device_);
    constexpr int kThreads = 256;
    const std::size_t wanted = (call.count + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(std::min<std::size_t>(wanted, max_blocks_));
    elementwise::dispatch(call.dtype, call.op, [&](auto kind) {
      using Kind = decltype(kind);
      reduce_kernel<typename Kind::Type, Kind::kOp><<<blocks, kThreads, 0, stream_>>>(call);
    });
    check_cuda(cudaGetLastError(), "the reduction kernel's launch", device_);
  }
  void synchronize() override {
    check_cuda(cudaStreamSynchronize(stream_), "a collective's kernel or copy", device_);
  }
  void wait_for_issued_work() override {
    const DeviceGuard guard(device_);
    check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "work on the default stream", device_);
    check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "work on the thread's default stream",
               device_);
  }
  bool synchronize_until(Clock::time_point deadline) override {
    for (int looks = 0;; ++looks) {
      const cudaError_t status = cudaStreamQuery(stream_);
      if (status == cudaSuccess) return true;
      if (status != cudaErrorNotReady) check_cuda(status, "a collective's kernel or copy", device_);
      if (Clock::now() >= deadline) return false;
      if (looks < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  void record(DeviceEvent& event) override {
    const DeviceGuard guard(device_);
    check_cuda(cudaEventRecord(static_cast<CudaEvent&>(event).get(), stream_), "cudaEventRecord",
               device_);
  }
  void* native_handle() override { return stream_; }
  void wait(DeviceEvent& event) override {
    const DeviceGuard guard(device_);
    check_cuda(cudaStreamWaitEvent(stream_, static_cast<CudaEvent&>(event).get(), 0),
               "cudaStreamWaitEvent", device_);
  }

 private:
  int device_;
  int max_blocks_ = 1;
  cudaStream_t stream_ = nullptr;
};

class CudaBackend final : public DeviceBackend {
 public:
  MemoryKind kind() const override { return MemoryKind::kCuda; }
  int count() const override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no GPU: a clean state for the next call
      return 0;
    }
    return n;
  }
  void* allocate(int device, std::size_t bytes) override {
    enable_peers();
    const DeviceGuard guard(device);
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)),
               ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(), device);
    return p;
  }
  void release(int device, void* data) noexcept override {
    const DeviceGuard guard(device, std::nothrow);
    cudaFree(data);
  }
  void* allocate_host(std::size_t bytes) override {
    void* p = nullptr;
    check_cuda(cudaMallocHost(&p, std::max<std::size_t>(bytes, 1)), "cudaMallocHost", 0);
    return p;
  }
  void release_host(void* data) noexcept override { cudaFreeHost(data); }
  bool reaches(int a, int b) override {
    if (a == b) return true;
    enable_peers();
    int can = 0;
    return cudaDeviceCanAccessPeer(&can, a, b) == cudaSuccess && can != 0;
  }
  std::unique_ptr<DeviceStream> make_stream(int device) override {
    enable_peers();
    return std::make_unique<CudaStream>(device);
  }

  void* allocate_shared(int device, std::size_t bytes, IpcHandle& handle) override {
    void* p = allocate(device, bytes);
    cudaIpcMemHandle_t h;
    const cudaError_t status = cudaIpcGetMemHandle(&h, p);
    if (status != cudaSuccess) {
      release(device, p);
      check_cuda(status, "cudaIpcGetMemHandle", device);
    }
    std::memcpy(handle.bytes.data(), &h, sizeof h);
    return p;
  }
  void release_shared(int device, void* data) noexcept override { release(device, data); }
  void* open_shared(int device, const IpcHandle& handle) override {
    enable_peers();
    const DeviceGuard guard(device);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.bytes.data(), sizeof h);
    void* p = nullptr;
    check_cuda(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle",
               device);
    return p;
  }
  void close_shared(int device, void* data) noexcept override {
    const DeviceGuard guard(device, std::nothrow);
    cudaIpcCloseMemHandle(data);
  }
  std::unique_ptr<DeviceEvent> make_shared_event(int device, IpcHandle& handle) override {
    const DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess),
               "cudaEventCreateWithFlags (interprocess)", device);
    auto event = std::make_unique<CudaEvent>(e);
    cudaIpcEventHandle_t h;
    check_cuda(cudaIpcGetEventHandle(&h, e), "cudaIpcGetEventHandle", device);
    std::memcpy(handle.bytes.data(), &h, sizeof h);
    return event;
  }
  std::unique_ptr<DeviceEvent> open_event(int device, const IpcHandle& handle) override {
    const DeviceGuard guard(device);
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.bytes.data(), sizeof h);
    cudaEvent_t e = nullptr;
    check_cuda(cudaIpcOpenEventHandle(&e, h), "cudaIpcOpenEventHandle", device);
    return std::make_unique<CudaEvent>(e);
  }
  // A stream waiting for another process's event cannot be released: CUDA has no way.
  void cancel_event_waits() noexcept override {}

 private:
  // Every pair of GPUs that can reach each other's memory gets peer access, once.
  void enable_peers() {
    std::call_once(peers_once_, [&] {
      int previous = -1;
      if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
      const int n = count();
      for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) {
          int can = 0;
          if (a == b || cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) continue;
          cudaSetDevice(a);
          if (cudaDeviceEnablePeerAccess(b, 0) != cudaSuccess) cudaGetLastError();
        }
      }
      if (previous >= 0) cudaSetDevice(previous);
    });
  }

  std::once_flag peers_once_;
};

}  // namespace

DeviceBackend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace replicator::detail
