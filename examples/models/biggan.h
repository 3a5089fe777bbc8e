// The networks of the GAN job (`replicator train gan`, apps/train/gan.h): a BigGAN-style
// class-conditional generator and projection discriminator sized for 28x28 grey images
// (Fashion-MNIST), after Brock et al. 2019 with their ingredients at a small scale:
//   - spectral norm on every convolution and linear layer of both networks (and on D's class
//     embedding), orthogonal initialization; no bias in G's layers whose output goes into a
//     batch norm (it would remove it; its gradient is rounding noise, which Adam would
//     amplify into steps of the learning rate's size);
//   - G: hierarchical z (z split into one chunk for the first linear layer and one per
//     block), a class embedding shared by every block, and in each residual up-block
//     class-conditional cross-replica batch norm whose gain and bias are projected from
//     [its z chunk, the shared embedding];
//   - D: residual down-blocks, then the projection head: linear(h) + <embed(y), h>.
//
//   G: z0 → SNLinear(zc → 4w·7·7) → [4w,7,7] → up-block(4w→2w) 14x14 → up-block(2w→w) 28x28
//      → cross-replica BN → ReLU → SNConv3x3(w→1) → tanh
//   up-block(in, out, cond): ReLU(CBN(x)) → ×2 nearest → conv3x3 → ReLU(CBN) → conv3x3,
//      plus conv1x1(×2 nearest(x))
//   D: down-block(1→w, 28→14, no pre-activation) → down-block(w→2w, 14→7) →
//      block(2w→4w, 7x7) → ReLU → sum over pixels → [4w] → projection head
//   down-block(in, out): [ReLU] → conv3x3 → ReLU → conv3x3 → avg-pool 2, plus a 1x1 shortcut
//
// bench/ddp_gan.py holds the same networks in PyTorch. Every training-mode forward of G
// runs collectives (its batch norms) and must run on every replica; D has no batch norm
// and never communicates. The hinge losses are here too.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "replicator/torch/batch_norm.h"
#include "replicator/torch/conditional_batch_norm.h"
#include "replicator/torch/memory_format.h"
#include "replicator/torch/spectral_norm.h"

namespace replicator::examples {

struct BigGanOptions {
  std::int64_t width = 32;      // w: channels of the 28x28 blocks (7x7 ones have 4w)
  std::int64_t z_chunk = 32;    // zc: z has 3 chunks of it (one per block + the first layer)
  std::int64_t embedding = 64;  // the shared class embedding of G
  std::int64_t classes = 10;
  // Activations (and, through to_memory_format, weights) laid out channels last: the same
  // values, faster convolutions on CPU.
  bool channels_last = true;
  std::int64_t z_dim() const { return 3 * z_chunk; }
};

// The layout of the networks' 4-dimensional weights and activations under `options`.
inline c10::MemoryFormat memory_format(const BigGanOptions& options) {
  return replicator::torch::memory_format_of(options.channels_last);
}

class GeneratorBlockImpl : public ::torch::nn::Module {
 public:
  GeneratorBlockImpl(std::int64_t in, std::int64_t out, std::int64_t cond);
  ::torch::Tensor forward(const ::torch::Tensor& x, const ::torch::Tensor& cond);

 private:
  replicator::torch::ConditionalBatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  replicator::torch::SNConv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
};
class GeneratorBlock : public ::torch::nn::ModuleHolder<GeneratorBlockImpl> {
 public:
  using ::torch::nn::ModuleHolder<GeneratorBlockImpl>::ModuleHolder;
};

class GeneratorImpl : public ::torch::nn::Module {
 public:
  explicit GeneratorImpl(const BigGanOptions& options = {});
  // z [N, z_dim], labels int64 [N] → images [N, 1, 28, 28] in [-1, 1].
  ::torch::Tensor forward(const ::torch::Tensor& z, const ::torch::Tensor& labels);
  const BigGanOptions& options() const { return options_; }

 private:
  BigGanOptions options_;
  ::torch::nn::Embedding shared_{nullptr};
  replicator::torch::SNLinear linear_{nullptr};
  GeneratorBlock block1_{nullptr}, block2_{nullptr};
  replicator::torch::CrossReplicaBatchNorm2d out_bn_{nullptr};
  replicator::torch::SNConv2d out_conv_{nullptr};
};
class Generator : public ::torch::nn::ModuleHolder<GeneratorImpl> {
 public:
  using ::torch::nn::ModuleHolder<GeneratorImpl>::ModuleHolder;
};

class DiscriminatorBlockImpl : public ::torch::nn::Module {
 public:
  DiscriminatorBlockImpl(std::int64_t in, std::int64_t out, bool down, bool preactivation);
  ::torch::Tensor forward(const ::torch::Tensor& x);

 private:
  bool down_, preactivation_;
  replicator::torch::SNConv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
};
class DiscriminatorBlock : public ::torch::nn::ModuleHolder<DiscriminatorBlockImpl> {
 public:
  using ::torch::nn::ModuleHolder<DiscriminatorBlockImpl>::ModuleHolder;
};

class DiscriminatorImpl : public ::torch::nn::Module {
 public:
  explicit DiscriminatorImpl(const BigGanOptions& options = {});
  // images [N, 1, 28, 28], labels int64 [N] → scores [N].
  ::torch::Tensor forward(const ::torch::Tensor& images, const ::torch::Tensor& labels);

 private:
  DiscriminatorBlock block1_{nullptr}, block2_{nullptr}, block3_{nullptr};
  replicator::torch::SNLinear head_{nullptr};
  replicator::torch::SNEmbedding embed_{nullptr};
};
class Discriminator : public ::torch::nn::ModuleHolder<DiscriminatorImpl> {
 public:
  using ::torch::nn::ModuleHolder<DiscriminatorImpl>::ModuleHolder;
};

// Orthogonal initialization of every weight of `module` with at least 2 dimensions (and
// of embeddings), zero biases, as BigGAN does. Draws from LibTorch's default generator.
void orthogonal_init(::torch::nn::Module& module);

// Hinge losses, each the mean over the batch:
//   D: mean(relu(1 − D(real))) + mean(relu(1 + D(fake)))     G: −mean(D(fake))
// The two terms of D's loss are returned apart (real, fake).
std::pair<::torch::Tensor, ::torch::Tensor> hinge_d_loss(const ::torch::Tensor& real_scores,
                                                         const ::torch::Tensor& fake_scores);
::torch::Tensor hinge_g_loss(const ::torch::Tensor& fake_scores);

}  // namespace replicator::examples
