#include "replicator/torch/tensor_collectives.h"

#include <torch/torch.h>

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "replicator/device.h"
#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/cpu_kernels.h"

namespace replicator::torch {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

// What a call compares across replicas beyond dtype and element count: every shape.
std::uint64_t shape_signature(const std::vector<::torch::Tensor>& tensors, std::uint64_t user) {
  std::uint64_t h = mix(user, tensors.size());
  for (const ::torch::Tensor& t : tensors) {
    h = mix(h, static_cast<std::uint64_t>(t.scalar_type()));
    h = mix(h, static_cast<std::uint64_t>(t.dim()));
    for (const std::int64_t d : t.sizes()) h = mix(h, static_cast<std::uint64_t>(d));
  }
  return h | 1;  // never 0, which means "no signature"
}

// Throws InvalidArgument naming `op` for an undefined tensor or one on a device replicator
// does not carry (device_of).
void require_placed(const ::torch::Tensor& t, const char* op) {
  if (!t.defined()) throw InvalidArgument(std::string(op) + ": the tensor is undefined");
  try {
    (void)device_of(t.device());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(op) + ": " + e.what());
  }
}

Buffer buffer_over(const ::torch::Tensor& contiguous) {
  return Buffer{contiguous.data_ptr(), static_cast<std::size_t>(contiguous.numel()),
                dtype_of(contiguous.scalar_type()), device_of(contiguous.device())};
}

// The tensors of an in-place call as contiguous buffers; non-contiguous ones go through a
// copy that `write_back` returns to the caller's tensor.
class Staged {
 public:
  Staged(const std::vector<::torch::Tensor>& tensors, const char* op) {
    buffers_.reserve(tensors.size());
    for (const ::torch::Tensor& t : tensors) {
      require_placed(t, op);
      if (t.is_contiguous()) {
        buffers_.push_back(buffer_over(t));
      } else {
        ::torch::Tensor copy = t.contiguous();
        buffers_.push_back(buffer_over(copy));
        copies_.emplace_back(t, std::move(copy));
      }
    }
  }
  std::span<const Buffer> buffers() const { return buffers_; }
  void write_back() {
    const ::torch::NoGradGuard no_grad;
    for (auto& [target, copy] : copies_) target.copy_(copy);
  }

 private:
  std::vector<Buffer> buffers_;
  std::vector<std::pair<::torch::Tensor, ::torch::Tensor>> copies_;
};

// Shape of [R, *shape] or of `shape` with dim 0 scaled.
std::vector<std::int64_t> sizes_of(const ::torch::Tensor& t) {
  return std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end());
}

std::int64_t rows_per_replica(const ::torch::Tensor& t, int replicas, const char* op) {
  if (t.dim() == 0 || t.size(0) % replicas != 0) {
    throw InvalidArgument(std::string(op) + ": dim 0 must be a multiple of num_replicas() = " +
                          std::to_string(replicas) + ", got shape " + c10::str(t.sizes()));
  }
  return t.size(0) / replicas;
}

}  // namespace

Device device_of(const c10::Device& device) {
  if (device.is_cpu()) return Device{};
  if (device.is_cuda()) {
    if (!built_with_cuda()) {
      throw InvalidArgument("a tensor on " + device.str() +
                            ": this build of replicator has no CUDA device path (it was built "
                            "without nvcc; REPLICATOR_WITH_CUDA)");
    }
    return Device{MemoryKind::kCuda,
                  static_cast<std::int16_t>(device.has_index() ? device.index() : 0)};
  }
  throw InvalidArgument("tensors must be on the CPU or a CUDA device, got one on " + device.str());
}

void require_own_backward_thread(const ReplicaContext& ctx, const c10::Device& device,
                                 std::string_view who) {
  if (!device.is_cuda() || ctx.num_local_replicas() == 1) return;
  const Device own = device_of(device);
  if (ctx.device() == own && ctx.replicas_on_device() == 1) return;
  const std::string where = ctx.device() == own
                                ? std::to_string(ctx.replicas_on_device()) +
                                      " replicas of this process share " + device.str()
                                : "replica " + std::to_string(ctx.replica_id()) + " is bound to " +
                                      to_string(ctx.device()) + ", not " + device.str() +
                                      ", and this process runs " +
                                      std::to_string(ctx.num_local_replicas()) + " replicas";
  throw InvalidArgument(std::string(who) + ": a tensor on " + device.str() + " while " + where +
                        ". Autograd runs the backward of every graph on one GPU on one thread, "
                        "where this collective would wait forever for a replica whose backward "
                        "waits for that thread. Give each replica of a process a GPU of its own "
                        "(Config::devices = \"cuda\" with a GPU per replica, tensors on "
                        "ctx.device()), or run one process per GPU");
}

