#include "replicator/torch/spectral_norm.h"

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <variant>

#include "replicator/errors.h"

namespace replicator::torch {
namespace {

namespace F = ::torch::nn::functional;

::torch::Tensor as_matrix(const ::torch::Tensor& weight) {
  return weight.reshape({weight.size(0), -1});
}

::torch::Tensor unit(const ::torch::Tensor& x, double eps) { return x / x.norm().clamp_min(eps); }

// LibTorch's default initialization of Linear and Conv2d: kaiming_uniform(a = √5) for the
// weight, uniform(±1/√fan_in) for the bias.
void default_init(::torch::Tensor& weight, ::torch::Tensor& bias) {
  const ::torch::NoGradGuard no_grad;
  ::torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in = static_cast<double>(as_matrix(weight).size(1));
    const double bound = 1.0 / std::sqrt(fan_in);
    ::torch::nn::init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

SpectralNormState SpectralNormState::for_weight(const ::torch::Tensor& weight) {
  if (weight.dim() < 2) {
    throw InvalidArgument("spectral norm needs a weight of at least 2 dimensions, got " +
                          std::to_string(weight.dim()));
  }
  const ::torch::Tensor w = as_matrix(weight);
  const auto options = ::torch::TensorOptions().dtype(weight.dtype());
  return {unit(::torch::randn({w.size(0)}, options), 1e-12),
          unit(::torch::randn({w.size(1)}, options), 1e-12)};
}

::torch::Tensor SpectralNormState::normalize(const ::torch::Tensor& weight, bool update,
                                             const SpectralNormOptions& options) const {
  const ::torch::Tensor w = as_matrix(weight);
  if (w.size(0) != u.numel() || w.size(1) != v.numel()) {
    throw InvalidArgument("spectral norm: a weight of shape " + std::to_string(w.size(0)) + "x" +
                          std::to_string(w.size(1)) + " does not fit u [" +
                          std::to_string(u.numel()) + "] and v [" + std::to_string(v.numel()) +
                          "]");
  }
  if (update) {
    if (options.power_iterations() < 1) {
      throw InvalidArgument("spectral norm needs at least 1 power iteration, got " +
                            std::to_string(options.power_iterations()));
    }
    const ::torch::NoGradGuard no_grad;
    const ::torch::Tensor wd = w.detach();
    for (int i = 0; i < options.power_iterations(); ++i) {
      v.copy_(unit(::torch::mv(wd.t(), u), options.eps()));
      u.copy_(unit(::torch::mv(wd, v), options.eps()));
    }
  }
  // u and v are updated in place by the next training forward (D sees real and fake
  // batches in one graph): σ's graph keeps copies.
  const ::torch::Tensor sigma = ::torch::dot(u.clone(), ::torch::mv(w, v.clone()));
  return weight / sigma;
}

double SpectralNormState::sigma(const ::torch::Tensor& weight) const {
  const ::torch::NoGradGuard no_grad;
  return ::torch::dot(u, ::torch::mv(as_matrix(weight), v)).item<double>();
}

// ---- SNLinear ---------------------------------------------------------------------------

SNLinearImpl::SNLinearImpl(const ::torch::nn::LinearOptions& options_,
                           const SpectralNormOptions& sn)
    : options(options_), sn_options(sn) {
  reset();
}

void SNLinearImpl::reset() {
  weight =
      register_parameter("weight", ::torch::empty({options.out_features(), options.in_features()}));
  bias = register_parameter(
      "bias", options.bias() ? ::torch::empty({options.out_features()}) : ::torch::Tensor(),
      /*requires_grad=*/options.bias());
  default_init(weight, bias);
  state = SpectralNormState::for_weight(weight);
  state.u = register_buffer("u", state.u);
  state.v = register_buffer("v", state.v);
}

::torch::Tensor SNLinearImpl::forward(const ::torch::Tensor& input) {
  return F::linear(input, state.normalize(weight, is_training(), sn_options), bias);
}

::torch::Tensor SNLinearImpl::normalized_weight() const {
  return state.normalize(weight, false, sn_options);
}

// ---- SNConv2d ---------------------------------------------------------------------------

SNConv2dImpl::SNConv2dImpl(const ::torch::nn::Conv2dOptions& options_,
                           const SpectralNormOptions& sn)
    : options(options_), sn_options(sn) {
  if (options.groups() != 1 ||
      !std::holds_alternative<::torch::enumtype::kZeros>(options.padding_mode())) {
    throw InvalidArgument("SNConv2d supports groups 1 and zero padding only");
  }
  reset();
}

void SNConv2dImpl::reset() {
  const auto& k = options.kernel_size();
  weight = register_parameter(
      "weight",
      ::torch::empty({options.out_channels(), options.in_channels(), k->at(0), k->at(1)}));
  bias = register_parameter(
      "bias", options.bias() ? ::torch::empty({options.out_channels()}) : ::torch::Tensor(),
      /*requires_grad=*/options.bias());
  default_init(weight, bias);
  state = SpectralNormState::for_weight(weight);
  state.u = register_buffer("u", state.u);
  state.v = register_buffer("v", state.v);
}

::torch::Tensor SNConv2dImpl::forward(const ::torch::Tensor& input) {
  const auto* padding = std::get_if<::torch::ExpandingArray<2>>(&options.padding());
  if (padding == nullptr) throw InvalidArgument("SNConv2d needs an explicit padding");
  return ::torch::conv2d(input, state.normalize(weight, is_training(), sn_options), bias,
                         *options.stride(), **padding, *options.dilation());
}

::torch::Tensor SNConv2dImpl::normalized_weight() const {
  return state.normalize(weight, false, sn_options);
}

// ---- SNEmbedding ------------------------------------------------------------------------

SNEmbeddingImpl::SNEmbeddingImpl(std::int64_t count_, std::int64_t dim_,
                                 const SpectralNormOptions& sn)
    : count(count_), dim(dim_), sn_options(sn) {
  reset();
}

void SNEmbeddingImpl::reset() {
  weight = register_parameter("weight", ::torch::randn({count, dim}));
  state = SpectralNormState::for_weight(weight);
  state.u = register_buffer("u", state.u);
  state.v = register_buffer("v", state.v);
}

::torch::Tensor SNEmbeddingImpl::forward(const ::torch::Tensor& indices) {
  return F::embedding(indices, state.normalize(weight, is_training(), sn_options));
}

}  // namespace replicator::torch
