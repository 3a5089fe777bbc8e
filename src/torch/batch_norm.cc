// Training-mode cross-replica batch norm as a custom autograd function.
//
// Forward: each replica takes its per-channel mean m_r and biased variance v_r over its n_r
// values (one pass of shifted sums in double; LibTorch's var_mean off the fast path), and one
// all_reduce of
// [Σ n_r·m_r, Σ n_r·v_r, Σ n_r·m_r², Σ n_r] (3C+1 doubles) gives the global statistics:
// mean = Σ n_r·m_r / N and var = (Σ n_r·v_r + Σ n_r·m_r² − N·mean²) / N (the parallel
// variance formula: only the between-replica term is a difference, so no cancellation on
// data with a large mean). y = x·scale + offset per channel, from them.
// Backward, with x̂ = (x − mean)·invstd and N the global count:
//   dw = Σ_local dy·x̂,  db = Σ_local dy        (one pass; they stay local: the gradient
//                                                reducer combines parameter gradients)
//   dx = w·invstd·(dy − Σ_global dy / N − x̂·Σ_global dy·x̂ / N)
// with one all_reduce of [Σdy, Σdy·x̂] (2C doubles); dx is evaluated as dy·a + x·b + c
// with per-channel a, b, c (two passes over the activations in all).
// The passes are the loops of batch_norm_kernels.h, over contiguous or channels-last float32
// (the layout of the input is kept: the output and dx have it too); other dtypes and
// layouts go through LibTorch's operations.
#include "replicator/torch/batch_norm.h"

#include <torch/torch.h>

#include <string>

#include "replicator/errors.h"
#include "replicator/torch/tensor_collectives.h"
#include "src/torch/batch_norm_kernels.h"

