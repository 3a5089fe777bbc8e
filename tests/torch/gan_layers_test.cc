// Tests of the layers a BigGAN-style GAN needs (replicator/torch/spectral_norm.h,
// conditional_batch_norm.h, ema.h, memory_format.h) and of checkpoints with several
// optimizers.
//
// The conditional batch norm's headline property is cross-replica batch norm's: R replicas,
// each holding its rows of a global batch, compute what one layer computes on the whole
// batch: outputs, input and conditioning gradients row by row, parameter gradients once
// summed over replicas (each replica's loss is a SUM over its rows), running statistics.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/conditional_batch_norm.h"
#include "replicator/torch/ema.h"
#include "replicator/torch/memory_format.h"
#include "replicator/torch/spectral_norm.h"
#include "replicator/torch/tensor_collectives.h"
#include "tests/torch/close.h"

namespace {

namespace rt = replicator::torch;
using replicator::Config;
using replicator::InvalidArgument;
using replicator::ReplicaContext;
using replicator::Replicator;
using replicator::testing::close;

double largest_singular_value(const torch::Tensor& w) {
  return at::linalg_svdvals(w.reshape({w.size(0), -1}).to(torch::kFloat64)).max().item<double>();
}

// ---- spectral norm ----------------------------------------------------------------------

TEST(SpectralNorm, SigmaConvergesToTheLargestSingularValue) {
  torch::manual_seed(7);
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{5, 3}, {3, 8}, {6, 2, 3, 3}}) {
    const torch::Tensor w = torch::randn(shape);
    rt::SpectralNormState state = rt::SpectralNormState::for_weight(w);
    for (int i = 0; i < 200; ++i) state.normalize(w, true, {});
    const double expected = largest_singular_value(w);
    EXPECT_NEAR(state.sigma(w), expected, 1e-4 * expected) << w.sizes();
    // The normalized weight's largest singular value is then 1.
    EXPECT_NEAR(largest_singular_value(state.normalize(w, false, {})), 1.0, 1e-4) << w.sizes();
  }
}

TEST(SpectralNorm, TrainingForwardTakesOnePowerIterationEvalNone) {
  torch::manual_seed(3);
  rt::SNLinear layer(torch::nn::LinearOptions(4, 6));
  const torch::Tensor u0 = layer->state.u.clone();
  layer->eval();
  layer(torch::randn({2, 4}));
  EXPECT_TRUE(torch::equal(layer->state.u, u0)) << "eval leaves u as it is";
  layer->train();
  layer(torch::randn({2, 4}));
  // One step by hand from u0.
  const torch::Tensor w = layer->weight.detach();
  const torch::Tensor v = torch::mv(w.t(), u0) / torch::mv(w.t(), u0).norm();
  const torch::Tensor u = torch::mv(w, v) / torch::mv(w, v).norm();
  EXPECT_TRUE(close(layer->state.v, v));
  EXPECT_TRUE(close(layer->state.u, u));
}

TEST(SpectralNorm, GradientFlowsThroughSigmaAndTwoForwardsInOneGraph) {
  torch::manual_seed(5);
  rt::SNConv2d conv(torch::nn::Conv2dOptions(2, 3, 3).padding(1));
  const torch::Tensor a = torch::randn({2, 2, 5, 5});
  const torch::Tensor b = torch::randn({2, 2, 5, 5});
  // As a discriminator sees real and fake batches in one loss: each forward advances u, v.
  const torch::Tensor ya = conv(a);
  const torch::Tensor u1 = conv->state.u.clone(), v1 = conv->state.v.clone();
  const torch::Tensor yb = conv(b);
  const torch::Tensor u2 = conv->state.u.clone(), v2 = conv->state.v.clone();
  (ya.sum() + yb.square().sum()).backward();
  ASSERT_TRUE(conv->weight.grad().defined());

  // By hand: W / (uₖᵀ W vₖ) with the vectors each forward used, differentiated through W.
  const torch::Tensor w = conv->weight.detach().clone().requires_grad_();
  const auto sigma = [&](const torch::Tensor& u, const torch::Tensor& v) {
    return torch::dot(u, torch::mv(w.reshape({3, -1}), v));
  };
  const auto conv_with = [&](const torch::Tensor& x, const torch::Tensor& weight) {
    return torch::conv2d(x, weight, conv->bias.detach(), 1, 1);
  };
  (conv_with(a, w / sigma(u1, v1)).sum() + conv_with(b, w / sigma(u2, v2)).square().sum())
      .backward();
  EXPECT_TRUE(close(conv->weight.grad(), w.grad()));
  EXPECT_FALSE(conv->state.u.requires_grad());
}

