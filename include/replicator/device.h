// Devices: where a Buffer's memory lives, and device memory a program can own.
//
// A Buffer (dtype.h) carries its Device. The host is the default; `cuda:n` is CUDA device n;
// `fake:n` is a fake device: host memory behind the same device interface, whose kernels
// and copies run in order on a thread per stream, and whose addresses cannot be read from
// the host (they are not canonical x86-64 addresses, so a host access faults as it would on
// a GPU). The fake device is how the device path is tested on a machine without a GPU.
//
// Every collective takes device buffers as it takes host ones: all replicas must pass the
// same kind of memory (else CollectiveMismatch on every replica), and the results have the
// same bits as on the host. A collective on device memory first waits for the work the
// calling thread issued on the device's default stream (CUDA: the legacy default stream and
// the thread's per-thread one; work on other streams the caller synchronises first), and
// returns once its results are in device memory: it blocks as a host collective does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace replicator {

enum class MemoryKind : std::uint8_t { kHost, kCuda, kFake };

struct Device {
  MemoryKind kind = MemoryKind::kHost;
  std::int16_t index = 0;

  bool is_host() const { return kind == MemoryKind::kHost; }
  friend bool operator==(Device a, Device b) = default;
};

// "host", "cuda", "fake".
std::string_view to_string(MemoryKind kind);
// "host", "cuda:0", "fake:2".
std::string to_string(Device device);

// How many devices of `kind` this process can use: host 1; cuda the visible GPUs (0 where
// there is no GPU, no driver, or the build has no CUDA); fake 64. Never throws.
int device_count(MemoryKind kind);

// Whether this build carries the CUDA device path (compiled with nvcc).
bool built_with_cuda();

// `bytes` of memory on `device`, freed by the destructor. Not initialised. Throws
// InvalidArgument (a device index past device_count) or Error (the device refused the
// allocation; the message says which device and how many bytes). Movable, not copyable.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(Device device, std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Copies `bytes` from `src` on `src_device` to `dst` on `dst_device` (either may be the
// host). Blocks until the copy is done, after all work issued before it on the device's
// copy stream. Throws InvalidArgument (a bad device) or Error (the device failed).
void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src,
                std::size_t bytes);

// Parses "host", "cuda", "cuda:N", "fake:N" (N devices; "cuda": every visible GPU) into the
// kind and the number of devices replicas are spread over; Config::devices uses it. Throws
// ConfigError naming `text`.
struct DeviceSet {
  MemoryKind kind = MemoryKind::kHost;
  int count = 1;
};
DeviceSet parse_devices(std::string_view text);

}  // namespace replicator
