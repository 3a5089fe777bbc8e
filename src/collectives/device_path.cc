#include "src/collectives/device_path.h"

#include <algorithm>
#include <mutex>
#include <optional>

#include "replicator/errors.h"
#include "src/collectives/table.h"

namespace replicator::detail {
namespace {

std::size_t aligned8(std::size_t bytes) { return (bytes + 7) & ~std::size_t{7}; }

// Whether `inner` lies within `outer` (on the same device).
bool inside(const Buffer& inner, const Buffer& outer) {
  const auto* a = static_cast<const std::byte*>(inner.data);
  const auto* b = static_cast<const std::byte*>(outer.data);
  return inner.device == outer.device && a >= b && a + inner.bytes() <= b + outer.bytes();
}

}  // namespace

MemoryKind memory_of(const Call& call) {
  std::optional<Device> found;
  const auto look = [&](const Buffer& b) {
    if (b.count == 0) return;
    if (found && found->kind != b.device.kind) {
      throw InvalidArgument("a collective takes buffers of one kind of memory, got " +
                            to_string(*found) + " and " + to_string(b.device));
    }
    check_device(b.device);
    if (!found) found = b.device;
  };
  for (const Buffer& b : call.buffers) look(b);
  look(call.input);
  look(call.output);
  return found ? found->kind : MemoryKind::kHost;
}

Device first_device(const Call& call) {
  for (const Buffer& b : call.buffers) {
    if (b.count > 0) return b.device;
  }
  if (call.input.count > 0) return call.input.device;
  if (call.output.count > 0) return call.output.device;
  return Device{};
}

bool reduces_in_device(MemoryKind kind, int n) {
  if (n > elementwise::kMaxInputs) return false;
  // Whether every device of a kind reaches every other does not change while the process
  // runs: asked once per kind.
  static std::once_flag once[3];
  static bool all_reach[3] = {};
  const auto k = static_cast<std::size_t>(kind);
  std::call_once(once[k], [&] {
    DeviceBackend& backend = device_backend(kind);
    bool all = true;
    for (int a = 0; a < backend.count(); ++a) {
      for (int b = 0; b < backend.count(); ++b) all = all && backend.reaches(a, b);
    }
    all_reach[k] = all;
  });
  return all_reach[k];
}

DeviceLane::~DeviceLane() {
  streams_.clear();
  if (mirror_ != nullptr) device_backend(mirror_kind_).release_host(mirror_);
  if (scratch_ != nullptr) {
    device_backend(scratch_device_.kind).release(scratch_device_.index, scratch_);
  }
}

std::byte* DeviceLane::scratch(Device device, std::size_t bytes) {
  if (scratch_ != nullptr && (scratch_device_ != device || scratch_bytes_ < bytes)) {
    // The streams may still use it.
    for (auto& [d, s] : streams_) s->synchronize();
    device_backend(scratch_device_.kind).release(scratch_device_.index, scratch_);
    scratch_ = nullptr;
  }
  if (scratch_ == nullptr) {
    const std::size_t size = std::max<std::size_t>(bytes + bytes / 2, 4096);
    scratch_ = static_cast<std::byte*>(device_backend(device.kind).allocate(device.index, size));
    scratch_device_ = device;
    scratch_bytes_ = size;
  }
  return scratch_;
}

DeviceStream& DeviceLane::stream(Device device) {
  for (auto& [d, s] : streams_) {
    if (d == device) return *s;
  }
  streams_.emplace_back(device, device_backend(device.kind).make_stream(device.index));
  return *streams_.back().second;
}

std::byte* DeviceLane::mirror(MemoryKind kind, std::size_t bytes) {
  if (mirror_ != nullptr && (mirror_kind_ != kind || mirror_bytes_ < bytes)) {
    device_backend(mirror_kind_).release_host(mirror_);
    mirror_ = nullptr;
  }
  if (mirror_ == nullptr) {
    // Grown by half again over the need, so a growing job does not reallocate every call.
    const std::size_t size = std::max<std::size_t>(bytes + bytes / 2, 4096);
    mirror_ = static_cast<std::byte*>(device_backend(kind).allocate_host(size));
    mirror_kind_ = kind;
    mirror_bytes_ = size;
  }
  return mirror_;
}

Call DeviceLane::to_host(const CollectiveDef& def, const Call& call, MemoryKind kind, int replica) {
  host_ = call;
  const auto host_view = [](const Buffer& b, std::byte* at) {
    return Buffer{.data = at, .count = b.count, .dtype = b.dtype};
  };
  if (def.in_place) {
    std::size_t total = 0;
    for (const Buffer& b : call.buffers) total += aligned8(b.bytes());
    std::byte* at = mirror(kind, total);
    host_buffers_.clear();
    for (const Buffer& b : call.buffers) {
      host_buffers_.push_back(host_view(b, at));
      if (b.count > 0) stream(b.device).copy(at, b.data, b.bytes());
      at += aligned8(b.bytes());
    }
    host_.buffers = host_buffers_;
    writes_output_ = true;
  } else {
    const Buffer& in = call.input;
    const Buffer& out = call.output;
    const bool aliased = in.count > 0 && out.count > 0 && inside(in, out);
    std::byte* at = mirror(kind, aligned8(out.bytes()) + (aliased ? 0 : in.bytes()));
    host_.output = host_view(out, at);
    host_.input = aliased ? host_view(in, at + (static_cast<const std::byte*>(in.data) -
                                                static_cast<const std::byte*>(out.data)))
                          : host_view(in, at + aligned8(out.bytes()));
    // A gather writes the root's output alone: the others' stays as it was.
    writes_output_ =
        out.count > 0 && !(&def == &definition(OpKind::kGather) && call.root != replica);
    // Where the input is a block of the output, its copy lands in the mirror's output.
    if (in.count > 0) stream(in.device).copy(host_.input.data, in.data, in.bytes());
  }
  for (auto& [d, s] : streams_) s->synchronize();
  return host_;
}

void DeviceLane::from_host(const Call& call) {
  if (!writes_output_) return;
  if (!call.buffers.empty()) {
    for (std::size_t i = 0; i < call.buffers.size(); ++i) {
      const Buffer& b = call.buffers[i];
      if (b.count > 0) stream(b.device).copy(b.data, host_.buffers[i].data, b.bytes());
    }
  } else {
    const Buffer& out = call.output;
    stream(out.device).copy(out.data, host_.output.data, out.bytes());
  }
  for (auto& [d, s] : streams_) s->synchronize();
}

void single_in_device(const CollectiveDef& def, const Descriptor& d, DeviceLane& lane) {
  const Call& c = d.call;
  // all_reduce and broadcast of one replica are the identity, as on the host.
  if (def.in_place || c.output.count == 0) return;
  DeviceStream& stream = lane.stream(c.output.device);
  if (&def == &definition(OpKind::kReduceScatter)) {
    DeviceReduce r{.op = d.op, .dtype = d.dtype, .n = 1, .num_outputs = 1, .count = c.output.count};
    r.inputs[0] = c.input.data;
    r.outputs[0] = c.output.data;
    stream.reduce(r);
  } else if (&def == &definition(OpKind::kPermute) && c.pairs.empty()) {
    stream.zero(c.output.data, c.output.bytes());
  } else if (c.output.data != c.input.data) {
    stream.copy(c.output.data, c.input.data, c.input.bytes());
  }
  stream.synchronize();
}

void device_all_reduce(const Peers& p, DeviceStream& stream) {
  const Descriptor& mine = p.mine();
  const auto [lo, hi] = slice_of(mine.count, p.me, p.n);
  for_each_part(mine.call.buffers, lo, hi,
                [&](std::size_t i, std::uint64_t first, std::uint64_t count) {
                  const Buffer& b = mine.call.buffers[i];
                  DeviceReduce r{.op = mine.op,
                                 .dtype = b.dtype,
                                 .n = p.n,
                                 .num_outputs = p.n,
                                 .count = count,
                                 .divisor = static_cast<std::size_t>(p.n)};
                  const std::size_t offset = first * dtype_size(b.dtype);
                  for (int j = 0; j < p.n; ++j) {
                    auto* data = static_cast<std::byte*>(p.of(j).call.buffers[i].data) + offset;
                    r.inputs[j] = data;
                    r.outputs[j] = data;
                  }
                  stream.reduce(r);
                });
  stream.synchronize();
}

}  // namespace replicator::detail