TEST(SpectralNorm, NormalizedWeightMatchesTheForward) {
  torch::manual_seed(9);
  rt::SNLinear layer(torch::nn::LinearOptions(3, 4));
  layer->eval();
  const torch::Tensor x = torch::randn({5, 3});
  const torch::Tensor expected =
      torch::nn::functional::linear(x, layer->normalized_weight(), layer->bias);
  EXPECT_TRUE(close(layer(x), expected));
  rt::SNEmbedding embedding(10, 4);
  embedding->eval();
  const torch::Tensor rows = embedding(torch::tensor({3, 7}, torch::kLong));
  const torch::Tensor w = embedding->weight / embedding->state.sigma(embedding->weight);
  EXPECT_TRUE(close(rows, w.index_select(0, torch::tensor({3, 7}, torch::kLong))));
}

TEST(SpectralNorm, RejectsWhatItDoesNotSupport) {
  EXPECT_THROW(rt::SpectralNormState::for_weight(torch::randn({4})), InvalidArgument);
  EXPECT_THROW(
      rt::SNConv2d(torch::nn::Conv2dOptions(1, 1, 3).groups(1).padding_mode(torch::kReflect)),
      InvalidArgument);
  rt::SpectralNormState state = rt::SpectralNormState::for_weight(torch::randn({3, 4}));
  EXPECT_THROW(state.normalize(torch::randn({4, 4}), true, {}), InvalidArgument);
  EXPECT_THROW(
      state.normalize(torch::randn({3, 4}), true, rt::SpectralNormOptions().power_iterations(0)),
      InvalidArgument);
}

// ---- conditional cross-replica batch norm ----------------------------------------------

struct CbnStep {
  torch::Tensor y, dx, dcond, dgain, dbias, running_mean, running_var;
};

// One training step on `input` rows with loss Σ y·g.
CbnStep cbn_step(rt::ConditionalBatchNorm2d& bn, const torch::Tensor& input,
                 const torch::Tensor& cond, const torch::Tensor& g) {
  bn->zero_grad();
  const torch::Tensor x = input.clone().requires_grad_();
  const torch::Tensor c = cond.clone().requires_grad_();
  const torch::Tensor y = bn(x, c);
  (y * g).sum().backward();
  return {y.detach(),
          x.grad(),
          c.grad(),
          bn->gain->weight.grad().clone(),
          bn->bias->weight.grad().clone(),
          bn->bn->running_mean.clone(),
          bn->bn->running_var.clone()};
}

