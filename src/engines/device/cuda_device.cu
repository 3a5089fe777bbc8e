// CUDA's device backend: cudaMalloc'd memory, pinned host memory for staging, streams that
// keep order with the default stream, and the reduction kernel (element_reduce.h's arithmetic, one
// thread per element, grid-stride). Peer access between GPUs is enabled, where the hardware has it,
// when the backend is first used; a kernel reads its inputs wherever they are (the same GPU, or a
// peer through peer access).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "src/engines/device/device_backend.h"

namespace replicator::detail {
namespace {

void check(cudaError_t status, const char* what, int device) {
  if (status == cudaSuccess) return;
  throw Error(std::string("cuda:") + std::to_string(device) + ": " + what +
              " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// Makes `device` the calling thread's current device for the scope, and restores the one
// before (a user's own CUDA code on the thread keeps its device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    check(cudaSetDevice(device), "cudaSetDevice", device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
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
    check(cudaStreamCreate(&stream_), "cudaStreamCreate", device);
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute", device);
    max_blocks_ = sms * 8;
  }
  ~CudaStream() override { cudaStreamDestroy(stream_); }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    const DeviceGuard guard(device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync", device_);
  }
  void zero(void* dst, std::size_t bytes) override {
    if (bytes == 0) return;
    const DeviceGuard guard(device_);
    check(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync", device_);
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
    check(cudaGetLastError(), "the reduction kernel's launch", device_);
  }
  void synchronize() override {
    check(cudaStreamSynchronize(stream_), "a collective's kernel or copy", device_);
  }
  void wait_for_issued_work() override {
    const DeviceGuard guard(device_);
    check(cudaStreamSynchronize(cudaStreamLegacy), "work on the default stream", device_);
    check(cudaStreamSynchronize(cudaStreamPerThread), "work on the thread's default stream",
          device_);
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
    check(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)),
          ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(), device);
    return p;
  }
  void release(int device, void* data) noexcept override {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    cudaSetDevice(device);
    cudaFree(data);
    if (previous >= 0) cudaSetDevice(previous);
  }
  void* allocate_host(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, std::max<std::size_t>(bytes, 1)), "cudaMallocHost", 0);
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
