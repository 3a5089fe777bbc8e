// The public device calls (replicator/device.h) and the choice of backend.
#include "replicator/device.h"

#include <cstring>
#include <utility>

#include "replicator/errors.h"
#include "src/engines/device/device_backend.h"

namespace replicator {
namespace detail {

DeviceBackend& device_backend(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kFake:
      return fake_backend();
    case MemoryKind::kCuda:
      return cuda_backend();
    case MemoryKind::kHost:
      break;
  }
  throw InvalidArgument("host memory has no device backend");
}

void check_device(Device device) {
  if (device.is_host()) return;
  const int count = device_count(device.kind);
  if (device.index < 0 || device.index >= count) {
    throw InvalidArgument("device " + to_string(device) + " does not exist: this process has " +
                          std::to_string(count) + " " + std::string(to_string(device.kind)) +
                          " device" + (count == 1 ? "" : "s"));
  }
}

#if !defined(REPLICATOR_HAVE_CUDA)
DeviceBackend& cuda_backend() {
  throw Error(
      "this build of replicator has no CUDA (configure with nvcc on the PATH and "
      "-DREPLICATOR_WITH_CUDA=ON)");
}
#endif

}  // namespace detail

int device_count(MemoryKind kind) {
  if (kind == MemoryKind::kHost) return 1;
  try {
    return detail::device_backend(kind).count();
  } catch (const Error&) {
    return 0;
  }
}

bool built_with_cuda() {
#if defined(REPLICATOR_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

DeviceMemory::DeviceMemory(Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  detail::check_device(device);
  if (device.is_host()) {
    throw InvalidArgument("DeviceMemory is device memory: use a std::vector for the host");
  }
  data_ = detail::device_backend(device.kind).allocate(device.index, bytes);
}

DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) detail::device_backend(device_.kind).release(device_.index, data_);
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    DeviceMemory old(std::move(*this));
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src,
                std::size_t bytes) {
  detail::check_device(dst_device);
  detail::check_device(src_device);
  if (dst_device.is_host() && src_device.is_host()) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  if (!dst_device.is_host() && !src_device.is_host() && dst_device.kind != src_device.kind) {
    throw InvalidArgument("copy_bytes: no copy from " + to_string(src_device) + " to " +
                          to_string(dst_device));
  }
  const Device device = dst_device.is_host() ? src_device : dst_device;
  auto stream = detail::device_backend(device.kind).make_stream(device.index);
  stream->copy(dst, src, bytes);
  stream->synchronize();
}

}  // namespace replicator