void expect_cbn_replicas_match_one(int replicas) {
  constexpr int kSteps = 3;
  constexpr std::int64_t kBatch = 8, kChannels = 3, kCond = 5;
  torch::manual_seed(11);
  std::vector<torch::Tensor> inputs, conds, grads;
  for (int s = 0; s < kSteps; ++s) {
    inputs.push_back(torch::randn({kBatch, kChannels, 4, 4}) * 3 + 2);
    conds.push_back(torch::randn({kBatch, kCond}));
    grads.push_back(torch::randn({kBatch, kChannels, 4, 4}));
  }
  const auto make = [&] {
    torch::manual_seed(21);
    return rt::ConditionalBatchNorm2d(rt::ConditionalBatchNormOptions(kChannels, kCond));
  };
  rt::ConditionalBatchNorm2d single = make();
  std::vector<CbnStep> expected;
  for (int s = 0; s < kSteps; ++s)
    expected.push_back(cbn_step(single, inputs[s], conds[s], grads[s]));

  std::vector<rt::ConditionalBatchNorm2d> layers;
  for (int r = 0; r < replicas; ++r) layers.push_back(make());
  Replicator repl(Config{.local_replicas = replicas});
  const std::int64_t rows = kBatch / replicas;
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE(::testing::Message() << replicas << " replicas, step " << s);
    const auto got = repl.run([&](ReplicaContext& ctx) {
      const std::int64_t begin = ctx.replica_id() * rows;
      return cbn_step(layers[ctx.replica_id()], inputs[s].slice(0, begin, begin + rows),
                      conds[s].slice(0, begin, begin + rows),
                      grads[s].slice(0, begin, begin + rows));
    });
    std::vector<torch::Tensor> ys, dxs, dconds;
    torch::Tensor dgain = torch::zeros_like(expected[s].dgain);
    torch::Tensor dbias = torch::zeros_like(expected[s].dbias);
    for (int r = 0; r < replicas; ++r) {
      ys.push_back(got[r].y);
      dxs.push_back(got[r].dx);
      dconds.push_back(got[r].dcond);
      dgain += got[r].dgain;
      dbias += got[r].dbias;
      EXPECT_TRUE(close(got[r].running_mean, expected[s].running_mean)) << "replica " << r;
      EXPECT_TRUE(close(got[r].running_var, expected[s].running_var)) << "replica " << r;
    }
    EXPECT_TRUE(close(torch::cat(ys), expected[s].y)) << "outputs";
    EXPECT_TRUE(close(torch::cat(dxs), expected[s].dx)) << "input gradients";
    EXPECT_TRUE(close(torch::cat(dconds), expected[s].dcond)) << "conditioning gradients";
    EXPECT_TRUE(close(dgain, expected[s].dgain)) << "gain projection gradient";
    EXPECT_TRUE(close(dbias, expected[s].dbias)) << "bias projection gradient";
  }
}

TEST(ConditionalBatchNorm, TwoReplicasMatchOneOnTheGlobalBatch) {
  expect_cbn_replicas_match_one(2);
}

TEST(ConditionalBatchNorm, FourReplicasMatchOneOnTheGlobalBatch) {
  expect_cbn_replicas_match_one(4);
}

TEST(ConditionalBatchNorm, PerExampleGainAndBias) {
  torch::manual_seed(2);
  rt::ConditionalBatchNorm2d bn(rt::ConditionalBatchNormOptions(2, 3));
  bn->eval();  // running stats: mean 0, var 1, so x̂ = x / √(1 + eps)
  const torch::Tensor x = torch::randn({4, 2, 3, 3});
  const torch::Tensor cond = torch::randn({4, 3});
  const torch::Tensor gain = bn->gain(cond).view({4, 2, 1, 1});
  const torch::Tensor bias = bn->bias(cond).view({4, 2, 1, 1});
  EXPECT_TRUE(close(bn(x, cond), x / std::sqrt(1 + 1e-5) * (1 + gain) + bias));
  EXPECT_THROW(bn(x, torch::randn({4, 2})), InvalidArgument);
  EXPECT_THROW(bn(x.view({4, 2, 9}), cond), InvalidArgument);
}

// ---- EMA and standing statistics -------------------------------------------------------

TEST(ModuleEma, CopiesBeforeTheStartThenAverages) {
  torch::manual_seed(4);
  torch::nn::Linear source(3, 2), target(3, 2);
  torch::nn::BatchNorm1d bn_source(2), bn_target(2);
  source->register_module("bn", bn_source);
  target->register_module("bn", bn_target);
  rt::ModuleEma ema(*source, *target, {.decay = 0.9, .start_step = 2});
  EXPECT_TRUE(torch::equal(target->weight, source->weight)) << "copied at construction";

  const auto nudge = [&] {
    const torch::NoGradGuard no_grad;
    for (auto& p : source->parameters()) p.add_(torch::randn(p.sizes()));
    bn_source->running_mean.add_(1);
  };
  nudge();
  ema.update(1);
  EXPECT_TRUE(torch::equal(target->weight, source->weight)) << "before start_step: a copy";
  const torch::Tensor before = target->weight.clone();
  nudge();
  ema.update(2);
  EXPECT_TRUE(close(target->weight, before * 0.9 + source->weight * 0.1));
  EXPECT_TRUE(torch::equal(bn_target->running_mean, bn_source->running_mean))
      << "buffers are copied";

  torch::nn::Linear other(3, 4);
  EXPECT_THROW(rt::ModuleEma(*source, *other), InvalidArgument);
  EXPECT_THROW(rt::ModuleEma(*source, *target, {.decay = 1.0}), InvalidArgument);
}

