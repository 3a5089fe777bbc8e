// Collectives on device memory (replicator/device.h).
//
// With one replica in the job, the collective is a copy on the device (single_in_device).
// Otherwise two ways, chosen before the entry barrier from what every replica of the process knows
// alike (so all take the same one):
// Each first waits for the work its thread issued on the device (wait_for_issued_work).
//   in the device: an all_reduce of one process whose devices reach each other's memory.
//     Each replica meets the others, reduces its slice of every
//     replica's buffers with the device kernel in the canonical tree order (the CPU path's
//     bits), writes it into every replica's buffers, waits for its stream, and meets them
//     again: the direct path of all_reduce.cc, on the device.
//   through the host: every other collective, and every collective across processes. The
//     replica copies its device buffers into pinned host memory of its own (a mirror),
//     runs the host collective on the mirror (every check, deadline and abort as on the
//     host), and copies the results back.
// The descriptor keeps the kind of memory, so a replica that passes host memory where the
// others pass device memory is a CollectiveMismatch on every replica.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "replicator/device.h"
#include "src/collectives/peers.h"
#include "src/comm/call.h"
#include "src/engines/device/device_backend.h"

namespace replicator::detail {

struct CollectiveDef;

// The kind of memory of a call's buffers (empty buffers do not count; host when every buffer
// is empty). Throws InvalidArgument, before any communication, when the call mixes kinds or
// names a device this process does not have.
MemoryKind memory_of(const Call& call);

// The device of the call's first non-empty buffer (the host when all are empty).
Device first_device(const Call& call);

// Whether an all_reduce of `n` replicas of one process on `kind` memory runs in the device
// (every device of the kind reaches every other, and the kernel takes n inputs).
bool reduces_in_device(MemoryKind kind, int n);

// One replica's device state: a stream per device it has used, and its host mirror.
class DeviceLane {
 public:
  DeviceLane() = default;
  ~DeviceLane();
  DeviceLane(const DeviceLane&) = delete;
  DeviceLane& operator=(const DeviceLane&) = delete;

  // This replica's stream on `device` (made on first use). Throws Error.
  DeviceStream& stream(Device device);

  // Copies the device buffers of `call` (of `kind` memory, memory_of(call)) into the mirror
  // (waiting for the stream) and returns the same call on host memory; `replica` is this
  // replica's global id (a gather's root alone has a result). Throws Error.
  Call to_host(const CollectiveDef& def, const Call& call, MemoryKind kind, int replica);
  // Copies the results of the host call that to_host made back into the device buffers of
  // `call`, and waits for them. Throws Error.
  void from_host(const Call& call);

  // At least `bytes` of memory on `device`, this replica's, kept for later calls (its contents
  // are not). Throws Error.
  std::byte* scratch(Device device, std::size_t bytes);

 private:
  std::byte* mirror(MemoryKind kind, std::size_t bytes);

  std::vector<std::pair<Device, std::unique_ptr<DeviceStream>>> streams_;
  MemoryKind mirror_kind_ = MemoryKind::kHost;
  std::byte* mirror_ = nullptr;
  std::size_t mirror_bytes_ = 0;
  Device scratch_device_;
  std::byte* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  std::vector<Buffer> host_buffers_;  // to_host's in-place buffers
  Call host_;                         // to_host's result
  bool writes_output_ = false;
};

// A collective of a job of one replica, on the device: a copy from input to output (a
// reduction of one input for reduce_scatter; zeros for a permute without pairs), or nothing
// in place. Returns once the stream has run it.
void single_in_device(const CollectiveDef& def, const Descriptor& d, DeviceLane& lane);

// all_reduce in the device, direct path: replica p.me's slice of every replica's buffers,
// reduced on `stream`; returns once the stream has run it.
void device_all_reduce(const Peers& p, DeviceStream& stream);

}  // namespace replicator::detail