namespace replicator::torch {
namespace {

using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

// Every dimension but the channel one (1).
std::vector<std::int64_t> reduce_dims(const ::torch::Tensor& x) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// [C] → broadcastable against x: [1, C, 1, ...].
::torch::Tensor per_channel(const ::torch::Tensor& v, const ::torch::Tensor& x) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

thread_local bool shard_local = false;  // a ShardLocalBatchNorm is alive on this thread

ReplicaContext* context_from(const ::torch::IValue& v) {
  return reinterpret_cast<ReplicaContext*>(static_cast<std::intptr_t>(v.toInt()));
}

void reduce_if_replicated(ReplicaContext* ctx, const ::torch::Tensor& sums) {
  if (ctx != nullptr && ctx->num_replicas() > 1) all_reduce(*ctx, sums);
}

// The fast loops (batch_norm_kernels.h) take float32 in host memory that is contiguous or, in
// 4 dimensions, contiguous in channels-last order; other inputs (CUDA tensors among them) go
// through LibTorch operations with the same arithmetic.
bool fast(const ::torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == ::torch::kFloat32 && t.numel() > 0 &&
         (t.is_contiguous() || t.is_contiguous(::torch::MemoryFormat::ChannelsLast));
}

// The order the loops walk a fast tensor in: LibTorch's contiguous order where the tensor
// has it (also when both orders are the same memory, as with one channel), else channels last.
::torch::MemoryFormat layout_of(const ::torch::Tensor& t) {
  return t.is_contiguous() ? ::torch::MemoryFormat::Contiguous
                           : ::torch::MemoryFormat::ChannelsLast;
}

detail::Shape shape_of(const ::torch::Tensor& x) {
  const std::int64_t n = x.size(0), c = x.size(1);
  return {n, c, x.numel() / (n * c), layout_of(x) == ::torch::MemoryFormat::ChannelsLast};
}

::torch::Tensor f64(const ::torch::Tensor& t) { return t.to(::torch::kFloat64); }

// This replica's per-channel count, mean and sum of squared deviations (M2), in f64.
struct Moments {
  double count = 0;
  ::torch::Tensor mean, m2;
};

Moments local_moments(const ::torch::Tensor& x) {
  const std::int64_t channels = x.size(1);
  Moments m;
  m.count = static_cast<double>(x.numel() / channels);
  if (m.count == 0) {
    m.mean = m.m2 = ::torch::zeros({channels}, x.options().dtype(::torch::kFloat64));
    return m;
  }
  if (fast(x)) {
    // Sums shifted by each channel's first value, so that a large mean does not cancel.
    const detail::Shape shape = shape_of(x);
    const ::torch::Tensor shift =
        x.view({shape.n, shape.c, shape.s}).select(0, 0).select(1, 0).contiguous();
    ::torch::Tensor sum = ::torch::empty({channels}, x.options().dtype(::torch::kFloat64));
    ::torch::Tensor sumsq = ::torch::empty_like(sum);
    detail::shifted_channel_sums(x.data_ptr<float>(), shape, shift.data_ptr<float>(),
                                 sum.data_ptr<double>(), sumsq.data_ptr<double>());
    m.mean = f64(shift) + sum / m.count;
    m.m2 = (sumsq - sum.square() / m.count).clamp_min(0);
  } else {
    const auto [var, mean] = ::torch::var_mean(x, reduce_dims(x), /*unbiased=*/false);
    m.mean = f64(mean);
    m.m2 = f64(var) * m.count;
  }
  return m;
}

struct Statistics {
  ::torch::Tensor mean;  // [C], f64
  ::torch::Tensor var;   // [C], f64, biased
  double count = 0;      // values per channel over all replicas
};

Statistics global_statistics(ReplicaContext* ctx, const ::torch::Tensor& x) {
  const std::int64_t channels = x.size(1);
  const Moments local = local_moments(x);
  ::torch::Tensor sums = ::torch::empty({3 * channels + 1}, local.mean.options());
  sums.narrow(0, 0, channels).copy_(local.mean * local.count);
  sums.narrow(0, channels, channels).copy_(local.m2);
  sums.narrow(0, 2 * channels, channels).copy_(local.mean.square() * local.count);
  sums[3 * channels].fill_(local.count);
  reduce_if_replicated(ctx, sums);
  Statistics s;
  s.count = sums[3 * channels].item<double>();
  if (s.count <= 1) {
    throw InvalidArgument(
        "CrossReplicaBatchNorm: training needs more than one value per "
        "channel over all replicas, got input of shape " +
        c10::str(x.sizes()));
  }
  s.mean = sums.narrow(0, 0, channels) / s.count;
  const ::torch::Tensor between =
      sums.narrow(0, 2 * channels, channels) - s.mean.square() * s.count;
  s.var = ((sums.narrow(0, channels, channels) + between) / s.count).clamp_min(0);
  return s;
}

class CrossReplicaBatchNormFunction
    : public ::torch::autograd::Function<CrossReplicaBatchNormFunction> {
 public:
  // `mean` and `var` are the global statistics in x's dtype; weight and bias are defined
  // (ones and zeros without affine: a custom function cannot take undefined tensors).
  static variable_list forward(AutogradContext* actx, ::torch::Tensor x, ::torch::Tensor weight,
                               ::torch::Tensor bias, ::torch::Tensor mean, ::torch::Tensor var,
                               double eps, double count, ReplicaContext* ctx) {
    const ::torch::Tensor invstd = (f64(var) + eps).rsqrt().to(x.scalar_type());
    ::torch::Tensor y;
    if (fast(x)) {
      const ::torch::Tensor scale = (f64(weight) * f64(invstd)).to(::torch::kFloat32);
      const ::torch::Tensor offset = (f64(bias) - f64(mean) * f64(scale)).to(::torch::kFloat32);
      y = ::torch::empty_like(x);
      detail::channel_affine(x.data_ptr<float>(), shape_of(x), scale.data_ptr<float>(),
                             offset.data_ptr<float>(), y.data_ptr<float>());
    } else {
      y = ::torch::batch_norm(x, weight, bias, mean, var, /*training=*/false, 0.0, eps,
                              /*cudnn_enabled=*/false);
    }
    actx->save_for_backward({x, weight, mean, invstd});
    actx->saved_data["count"] = count;
    actx->saved_data["ctx"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(ctx));
    return {y};
  }

  static variable_list backward(AutogradContext* actx, variable_list grads) {
    const variable_list saved = actx->get_saved_variables();
    const ::torch::Tensor& x = saved[0];
    const ::torch::Tensor& weight = saved[1];
    const ::torch::Tensor& mean = saved[2];
    const ::torch::Tensor& invstd = saved[3];
    const double count = actx->saved_data["count"].toDouble();
    ReplicaContext* ctx = context_from(actx->saved_data["ctx"]);
    const ::torch::Tensor dy =
        grads[0].contiguous(fast(x) ? layout_of(x) : ::torch::MemoryFormat::Contiguous);
    const std::int64_t channels = x.size(1);
    const bool use_loops = fast(x) && fast(dy) && layout_of(dy) == layout_of(x);

    // Local Σdy and Σdy·x̂ (one pass).
    ::torch::Tensor sums = ::torch::empty({2 * channels}, x.options().dtype(::torch::kFloat64));
    if (use_loops) {
      ::torch::Tensor centered = ::torch::empty({channels}, sums.options());
      detail::gradient_sums(dy.data_ptr<float>(), x.data_ptr<float>(), shape_of(x),
                            mean.data_ptr<float>(), sums.data_ptr<double>(),
                            centered.data_ptr<double>());
      sums.narrow(0, channels, channels).copy_(centered * f64(invstd));
    } else if (x.numel() > 0) {
      const auto [unused, local_dy_xhat, local_dy] = ::torch::native_batch_norm_backward(
          dy, x, weight, /*running_mean=*/{}, /*running_var=*/{}, mean, invstd, /*train=*/true,
          /*eps=*/0.0, {false, true, true});
      sums.narrow(0, 0, channels).copy_(local_dy);
      sums.narrow(0, channels, channels).copy_(local_dy_xhat);
    } else {
      sums.zero_();
    }
    const ::torch::Tensor grad_bias = sums.narrow(0, 0, channels).to(weight.scalar_type());
    const ::torch::Tensor grad_weight = sums.narrow(0, channels, channels).to(weight.scalar_type());
    reduce_if_replicated(ctx, sums);

    // dx = s·(dy − k1 − (x − mean)·invstd·k2) with s = w·invstd, i.e. dy·s + x·b + c.
    const ::torch::Tensor inv = f64(invstd);
    const ::torch::Tensor scale = inv * f64(weight);
    const ::torch::Tensor k1 = sums.narrow(0, 0, channels) / count;
    const ::torch::Tensor k2 = sums.narrow(0, channels, channels) / count;
    const ::torch::Tensor b = -scale * inv * k2;
    const ::torch::Tensor c = -scale * k1 - b * f64(mean);
    ::torch::Tensor dx;
    if (use_loops) {
      const ::torch::Tensor a32 = scale.to(::torch::kFloat32), b32 = b.to(::torch::kFloat32),
                            c32 = c.to(::torch::kFloat32);
      dx = ::torch::empty_like(x);
      detail::input_gradient(dy.data_ptr<float>(), x.data_ptr<float>(), shape_of(x),
                             a32.data_ptr<float>(), b32.data_ptr<float>(), c32.data_ptr<float>(),
                             dx.data_ptr<float>());
    } else {
      const auto as_x = [&](const ::torch::Tensor& v) {
        return per_channel(v.to(x.scalar_type()), x);
      };
      dx = ::torch::addcmul(as_x(c), dy, as_x(scale));
      dx.addcmul_(x, as_x(b));
    }
    return {dx, grad_weight, grad_bias, {}, {}, {}, {}, {}};
  }
};

}  // namespace

ShardLocalBatchNorm::ShardLocalBatchNorm() : previous_(shard_local) { shard_local = true; }
ShardLocalBatchNorm::~ShardLocalBatchNorm() { shard_local = previous_; }

namespace detail {

template <int Dims, typename Derived>
CrossReplicaBatchNormImplBase<Dims, Derived>::CrossReplicaBatchNormImplBase(
    const CrossReplicaBatchNormOptions& options_)
    : options(options_) {
  reset();
}

template <int Dims, typename Derived>
void CrossReplicaBatchNormImplBase<Dims, Derived>::reset() {
  if (options.num_features() <= 0) {
    throw InvalidArgument("CrossReplicaBatchNorm: num_features must be positive, got " +
                          std::to_string(options.num_features()));
  }
  const std::int64_t c = options.num_features();
  if (options.affine()) {
    weight = this->register_parameter("weight", ::torch::ones({c}));
    bias = this->register_parameter("bias", ::torch::zeros({c}));
  }
  if (options.track_running_stats()) {
    running_mean = this->register_buffer("running_mean", ::torch::zeros({c}));
    running_var = this->register_buffer("running_var", ::torch::ones({c}));
    num_batches_tracked =
        this->register_buffer("num_batches_tracked", ::torch::zeros({}, ::torch::kLong));
  }
}

template <int Dims, typename Derived>
void CrossReplicaBatchNormImplBase<Dims, Derived>::reset_running_stats() {
  if (!options.track_running_stats()) return;
  const ::torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

template <int Dims, typename Derived>
::torch::Tensor CrossReplicaBatchNormImplBase<Dims, Derived>::forward(const ::torch::Tensor& x) {
  const bool rank_ok = Dims == 1 ? (x.dim() == 2 || x.dim() == 3) : x.dim() == 4;
  if (!rank_ok || x.size(1) != options.num_features()) {
    throw InvalidArgument(
        std::string("CrossReplicaBatchNorm") + std::to_string(Dims) +
        "d: expected input of shape " + (Dims == 1 ? "[N, C] or [N, C, L]" : "[N, C, H, W]") +
        " with C = " + std::to_string(options.num_features()) + ", got " + c10::str(x.sizes()));
  }
  const bool use_running = !this->is_training() && options.track_running_stats();
  if (use_running) {
    return ::torch::batch_norm(x, weight, bias, running_mean, running_var,
                               /*training=*/false, 0.0, options.eps(), /*cudnn_enabled=*/false);
  }
  ReplicaContext* ctx = shard_local         ? nullptr
                        : options.context() ? options.context()
                                            : ReplicaContext::current();
  // Only where backward will run this function (autograd records it).
  const bool recorded = ::torch::GradMode::is_enabled() &&
                        (x.requires_grad() || (weight.defined() && weight.requires_grad()) ||
                         (bias.defined() && bias.requires_grad()));
  if (ctx != nullptr && ctx->num_replicas() > 1 && recorded) {
    require_own_backward_thread(*ctx, x.device(),
                                "CrossReplicaBatchNorm" + std::to_string(Dims) + "d");
  }
  const Statistics s = global_statistics(ctx, x);
  if (this->is_training() && options.track_running_stats()) {
    const ::torch::NoGradGuard no_grad;
    const double m = options.momentum();
    const ::torch::Tensor unbiased = s.var * (s.count / (s.count - 1));
    running_mean.mul_(1 - m).add_(s.mean.to(running_mean.scalar_type()), m);
    running_var.mul_(1 - m).add_(unbiased.to(running_var.scalar_type()), m);
    num_batches_tracked.add_(1);
  }
  // LibTorch 1.13's custom Function cannot take an undefined input (VariableInfo asks it
  // for its device): without affine parameters, pass weight 1 and bias 0, which need no
  // gradient.
  const ::torch::Tensor w = weight.defined() ? weight : ::torch::ones({x.size(1)}, x.options());
  const ::torch::Tensor b = bias.defined() ? bias : ::torch::zeros({x.size(1)}, x.options());
  return CrossReplicaBatchNormFunction::apply(x, w, b, s.mean.to(x.scalar_type()),
                                              s.var.to(x.scalar_type()), options.eps(), s.count,
                                              ctx)[0];
}

template class CrossReplicaBatchNormImplBase<1, CrossReplicaBatchNorm1dImpl>;
template class CrossReplicaBatchNormImplBase<2, CrossReplicaBatchNorm2dImpl>;

}  // namespace detail
}  // namespace replicator::torch
