// Spectral normalization (Miyato et al. 2018), as BigGAN uses it in both networks: a layer's
// weight W, viewed as a matrix [out, in·k·k], is divided by an estimate of its largest
// singular value σ. σ = uᵀ W v comes from power iteration on vectors u [out] and v [in·k·k]
// kept as buffers (named "u" and "v"): each forward in training mode first takes
// `power_iterations` steps (v ← normalize(Wᵀu), u ← normalize(W v)) without gradient, then
// differentiates σ through W only. In eval mode u and v are used as they are.
//
// Replicas stay bitwise equal: u and v change only as a function of W, so replicas that
// start from the same buffers (broadcast_parameters) and the same W keep the same u and v.
//
// SNLinear, SNConv2d and SNEmbedding are LibTorch's Linear, Conv2d (zero padding, groups 1)
// and Embedding with a spectrally normalized weight; their parameters are named "weight"
// (the raw W) and "bias", so a checkpoint holds W, u and v. None of them communicates or
// blocks; forward throws what LibTorch's functional call throws for an input of the wrong
// shape.
#pragma once

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/options/conv.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

namespace replicator::torch {

struct SpectralNormOptions {
  TORCH_ARG(int, power_iterations) = 1;  // per training forward, >= 1
  TORCH_ARG(double, eps) = 1e-12;        // guards the normalizations of u and v
};

// The state of one normalized weight: u and v (registered as buffers by the owning module).
struct SpectralNormState {
  ::torch::Tensor u, v;

  // u, v for a weight of `weight`'s shape: unit vectors drawn from LibTorch's default CPU
  // generator (so a seeded model is reproducible).
  static SpectralNormState for_weight(const ::torch::Tensor& weight);

  // W / σ. In training mode (`update`) first advances u and v in place by the options'
  // power iterations. Throws InvalidArgument for a weight with fewer than 2 dimensions or
  // whose shape does not fit u and v.
  ::torch::Tensor normalize(const ::torch::Tensor& weight, bool update,
                            const SpectralNormOptions& options) const;

  // σ = uᵀ W v of the current u and v, without gradient (for logging and tests).
  double sigma(const ::torch::Tensor& weight) const;
};

class SNLinearImpl : public ::torch::nn::Cloneable<SNLinearImpl> {
 public:
  explicit SNLinearImpl(const ::torch::nn::LinearOptions& options,
                        const SpectralNormOptions& sn = {});
  void reset() override;
  ::torch::Tensor forward(const ::torch::Tensor& input);
  // The weight as the last forward used it: W / σ.
  ::torch::Tensor normalized_weight() const;

  ::torch::nn::LinearOptions options;
  SpectralNormOptions sn_options;
  ::torch::Tensor weight, bias;
  SpectralNormState state;
};
class SNLinear : public ::torch::nn::ModuleHolder<SNLinearImpl> {
 public:
  using ::torch::nn::ModuleHolder<SNLinearImpl>::ModuleHolder;
  using Impl = SNLinearImpl;
};

class SNConv2dImpl : public ::torch::nn::Cloneable<SNConv2dImpl> {
 public:
  // Only zero padding and groups 1 (what BigGAN uses); throws InvalidArgument otherwise.
  explicit SNConv2dImpl(const ::torch::nn::Conv2dOptions& options,
                        const SpectralNormOptions& sn = {});
  void reset() override;
  ::torch::Tensor forward(const ::torch::Tensor& input);
  ::torch::Tensor normalized_weight() const;

  ::torch::nn::Conv2dOptions options;
  SpectralNormOptions sn_options;
  ::torch::Tensor weight, bias;
  SpectralNormState state;
};
class SNConv2d : public ::torch::nn::ModuleHolder<SNConv2dImpl> {
 public:
  using ::torch::nn::ModuleHolder<SNConv2dImpl>::ModuleHolder;
  using Impl = SNConv2dImpl;
};

// An embedding table [count, dim] normalized as a matrix (the projection discriminator's
// class embedding).
class SNEmbeddingImpl : public ::torch::nn::Cloneable<SNEmbeddingImpl> {
 public:
  SNEmbeddingImpl(std::int64_t count, std::int64_t dim, const SpectralNormOptions& sn = {});
  void reset() override;
  // int64 indices of any shape → [..., dim].
  ::torch::Tensor forward(const ::torch::Tensor& indices);

  std::int64_t count, dim;
  SpectralNormOptions sn_options;
  ::torch::Tensor weight;
  SpectralNormState state;
};
class SNEmbedding : public ::torch::nn::ModuleHolder<SNEmbeddingImpl> {
 public:
  using ::torch::nn::ModuleHolder<SNEmbeddingImpl>::ModuleHolder;
  using Impl = SNEmbeddingImpl;
};

}  // namespace replicator::torch