DType dtype_of(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Double:
      return DType::kF64;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Byte:
      return DType::kU8;
    default:
      throw InvalidArgument(std::string("tensor dtype ") + c10::toString(type) +
                            " is not supported by replicator collectives (float32, float64, "
                            "bfloat16, float16, int32, int64, uint8 are)");
  }
}

void all_reduce(ReplicaContext& ctx, const ::torch::Tensor& tensor, const ReduceOptions& options,
                CallSite where) {
  all_reduce(ctx, std::vector<::torch::Tensor>{tensor}, options, where);
}

// Runs `collective(buffers, options)` in place over `tensors` (staged where not contiguous),
// with the shapes' signature in the options.
template <typename Options, typename Collective>
void in_place(const std::vector<::torch::Tensor>& tensors, const char* name, Options options,
              Collective&& collective) {
  Staged staged(tensors, name);
  options.signature = shape_signature(tensors, options.signature);
  collective(staged.buffers(), options);
  staged.write_back();
}

void all_reduce(ReplicaContext& ctx, const std::vector<::torch::Tensor>& tensors,
                const ReduceOptions& options, CallSite where) {
  in_place(tensors, "all_reduce", options,
           [&](std::span<const Buffer> b, const ReduceOptions& o) { ctx.all_reduce(b, o, where); });
}

void broadcast(ReplicaContext& ctx, const ::torch::Tensor& tensor, const BroadcastOptions& options,
               CallSite where) {
  broadcast(ctx, std::vector<::torch::Tensor>{tensor}, options, where);
}

void broadcast(ReplicaContext& ctx, const std::vector<::torch::Tensor>& tensors,
               const BroadcastOptions& options, CallSite where) {
  in_place(
      tensors, "broadcast", options,
      [&](std::span<const Buffer> b, const BroadcastOptions& o) { ctx.broadcast(b, o, where); });
}

// A fresh contiguous tensor of `shape` (in's dtype) that `collective(input, output, options)`
// fills from `in`; options carry the shape signature.
template <typename Options, typename Collective>
::torch::Tensor into_new(const ::torch::Tensor& in, const std::vector<std::int64_t>& shape,
                         Options options, Collective&& collective) {
  ::torch::Tensor out = ::torch::empty(shape, in.options());
  options.signature = shape_signature({in}, options.signature);
  collective(buffer_over(in), buffer_over(out), options);
  return out;
}

::torch::Tensor all_gather(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                           const CollectiveOptions& options, CallSite where) {
  require_placed(tensor, "all_gather");
  const ::torch::Tensor in = tensor.contiguous();
  std::vector<std::int64_t> shape = sizes_of(in);
  shape.insert(shape.begin(), ctx.num_replicas());
  return into_new(in, shape, options, [&](Buffer i, Buffer o, const CollectiveOptions& opt) {
    ctx.all_gather(i, o, opt, where);
  });
}

::torch::Tensor reduce_scatter(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                               const ReduceOptions& options, CallSite where) {
  require_placed(tensor, "reduce_scatter");
  const std::int64_t rows = rows_per_replica(tensor, ctx.num_replicas(), "reduce_scatter");
  const ::torch::Tensor in = tensor.contiguous();
  std::vector<std::int64_t> shape = sizes_of(in);
  shape[0] = rows;
  return into_new(in, shape, options, [&](Buffer i, Buffer o, const ReduceOptions& opt) {
    ctx.reduce_scatter(i, o, opt, where);
  });
}

::torch::Tensor all_to_all(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                           const CollectiveOptions& options, CallSite where) {
  require_placed(tensor, "all_to_all");
  rows_per_replica(tensor, ctx.num_replicas(), "all_to_all");
  const ::torch::Tensor in = tensor.contiguous();
  return into_new(in, sizes_of(in), options, [&](Buffer i, Buffer o, const CollectiveOptions& opt) {
    ctx.all_to_all(i, o, opt, where);
  });
}

Buffer buffer_of(const ::torch::Tensor& contiguous) {
  require_placed(contiguous, "buffer_of");
  if (!contiguous.is_contiguous()) {
    throw InvalidArgument("buffer_of: the tensor of shape " + c10::str(contiguous.sizes()) +
                          " is not contiguous");
  }
  return buffer_over(contiguous);
}

void broadcast_parameters(ReplicaContext& ctx, ::torch::nn::Module& module,
                          const BroadcastOptions& options, CallSite where) {
  std::vector<::torch::Tensor> tensors = module.parameters(/*recurse=*/true);
  for (const ::torch::Tensor& b : module.buffers(/*recurse=*/true)) tensors.push_back(b);
  broadcast(ctx, tensors, options, where);
}

namespace {

// Every program that uses the torch layer's collectives gets its replica threads' kernels
// prepared (cpu_kernels.h).
[[maybe_unused]] const bool kRegistered =
    (detail::on_first_replica_threads(prepare_cpu_kernels), true);

}  // namespace

}  // namespace replicator::torch
