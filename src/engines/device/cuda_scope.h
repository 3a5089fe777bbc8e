// CUDA's errors as replicator's, and the current device for a scope: shared by the CUDA
// backend (cuda_device.cu) and the NCCL comm (nccl_comm.cc). Host code; needs cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <new>
#include <string>

#include "replicator/errors.h"

namespace replicator::detail {

// Throws Error naming the device, the call and CUDA's error when `status` is one.
inline void check_cuda(cudaError_t status, const char* what, int device) {
  if (status == cudaSuccess) return;
  throw Error(std::string("cuda:") + std::to_string(device) + ": " + what +
              " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// Makes `device` the calling thread's current device for the scope, and restores the one
// before (a user's own CUDA code on the thread keeps its device). Throws Error where CUDA
// refuses the device; the std::nothrow form tries and never throws (for release paths).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    check_cuda(cudaSetDevice(device), "cudaSetDevice", device);
  }
  DeviceGuard(int device, std::nothrow_t /*unused*/) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace replicator::detail