TEST(StandingStatistics, RunningStatsAreTheMeanOverBatchesOnEveryReplica) {
  constexpr int kBatches = 3, kReplicas = 2;
  torch::manual_seed(6);
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < kBatches; ++i) batches.push_back(torch::randn({8, 2, 3, 3}) * 2 + 1);
  torch::Tensor mean = torch::zeros({2}), var = torch::zeros({2});
  for (const auto& b : batches) {
    mean += b.mean({0, 2, 3}) / kBatches;
    var += b.var({0, 2, 3}, /*unbiased=*/true) / kBatches;
  }
  std::vector<rt::ConditionalBatchNorm2d> layers;
  for (int r = 0; r < kReplicas; ++r) {
    layers.push_back(rt::ConditionalBatchNorm2d(rt::ConditionalBatchNormOptions(2, 3)));
  }
  Replicator repl(Config{.local_replicas = kReplicas});
  repl.run([&](ReplicaContext& ctx) {
    auto& bn = layers[ctx.replica_id()];
    rt::standing_statistics(*bn, kBatches, [&](int i) {
      const std::int64_t begin = ctx.replica_id() * 4;
      bn(batches[i].slice(0, begin, begin + 4), torch::zeros({4, 3}));
    });
    EXPECT_FALSE(bn->is_training());
    EXPECT_DOUBLE_EQ(bn->bn->options.momentum(), 0.1) << "momentum restored";
  });
  for (auto& bn : layers) {
    EXPECT_TRUE(close(bn->bn->running_mean, mean));
    EXPECT_TRUE(close(bn->bn->running_var, var));
  }
}

// ---- checkpoints with several optimizers ------------------------------------------------

// ---- channels last ----------------------------------------------------------------------

// A small G block: conditional batch norm → ReLU → spectral-norm conv, and a linear layer.
struct ChannelsLastNet : torch::nn::Module {
  ChannelsLastNet()
      : bn(register_module("bn",
                           rt::ConditionalBatchNorm2d(rt::ConditionalBatchNormOptions(6, 4)))),
        conv(register_module("conv", rt::SNConv2d(torch::nn::Conv2dOptions(6, 5, 3).padding(1)))),
        head(register_module("head", torch::nn::Linear(5, 2))) {
    register_buffer("mask", torch::rand({1, 6, 5, 4}));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cond) {
    const torch::Tensor h = conv(torch::relu(bn(x * named_buffers()["mask"], cond)));
    return head(h.mean({2, 3}));
  }
  rt::ConditionalBatchNorm2d bn;
  rt::SNConv2d conv;
  torch::nn::Linear head;
};

