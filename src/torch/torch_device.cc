// replicator's devices as LibTorch devices, and LibTorch's CUDA library loaded on demand.
#include <dlfcn.h>
#include <torch/cuda.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "replicator/errors.h"
#include "replicator/torch/tensor_collectives.h"

namespace replicator::torch {
namespace {

// Where libtorch_cpu.so lies (the folder of the copy this process loaded): the folder that
// holds libtorch_cuda.so too.
std::filesystem::path libtorch_folder() {
  void* cpu = ::dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  char origin[4096] = {};
  const bool found = cpu != nullptr && ::dlinfo(cpu, RTLD_DI_ORIGIN, origin) == 0;
  if (cpu != nullptr) ::dlclose(cpu);  // the NOLOAD reference only
  if (!found) throw Error("cannot find the folder of LibTorch's libtorch_cpu.so in this process");
  return origin;
}

// Loads libtorch_cuda.so once per process unless it is loaded already; "" or why it failed.
const std::string& load_cuda_library() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    if (::dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD) != nullptr) return;
    const std::filesystem::path path = libtorch_folder() / "libtorch_cuda.so";
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = ::dlerror();  // NOLINT(concurrency-mt-unsafe): once per process
      failure = "cannot load LibTorch's CUDA library " + path.string() + ": " +
                (why != nullptr ? why : "dlopen failed");
    }
  });
  return failure;
}

}  // namespace

c10::Device torch_device_of(Device device) {
  switch (device.kind) {
    case MemoryKind::kHost:
      return c10::Device(c10::kCPU);
    case MemoryKind::kFake:
      throw InvalidArgument(to_string(device) +
                            " holds no LibTorch tensors (a fake device is replicator's own)");
    case MemoryKind::kCuda:
      break;
  }
  if (const std::string& failure = load_cuda_library(); !failure.empty()) throw Error(failure);
  // A count of devices, 0 to 127 (c10::DeviceIndex is a signed char).
  const auto visible =
      static_cast<int>(::torch::cuda::device_count());  // NOLINT(bugprone-signed-char-misuse)
  if (device.index >= visible) {
    std::string why = "LibTorch sees " + std::to_string(visible) + " CUDA device" +
                      (visible == 1 ? "" : "s") + ", so there is no " + to_string(device);
    if (visible == 0 && device_count(MemoryKind::kCuda) > 0) {
      why += " (replicator sees " + std::to_string(device_count(MemoryKind::kCuda)) +
             "; LibTorch answered a CUDA query before its CUDA library was loaded, and keeps "
             "that answer: call torch_device_of first)";
    }
    throw Error(why);
  }
  return {c10::kCUDA, static_cast<c10::DeviceIndex>(device.index)};
}

}  // namespace replicator::torch
