#include "examples/models/biggan.h"

namespace replicator::examples {
namespace {

namespace rt = replicator::torch;
namespace F = ::torch::nn::functional;

rt::SNConv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, bool bias = true) {
  return rt::SNConv2d(::torch::nn::Conv2dOptions(in, out, kernel).padding(kernel / 2).bias(bias));
}

::torch::Tensor upsample(const ::torch::Tensor& x) {
  return ::torch::upsample_nearest2d(x, {2 * x.size(2), 2 * x.size(3)});
}

::torch::Tensor downsample(const ::torch::Tensor& x) {
  return F::avg_pool2d(x, F::AvgPool2dFuncOptions(2));
}

}  // namespace

GeneratorBlockImpl::GeneratorBlockImpl(std::int64_t in, std::int64_t out, std::int64_t cond) {
  bn1_ =
      register_module("bn1", rt::ConditionalBatchNorm2d(rt::ConditionalBatchNormOptions(in, cond)));
  // Every output of G's blocks goes into a batch norm, which removes any bias: none.
  conv1_ = register_module("conv1", conv(in, out, 3, false));
  bn2_ = register_module("bn2",
                         rt::ConditionalBatchNorm2d(rt::ConditionalBatchNormOptions(out, cond)));
  conv2_ = register_module("conv2", conv(out, out, 3, false));
  shortcut_ = register_module("shortcut", conv(in, out, 1, false));
}

::torch::Tensor GeneratorBlockImpl::forward(const ::torch::Tensor& x, const ::torch::Tensor& cond) {
  ::torch::Tensor h = ::torch::relu(bn1_(x, cond));
  h = conv1_(upsample(h));
  h = conv2_(::torch::relu(bn2_(h, cond)));
  return h + shortcut_(upsample(x));
}

GeneratorImpl::GeneratorImpl(const BigGanOptions& options) : options_(options) {
  const std::int64_t w = options.width;
  const std::int64_t cond = options.z_chunk + options.embedding;
  shared_ = register_module("shared", ::torch::nn::Embedding(options.classes, options.embedding));
  linear_ = register_module(
      "linear",
      rt::SNLinear(::torch::nn::LinearOptions(options.z_chunk, 4 * w * 7 * 7).bias(false)));
  block1_ = register_module("block1", GeneratorBlock(4 * w, 2 * w, cond));
  block2_ = register_module("block2", GeneratorBlock(2 * w, w, cond));
  out_bn_ = register_module("out_bn", rt::CrossReplicaBatchNorm2d(w));
  out_conv_ = register_module("out_conv", conv(w, 1, 3));
}

::torch::Tensor GeneratorImpl::forward(const ::torch::Tensor& z, const ::torch::Tensor& labels) {
  const std::vector<::torch::Tensor> chunks = z.split(options_.z_chunk, 1);
  const ::torch::Tensor y = shared_(labels);
  ::torch::Tensor h = linear_(chunks[0]).view({z.size(0), 4 * options_.width, 7, 7});
  if (options_.channels_last) h = h.contiguous(::torch::MemoryFormat::ChannelsLast);
  h = block1_(h, ::torch::cat({chunks[1], y}, 1));
  h = block2_(h, ::torch::cat({chunks[2], y}, 1));
  return ::torch::tanh(out_conv_(::torch::relu(out_bn_(h))));
}

DiscriminatorBlockImpl::DiscriminatorBlockImpl(std::int64_t in, std::int64_t out, bool down,
                                               bool preactivation)
    : down_(down), preactivation_(preactivation) {
  conv1_ = register_module("conv1", conv(in, out, 3));
  conv2_ = register_module("conv2", conv(out, out, 3));
  if (in != out || down) shortcut_ = register_module("shortcut", conv(in, out, 1));
}

::torch::Tensor DiscriminatorBlockImpl::forward(const ::torch::Tensor& x) {
  ::torch::Tensor h = preactivation_ ? ::torch::relu(x) : x;
  h = conv2_(::torch::relu(conv1_(h)));
  if (down_) h = downsample(h);
  if (!shortcut_) return h + x;
  // Without pre-activation (the first block) pool first: the 1x1 convolution then runs on a
  // quarter of the pixels (BigGAN's "optimized" first block).
  if (down_ && !preactivation_) return h + shortcut_(downsample(x));
  const ::torch::Tensor s = shortcut_(x);
  return h + (down_ ? downsample(s) : s);
}

DiscriminatorImpl::DiscriminatorImpl(const BigGanOptions& options) {
  const std::int64_t w = options.width;
  block1_ = register_module("block1", DiscriminatorBlock(1, w, true, false));
  block2_ = register_module("block2", DiscriminatorBlock(w, 2 * w, true, true));
  block3_ = register_module("block3", DiscriminatorBlock(2 * w, 4 * w, false, true));
  head_ = register_module("head", rt::SNLinear(::torch::nn::LinearOptions(4 * w, 1)));
  embed_ = register_module("embed", rt::SNEmbedding(options.classes, 4 * w));
}

::torch::Tensor DiscriminatorImpl::forward(const ::torch::Tensor& images,
                                           const ::torch::Tensor& labels) {
  ::torch::Tensor h = block3_(block2_(block1_(images)));
  h = ::torch::relu(h).sum({2, 3});
  return head_(h).squeeze(1) + (embed_(labels) * h).sum(1);
}

void orthogonal_init(::torch::nn::Module& module) {
  const ::torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    if (p.value().dim() >= 2) {
      ::torch::nn::init::orthogonal_(p.value());
    } else if (p.key().ends_with("bias")) {
      p.value().zero_();
    }
  }
}

std::pair<::torch::Tensor, ::torch::Tensor> hinge_d_loss(const ::torch::Tensor& real_scores,
                                                         const ::torch::Tensor& fake_scores) {
  return {::torch::relu(1 - real_scores).mean(), ::torch::relu(1 + fake_scores).mean()};
}

::torch::Tensor hinge_g_loss(const ::torch::Tensor& fake_scores) { return -fake_scores.mean(); }

}  // namespace replicator::examples
