#include "replicator/torch/shard_gradients.h"

#include <string>
#include <utility>

#include "replicator/errors.h"
#include "replicator/torch/tensor_collectives.h"

namespace replicator::torch {
namespace {

void check_cpu(const ::torch::Tensor& t, const char* what) {
  if (!t.device().is_cpu()) {
    throw InvalidArgument(std::string("ShardGradients: a ") + what + " on " + t.device().str() +
                          "; shards take CPU tensors");
  }
}

// The floating tensors among `tensors`, which must share one dtype.
std::vector<::torch::Tensor> one_floating_dtype(const std::vector<::torch::Tensor>& tensors,
                                                const char* what) {
  std::vector<::torch::Tensor> kept;
  for (const auto& t : tensors) {
    check_cpu(t, what);
    if (!t.is_floating_point()) continue;
    if (!kept.empty() && t.scalar_type() != kept.front().scalar_type()) {
      throw InvalidArgument(std::string("ShardGradients: ") + what + "s of " +
                            c10::toString(kept.front().scalar_type()) + " and " +
                            c10::toString(t.scalar_type()) + "; shards take one dtype");
    }
    kept.push_back(t);
  }
  return kept;
}

std::vector<::torch::Tensor> trained(const std::vector<::torch::Tensor>& parameters) {
  std::vector<::torch::Tensor> with_grad;
  for (const auto& p : parameters) {
    if (p.requires_grad()) with_grad.push_back(p);
  }
  return one_floating_dtype(with_grad, "parameter");
}

std::size_t total_numel(const std::vector<::torch::Tensor>& tensors) {
  std::size_t n = 0;
  for (const auto& t : tensors) n += static_cast<std::size_t>(t.numel());
  return n;
}

::torch::ScalarType scalar_type_of(const std::vector<::torch::Tensor>& tensors) {
  return tensors.empty() ? ::torch::kFloat32 : tensors.front().scalar_type();
}

::torch::Tensor packed(const std::vector<::torch::Tensor>& tensors) {
  return ::torch::zeros({static_cast<std::int64_t>(total_numel(tensors))}, scalar_type_of(tensors));
}

ShardReduce reduce_for(ReplicaContext& ctx, int shards, const std::vector<::torch::Tensor>& t,
                       ReduceOp op) {
  return ShardReduce(ctx, shards, dtype_of(scalar_type_of(t)), total_numel(t), op);
}

// Calls f(i, tensors[i], its part of `flat`) for each tensor, in order.
template <typename F>
void for_each_part(const std::vector<::torch::Tensor>& tensors, const ::torch::Tensor& flat, F f) {
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::int64_t n = tensors[i].numel();
    f(i, tensors[i], flat.narrow(0, offset, n));
    offset += n;
  }
}

}  // namespace

ShardGradients::ShardGradients(ReplicaContext& ctx, std::vector<::torch::Tensor> parameters,
                               int shards, ShardGradientsOptions options)
    : parameters_(trained(parameters)),
      buffers_(std::move(options.buffers)),
      floating_(one_floating_dtype(buffers_, "buffer")),
      flat_(packed(parameters_)),
      flat_buffers_(packed(floating_)),
      timeout_(options.timeout),
      gradients_(reduce_for(ctx, shards, parameters_, options.op)),
      buffer_means_(reduce_for(ctx, shards, floating_, ReduceOp::kMean)) {}

void ShardGradients::begin_shard(int shard) {
  if (shard != gradients_.next_shard()) {
    throw InvalidArgument("ShardGradients::begin_shard(" + std::to_string(shard) +
                          "): the shard to begin is " + std::to_string(gradients_.next_shard()));
  }
  ::torch::NoGradGuard no_grad;
  if (shard == range().first) {
    step_start_.clear();
    for (const auto& b : buffers_) step_start_.push_back(b.clone());
    floating_start_.clear();
    for (const auto& b : floating_) floating_start_.push_back(b.clone());
  } else {
    for (std::size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(step_start_[i]);
  }
  begun_ = shard;
}

void ShardGradients::add_shard(int shard) {
  // A shard out of order is refused before any gradient is touched.
  if (shard != gradients_.next_shard()) gradients_.add(shard, buffer_of(flat_));
  if (!buffers_.empty() && begun_ != shard) {
    throw InvalidArgument("ShardGradients::add_shard(" + std::to_string(shard) +
                          "): begin_shard() did not begin it (with buffers, every shard "
                          "starts from the step's buffers)");
  }
  ::torch::NoGradGuard no_grad;
  for_each_part(parameters_, flat_,
                [](std::size_t, const ::torch::Tensor& p, ::torch::Tensor part) {
                  if (p.grad().defined()) {
                    part.copy_(p.grad().reshape({p.numel()}));
                    p.mutable_grad().zero_();
                  } else {
                    part.zero_();
                  }
                });
  gradients_.add(shard, buffer_of(flat_));
  if (floating_.empty()) return;
  // What this shard's forward changed each buffer by.
  for_each_part(
      floating_, flat_buffers_, [&](std::size_t i, const ::torch::Tensor& b, ::torch::Tensor part) {
        ::torch::sub_out(part, b.reshape({b.numel()}), floating_start_[i].reshape({b.numel()}));
      });
  buffer_means_.add(shard, buffer_of(flat_buffers_));
}

void ShardGradients::synchronize(CallSite where) {
  ::torch::NoGradGuard no_grad;
  gradients_.all_reduce(buffer_of(flat_), timeout_, where);
  for_each_part(parameters_, flat_,
                [](std::size_t, const ::torch::Tensor& p, const ::torch::Tensor& part) {
                  ::torch::Tensor& grad = p.mutable_grad();
                  if (grad.defined()) {
                    grad.copy_(part.view(p.sizes()));
                  } else {
                    grad = part.view(p.sizes()).clone(::torch::MemoryFormat::Contiguous);
                  }
                });
  begun_ = -1;
  if (floating_.empty()) return;
  buffer_means_.all_reduce(buffer_of(flat_buffers_), timeout_, where);
  // The step's start moved by the mean change (a buffer no shard changed keeps its bits).
  for_each_part(floating_, flat_buffers_,
                [&](std::size_t i, const ::torch::Tensor& b, const ::torch::Tensor& part) {
                  b.copy_(floating_start_[i] + part.view(b.sizes()));
                });
}

}  // namespace replicator::torch
