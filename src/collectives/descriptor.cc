#include <algorithm>
#include <cstring>
#include <string>

#include "replicator/errors.h"
#include "src/collectives/peers.h"

namespace replicator::detail {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

std::string shape(DType dtype, std::uint64_t count) {
  return std::string(to_string(dtype)) + " x " + std::to_string(count);
}

// The message is built only when the check fails: these run on every collective.
template <typename Message>
void require(bool ok, Message&& message) {
  if (!ok) throw InvalidArgument(message());
}

template <typename What>
void check_buffer(const Buffer& b, What&& what) {
  require(b.data != nullptr || b.count == 0, [&] {
    return what() + " has " + std::to_string(b.count) + " elements but a null data pointer";
  });
}

bool overlaps(const Buffer& a, const Buffer& b) {
  if (a.count == 0 || b.count == 0) return false;
  const auto* a0 = static_cast<const std::byte*>(a.data);
  const auto* b0 = static_cast<const std::byte*>(b.data);
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

}  // namespace

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kPermute:
      return "permute";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kEndStep:
      return "end of step";
  }
  return "?";
}

std::string Descriptor::describe() const {
  std::string s(op_name(kind));
  switch (kind) {
    case OpKind::kBarrier:
      return s + "()";
    case OpKind::kEndStep:
      return "return from the step function";
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      s += "(" + shape(dtype, count) + ", op=" + std::string(to_string(op));
      break;
    case OpKind::kBroadcast:
      s += "(" + shape(dtype, count) + ", root=" + std::to_string(root);
      break;
    default:
      s += "(" + shape(dtype, count);
  }
  if (call.buffers.size() > 1) {
    s += ", " + std::to_string(call.buffers.size()) + " fused buffers, layout " +
         std::to_string(layout % 100000);
  } else if (kind == OpKind::kPermute) {
    s += ", " + std::to_string(call.pairs.size()) + " pairs #" + std::to_string(layout % 100000);
  } else if (layout != 0) {
    s += ", signature #" + std::to_string(layout % 100000);
  }
  return s + ")";
}

Descriptor describe_call(const Call& call, int me, int n) {
  Descriptor d;
  d.kind = call.kind;
  d.call = call;
  const auto name = [&] { return std::string(op_name(call.kind)); };
  switch (call.kind) {
    case OpKind::kBarrier:
    case OpKind::kEndStep:
      break;
    case OpKind::kAllReduce:
    case OpKind::kBroadcast: {
      if (call.kind == OpKind::kAllReduce) d.op = call.op;
      if (call.kind == OpKind::kBroadcast) {
        require(call.root >= 0 && call.root < n, [&] {
          return name() + ": root must be a replica id in [0, " + std::to_string(n) + "), got " +
                 std::to_string(call.root);
        });
        d.root = call.root;
      }
      std::uint64_t layout = call.buffers.size();
      for (std::size_t i = 0; i < call.buffers.size(); ++i) {
        const Buffer& b = call.buffers[i];
        check_buffer(b, [&] { return name() + " buffer " + std::to_string(i); });
        d.count += b.count;
        layout = mix(mix(layout, static_cast<std::uint64_t>(b.dtype)), b.count);
        for (std::size_t k = 0; k < i; ++k) {
          require(!overlaps(call.buffers[k], b), [&] {
            return name() + ": fused buffers " + std::to_string(k) + " and " + std::to_string(i) +
                   " overlap";
          });
        }
      }
      d.dtype = call.buffers.empty() ? DType::kF32 : call.buffers.front().dtype;
      d.layout = call.buffers.size() == 1 ? 0 : layout;
      break;
    }
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kPermute: {
      const Buffer& in = call.input;
      const Buffer& out = call.output;
      check_buffer(in, [&] { return name() + " input"; });
      check_buffer(out, [&] { return name() + " output"; });
      require(in.dtype == out.dtype, [&] {
        return name() + ": input is " + std::string(to_string(in.dtype)) + " but output is " +
               std::string(to_string(out.dtype));
      });
      d.dtype = in.dtype;
      d.count = in.count;
      const auto un = static_cast<std::uint64_t>(n);
      if (call.kind == OpKind::kAllGather) {
        require(out.count == in.count * un, [&] {
          return name() + ": output must hold input.size() * num_replicas() = " +
                 std::to_string(in.count * un) + " elements, got " + std::to_string(out.count);
        });
        // The one overlap allowed: input is exactly this replica's own block of output
        // (in-place all_gather; the algorithm skips that copy).
        const bool in_place_block = in.data == static_cast<const std::byte*>(out.data) +
                                                   static_cast<std::size_t>(me) * in.bytes();
        require(!overlaps(in, out) || in_place_block, [&] {
          return name() + ": input overlaps output other than as exactly block " +
                 std::to_string(me) + " (this replica's own block) of it";
        });
      } else if (call.kind == OpKind::kReduceScatter) {
        d.op = call.op;
        require(in.count == out.count * un, [&] {
          return name() + ": input must hold output.size() * num_replicas() = " +
                 std::to_string(out.count * un) + " elements, got " + std::to_string(in.count);
        });
        require(!overlaps(in, out), [&] { return name() + ": input and output overlap"; });
      } else {
        require(out.count == in.count, [&] {
          return name() + ": output must hold as many elements as input (" +
                 std::to_string(in.count) + "), got " + std::to_string(out.count);
        });
        require(!overlaps(in, out), [&] { return name() + ": input and output overlap"; });
        if (call.kind == OpKind::kAllToAll) {
          require(in.count % un == 0, [&] {
            return name() + ": input size " + std::to_string(in.count) +
                   " is not a multiple of num_replicas() = " + std::to_string(n);
          });
        }
      }
      if (call.kind == OpKind::kPermute) {
        // Pairs are few; a quadratic duplicate check needs no scratch memory.
        std::uint64_t layout = call.pairs.size();
        for (std::size_t i = 0; i < call.pairs.size(); ++i) {
          const auto [src, dst] = call.pairs[i];
          require(src >= 0 && src < n && dst >= 0 && dst < n, [&] {
            return name() + ": pair (" + std::to_string(src) + ", " + std::to_string(dst) +
                   ") names a replica outside [0, " + std::to_string(n) + ")";
          });
          for (std::size_t k = 0; k < i; ++k) {
            require(call.pairs[k].first != src, [&] {
              return name() + ": replica " + std::to_string(src) + " is the source of two pairs";
            });
            require(call.pairs[k].second != dst, [&] {
              return name() + ": replica " + std::to_string(dst) +
                     " is the destination of two pairs";
            });
          }
          layout =
              mix(mix(layout, static_cast<std::uint64_t>(src)), static_cast<std::uint64_t>(dst));
        }
        d.layout = layout;
      }
      break;
    }
  }
  if (call.signature != 0) d.layout = mix(d.layout, call.signature);
  return d;
}