TEST(ToMemoryFormat, ChannelsLastKeepsValuesTensorsAndTraining) {
  torch::manual_seed(5);
  ChannelsLastNet plain, last;
  {
    const torch::NoGradGuard no_grad;
    for (auto& p : last.named_parameters()) p.value().copy_(plain.named_parameters()[p.key()]);
    for (auto& b : last.named_buffers()) b.value().copy_(plain.named_buffers()[b.key()]);
  }
  std::vector<const void*> impls;
  for (const torch::Tensor& p : last.parameters()) impls.push_back(p.unsafeGetTensorImpl());
  torch::optim::SGD sgd_plain(plain.parameters(), 0.1), sgd_last(last.parameters(), 0.1);

  rt::to_memory_format(last, torch::MemoryFormat::ChannelsLast);

  const torch::Tensor weight = last.conv->weight;
  EXPECT_TRUE(weight.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(weight.is_contiguous());
  EXPECT_TRUE(torch::equal(weight, plain.conv->weight)) << "same values";
  EXPECT_TRUE(last.named_buffers()["mask"].is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(last.head->weight.is_contiguous()) << "2-D tensors stay as they are";
  const std::vector<torch::Tensor> params = last.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].unsafeGetTensorImpl(), impls[i]) << "parameter " << i << " replaced";
  }

  // Training steps with optimizers made before the conversion: the same parameters.
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const torch::Tensor x = torch::randn({4, 6, 5, 4}) * 2 + 1;
    const torch::Tensor cond = torch::randn({4, 4});
    const torch::Tensor out_plain = plain.forward(x, cond);
    const torch::Tensor out_last =
        last.forward(x.contiguous(torch::MemoryFormat::ChannelsLast), cond);
    EXPECT_TRUE(close(out_last, out_plain)) << "outputs";
    sgd_plain.zero_grad();
    sgd_last.zero_grad();
    out_plain.square().sum().backward();
    out_last.square().sum().backward();
    sgd_plain.step();
    sgd_last.step();
    for (auto& p : last.named_parameters()) {
      EXPECT_TRUE(close(p.value(), plain.named_parameters()[p.key()])) << p.key();
    }
  }
  EXPECT_TRUE(last.conv->weight.is_contiguous(torch::MemoryFormat::ChannelsLast))
      << "the optimizer kept the layout";

  // And back: the same tensor, contiguous again, with its values.
  const torch::Tensor before = last.conv->weight.clone();
  rt::to_memory_format(last, torch::MemoryFormat::Contiguous);
  EXPECT_TRUE(last.conv->weight.is_contiguous());
  EXPECT_EQ(last.conv->weight.unsafeGetTensorImpl(), weight.unsafeGetTensorImpl());
  EXPECT_TRUE(torch::equal(last.conv->weight, before));
  EXPECT_THROW(rt::to_memory_format(last, torch::MemoryFormat::Preserve), InvalidArgument);
}

TEST(Checkpoint, SeveralOptimizersRoundTripAndTheCountIsChecked) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gan_layers_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  torch::manual_seed(8);
  torch::nn::Sequential model(torch::nn::Linear(3, 2), torch::nn::Linear(2, 1));
  auto params = model->parameters();
  torch::optim::Adam g({params[0], params[1]}, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam d({params[2], params[3]}, torch::optim::AdamOptions(2e-3));
  for (int i = 0; i < 2; ++i) {
    g.zero_grad();
    d.zero_grad();
    model->forward(torch::randn({4, 3})).sum().backward();
    g.step();
    d.step();
  }
  const auto path = dir / "two.pt";
  rt::save_checkpoint(path, *model, {&g, &d}, {.step = 2});

  torch::nn::Sequential model2(torch::nn::Linear(3, 2), torch::nn::Linear(2, 1));
  auto params2 = model2->parameters();
  torch::optim::Adam g2({params2[0], params2[1]}, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam d2({params2[2], params2[3]}, torch::optim::AdamOptions(2e-3));
  EXPECT_EQ(rt::load_checkpoint(path, *model2, {&g2, &d2}).step, 2);
  // One more identical step on both gives the same bits: the optimizers' states came back.
  const torch::Tensor x = torch::randn({4, 3});
  for (auto* pair : {&model, &model2}) {
    (*pair)->zero_grad();
    (*pair)->forward(x).sum().backward();
  }
  g.step();
  d.step();
  g2.step();
  d2.step();
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], params2[i]));

  EXPECT_THROW(rt::load_checkpoint(path, *model2, {&g2}), replicator::DataError)
      << "a checkpoint of two optimizers does not load into one";
  rt::save_checkpoint(path, *model, g, {.step = 1});
  EXPECT_THROW(rt::load_checkpoint(path, *model2, {&g2, &d2}), replicator::DataError)
      << "nor one into two";
  std::filesystem::remove_all(dir);
}

}  // namespace