std::size_t staged_bytes(const Descriptor& d, int me) {
  switch (d.kind) {
    case OpKind::kAllReduce: {
      std::size_t bytes = 0;
      for (const Buffer& b : d.call.buffers) bytes += packed_size(b);
      return bytes;
    }
    case OpKind::kBroadcast: {
      if (d.root != me) return 0;
      std::size_t bytes = 0;
      for (const Buffer& b : d.call.buffers) bytes += packed_size(b);
      return bytes;
    }
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kPermute:
      return d.call.input.bytes();
    case OpKind::kBarrier:
    case OpKind::kEndStep:
      return 0;
  }
  return 0;
}

void stage(const Descriptor& d, int me, std::byte* staging) {
  if (d.kind == OpKind::kAllReduce || (d.kind == OpKind::kBroadcast && d.root == me)) {
    for (const Buffer& b : d.call.buffers) {
      if (b.count > 0) std::memcpy(staging, b.data, b.bytes());
      staging += packed_size(b);
    }
  } else if (d.kind != OpKind::kBroadcast && d.call.input.count > 0) {
    std::memcpy(staging, d.call.input.data, d.call.input.bytes());
  }
}

Path choose_path(const Descriptor& d, int me, std::size_t staging_capacity) {
  // Broadcast sizes its payload by the root's call: every replica must choose alike.
  std::size_t bytes = staged_bytes(d, me);
  if (d.kind == OpKind::kBroadcast) {
    bytes = 0;
    for (const Buffer& b : d.call.buffers) bytes += packed_size(b);
  }
  return bytes <= staging_capacity ? Path::kStaged : Path::kDirect;
}

const std::byte* Peers::input_of(int j) const {
  if (path == Path::kStaged) return staging[static_cast<std::size_t>(j)];
  return static_cast<const std::byte*>(of(j).call.input.data);
}

std::pair<std::uint64_t, std::uint64_t> slice_of(std::uint64_t total, int r, int n) {
  const auto boundary = [&](int k) -> std::uint64_t {
    if (k >= n) return total;
    const auto un = static_cast<std::uint64_t>(n);
    const auto uk = static_cast<std::uint64_t>(k);
    const std::uint64_t exact = total / un * uk + total % un * uk / un;  // no overflow
    return exact & ~std::uint64_t{63};
  };
  return {boundary(r), boundary(r + 1)};
}

}  // namespace replicator::detail
