// Tests of cross-replica batch norm (replicator/torch/batch_norm.h).
//
// The headline property: R replicas, each holding its rows of a global batch of B, compute
// what ONE batch norm computes on the whole batch: the same outputs and input gradients
// (row by row), the same parameter gradients once summed over replicas (each replica's loss
// is a SUM over its rows, loss = Σ y·G with one fixed G of the global shape, so the output
// gradient of every row is the same as in the single run), and the same running statistics
// after several training steps. Inputs have a mean far from zero (randn·3 + 2) so that a
// wrong variance formula shows. The single-replica layer itself is checked against
// LibTorch's BatchNorm1d / BatchNorm2d.
#include "replicator/torch/batch_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "tests/torch/close.h"

namespace {

namespace rt = replicator::torch;
using replicator::Config;
using replicator::InvalidArgument;
using replicator::ReplicaContext;
using replicator::Replicator;
using replicator::testing::close;

// What one training step of a batch norm produced.
struct StepResult {
  torch::Tensor y, dx, dweight, dbias, running_mean, running_var, num_batches_tracked;
};

template <typename Holder>
StepResult train_step(Holder& bn, const torch::Tensor& input, const torch::Tensor& g) {
  bn->zero_grad();
  const torch::Tensor x = input.clone().requires_grad_();
  const torch::Tensor y = bn(x);
  (y * g).sum().backward();
  const auto grad_of = [](const torch::Tensor& p) {
    return p.defined() && p.grad().defined() ? p.grad().clone() : torch::Tensor();
  };
  return {y.detach(),
          x.grad(),
          grad_of(bn->weight),
          grad_of(bn->bias),
          bn->running_mean.clone(),
          bn->running_var.clone(),
          bn->num_batches_tracked.clone()};
}

// Trains one batch norm on the global batches (outside any run), and replicas on their
// rows [bounds[r], bounds[r+1]) of the same batches, `kSteps` steps; compares every step.
// With `channels_last` the replicas' rows (4-D) are laid out channels last, and so must their
// outputs and input gradients be; their output gradients too unless `contiguous_grads`. The
// single batch norm keeps LibTorch's contiguous layout.
template <typename Holder>
void expect_replicas_match_one(std::vector<std::int64_t> bounds, std::vector<std::int64_t> shape,
                               bool affine = true, bool channels_last = false,
                               bool contiguous_grads = false) {
  constexpr int kSteps = 3;
  const int n = static_cast<int>(bounds.size()) - 1;
  ASSERT_EQ(bounds.back(), shape[0]);
  const std::int64_t channels = shape[1];

  torch::manual_seed(1234);
  const torch::Tensor weight = torch::rand({channels}) + 0.5;
  const torch::Tensor bias = torch::randn({channels});
  std::vector<torch::Tensor> inputs, output_grads;
  for (int s = 0; s < kSteps; ++s) {
    inputs.push_back(torch::randn(shape) * 3 + 2);
    output_grads.push_back(torch::randn(shape));
  }
  const auto make = [&] {
    Holder bn(rt::CrossReplicaBatchNormOptions(channels).affine(affine));
    if (affine) {
      const torch::NoGradGuard no_grad;
      bn->weight.copy_(weight);
      bn->bias.copy_(bias);
    }
    return bn;
  };

  Holder single = make();
  std::vector<StepResult> expected;
  for (int s = 0; s < kSteps; ++s) {
    expected.push_back(train_step(single, inputs[s], output_grads[s]));
  }

  std::vector<Holder> replicas;
  for (int r = 0; r < n; ++r) replicas.push_back(make());
  Replicator repl(Config{.local_replicas = n});
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE(::testing::Message() << "step " << s);
    const auto got = repl.run([&](ReplicaContext& ctx) {
      const int r = ctx.replica_id();
      const std::int64_t begin = bounds[r], end = bounds[r + 1];
      const auto rows = [&](const torch::Tensor& t, bool last) {
        const torch::Tensor part = t.slice(0, begin, end);
        return last ? part.contiguous(torch::MemoryFormat::ChannelsLast) : part;
      };
      return train_step(replicas[r], rows(inputs[s], channels_last),
                        rows(output_grads[s], channels_last && !contiguous_grads));
    });
    std::vector<torch::Tensor> ys, dxs;
    for (int r = 0; r < n; ++r) {
      ys.push_back(got[r].y);
      dxs.push_back(got[r].dx);
      if (channels_last) {
        EXPECT_TRUE(got[r].y.is_contiguous(torch::MemoryFormat::ChannelsLast)) << "replica " << r;
        EXPECT_TRUE(got[r].dx.is_contiguous(torch::MemoryFormat::ChannelsLast)) << "replica " << r;
      }
    }
    EXPECT_TRUE(close(torch::cat(ys), expected[s].y)) << "outputs";
    EXPECT_TRUE(close(torch::cat(dxs), expected[s].dx)) << "input gradients";
    if (affine) {
      torch::Tensor dweight = torch::zeros({channels}), dbias = torch::zeros({channels});
      for (int r = 0; r < n; ++r) {
        dweight += got[r].dweight;
        dbias += got[r].dbias;
      }
      EXPECT_TRUE(close(dweight, expected[s].dweight)) << "weight gradient summed over replicas";
      EXPECT_TRUE(close(dbias, expected[s].dbias)) << "bias gradient summed over replicas";
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(close(got[r].running_mean, expected[s].running_mean))
          << "running_mean of replica " << r;
      EXPECT_TRUE(close(got[r].running_var, expected[s].running_var))
          << "running_var of replica " << r;
      EXPECT_EQ(got[r].num_batches_tracked.template item<std::int64_t>(), s + 1) << "replica " << r;
      // The running statistics are reduced values: bitwise equal on every replica.
      EXPECT_TRUE(torch::equal(got[r].running_mean, got[0].running_mean)) << "replica " << r;
      EXPECT_TRUE(torch::equal(got[r].running_var, got[0].running_var)) << "replica " << r;
    }
  }
}

// Even splits of B rows over R replicas.
std::vector<std::int64_t> even_bounds(int replicas, std::int64_t rows) {
  std::vector<std::int64_t> bounds;
  for (int r = 0; r <= replicas; ++r) bounds.push_back(r * rows / replicas);
  return bounds;
}

enum class Layout { kNC, kNCL, kNCHW, kNHWC };

std::string name_of(Layout layout) {
  switch (layout) {
    case Layout::kNC:
      return "NC";
    case Layout::kNCL:
      return "NCL";
    case Layout::kNCHW:
      return "NCHW";
    case Layout::kNHWC:
      return "NHWC";
  }
  return "?";
}

class CrossReplicaBatchNormTest : public ::testing::TestWithParam<std::tuple<int, Layout>> {};

TEST_P(CrossReplicaBatchNormTest, ReplicasMatchOneReplicaOnTheGlobalBatch) {
  const auto [replicas, layout] = GetParam();
  switch (layout) {
    case Layout::kNC:
      expect_replicas_match_one<rt::CrossReplicaBatchNorm1d>(even_bounds(replicas, 16), {16, 5});
      break;
    case Layout::kNCL:
      expect_replicas_match_one<rt::CrossReplicaBatchNorm1d>(even_bounds(replicas, 8), {8, 3, 5});
      break;
    case Layout::kNCHW:
      expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(replicas, 8),
                                                             {8, 3, 4, 3});
      break;
    case Layout::kNHWC:  // channels last on the replicas, against the contiguous layout
      expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(replicas, 8), {8, 5, 4, 3},
                                                             /*affine=*/true,
                                                             /*channels_last=*/true);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(ReplicasAndLayouts, CrossReplicaBatchNormTest,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(Layout::kNC, Layout::kNCL,
                                                              Layout::kNCHW, Layout::kNHWC)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Layout>>& info) {
                           return "R" + std::to_string(std::get<0>(info.param)) + "_" +
                                  name_of(std::get<1>(info.param));
                         });

// Replicas with different row counts (one with a single row): the global statistics
// weight each replica by its count.
TEST(CrossReplicaBatchNormSplitTest, UnevenSplitMatchesOneReplica) {
  expect_replicas_match_one<rt::CrossReplicaBatchNorm1d>({0, 1, 4, 8}, {8, 4});
  expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>({0, 3, 8}, {8, 2, 3, 3});
}

// Channels-last rows with contiguous output gradients (backward takes them to the input's
// layout), shapes whose two layouts are the same memory (one channel, one pixel), and more
// channels than a register block with more rows than a cache chunk (37 channels: two blocks
// of 16 and 5 left over; 120 rows a replica: two chunks of at most 110).
TEST(CrossReplicaBatchNormSplitTest, ChannelsLastWithContiguousGradientsAndAmbiguousShapes) {
  expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(2, 8), {8, 37, 6, 5}, true,
                                                         /*channels_last=*/true);
  expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(2, 8), {8, 5, 4, 3}, true,
                                                         /*channels_last=*/true,
                                                         /*contiguous_grads=*/true);
  expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(2, 8), {8, 1, 4, 3}, true,
                                                         /*channels_last=*/true);
  expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(2, 8), {8, 5, 1, 1}, true,
                                                         /*channels_last=*/true);
}

TEST(CrossReplicaBatchNormSplitTest, WithoutAffineMatchesOneReplica) {
  expect_replicas_match_one<rt::CrossReplicaBatchNorm2d>(even_bounds(2, 8), {8, 3, 2, 3},
                                                         /*affine=*/false);
  expect_replicas_match_one<rt::CrossReplicaBatchNorm1d>(even_bounds(4, 8), {8, 3, 4},
                                                         /*affine=*/false);
}

// Outside any run, the layer is LibTorch's batch norm: outputs, gradients and running
// statistics over several training steps, then eval mode.
template <typename Ours, typename Theirs>
void expect_matches_libtorch(const rt::CrossReplicaBatchNormOptions& options,
                             std::vector<std::int64_t> shape) {
  const std::int64_t channels = shape[1];
  torch::manual_seed(99);
  Ours ours(options);
  Theirs theirs(
      torch::nn::BatchNormOptions(channels).eps(options.eps()).momentum(options.momentum()));
  {
    const torch::NoGradGuard no_grad;
    const torch::Tensor weight = torch::rand({channels}) + 0.5;
    const torch::Tensor bias = torch::randn({channels});
    ours->weight.copy_(weight);
    ours->bias.copy_(bias);
    theirs->weight.copy_(weight);
    theirs->bias.copy_(bias);
  }
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(::testing::Message() << "step " << s);
    const torch::Tensor input = torch::randn(shape) * 3 + 2;
    const torch::Tensor g = torch::randn(shape);
    const StepResult a = train_step(ours, input, g);
    const StepResult b = train_step(theirs, input, g);
    EXPECT_TRUE(close(a.y, b.y)) << "outputs";
    EXPECT_TRUE(close(a.dx, b.dx)) << "input gradients";
    EXPECT_TRUE(close(a.dweight, b.dweight)) << "weight gradients";
    EXPECT_TRUE(close(a.dbias, b.dbias)) << "bias gradients";
    EXPECT_TRUE(close(a.running_mean, b.running_mean)) << "running_mean";
    EXPECT_TRUE(close(a.running_var, b.running_var)) << "running_var";
    EXPECT_TRUE(torch::equal(a.num_batches_tracked, b.num_batches_tracked));
  }
  ours->eval();
  theirs->eval();
  const torch::Tensor input = torch::randn(shape) * 3 + 2;
  EXPECT_TRUE(close(ours(input), theirs(input))) << "eval outputs";
}

TEST(CrossReplicaBatchNormSingleTest, MatchesLibTorchBatchNorm2d) {
  expect_matches_libtorch<rt::CrossReplicaBatchNorm2d, torch::nn::BatchNorm2d>(
      rt::CrossReplicaBatchNormOptions(4), {6, 4, 5, 3});
  // Options other than the defaults are honoured.
  expect_matches_libtorch<rt::CrossReplicaBatchNorm2d, torch::nn::BatchNorm2d>(
      rt::CrossReplicaBatchNormOptions(3).eps(1e-3).momentum(0.3), {5, 3, 2, 4});
}

TEST(CrossReplicaBatchNormSingleTest, MatchesLibTorchBatchNorm1d) {
  expect_matches_libtorch<rt::CrossReplicaBatchNorm1d, torch::nn::BatchNorm1d>(
      rt::CrossReplicaBatchNormOptions(4), {6, 4, 5});
  expect_matches_libtorch<rt::CrossReplicaBatchNorm1d, torch::nn::BatchNorm1d>(
      rt::CrossReplicaBatchNormOptions(3).momentum(0.5), {7, 3});
}

// Eval mode normalizes with the running statistics and communicates nothing: it works
// outside a run, on a single example, and inside a run on one replica only (a collective
// there would meet a peer that already returned, and fail with CollectiveMismatch).
TEST(CrossReplicaBatchNormSingleTest, EvalUsesRunningStatisticsWithoutCollectives) {
  rt::CrossReplicaBatchNorm2d bn(3);
  {
    const torch::NoGradGuard no_grad;
    bn->running_mean.copy_(torch::tensor({1.0f, -2.0f, 3.0f}));
    bn->running_var.copy_(torch::tensor({4.0f, 0.25f, 1.0f}));
    bn->weight.copy_(torch::tensor({0.5f, 2.0f, -1.0f}));
    bn->bias.copy_(torch::tensor({0.1f, 0.2f, 0.3f}));
  }
  bn->eval();
  const auto expected_for = [&](const torch::Tensor& x) {
    const auto c = [](const torch::Tensor& v) { return v.view({1, 3, 1, 1}); };
    return (x - c(bn->running_mean)) / torch::sqrt(c(bn->running_var) + 1e-5) * c(bn->weight) +
           c(bn->bias);
  };
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({2, 3, 2, 2}) * 3 + 2;
  EXPECT_TRUE(close(bn(x), expected_for(x)));
  const torch::Tensor one = torch::randn({1, 3, 1, 1});
  EXPECT_TRUE(close(bn(one), expected_for(one))) << "a single example in eval mode";

  Replicator repl(Config{.local_replicas = 2});
  const auto out = repl.run([&](ReplicaContext& ctx) {
    if (ctx.replica_id() != 0) return torch::Tensor();
    return bn(x);
  });
  EXPECT_TRUE(close(out[0], expected_for(x)));
  EXPECT_EQ(bn->num_batches_tracked.item<std::int64_t>(), 0);
  EXPECT_TRUE(torch::equal(bn->running_mean, torch::tensor({1.0f, -2.0f, 3.0f})));
}

TEST(CrossReplicaBatchNormSingleTest, BadInputIsInvalidArgument) {
  rt::CrossReplicaBatchNorm1d bn1(3);
  rt::CrossReplicaBatchNorm2d bn2(3);
  EXPECT_THROW(bn1(torch::randn({})), InvalidArgument);
  EXPECT_THROW(bn1(torch::randn({4})), InvalidArgument);
  EXPECT_THROW(bn1(torch::randn({4, 3, 2, 2})), InvalidArgument);
  EXPECT_THROW(bn1(torch::randn({4, 2})), InvalidArgument) << "channels";
  EXPECT_THROW(bn1(torch::randn({4, 4, 5})), InvalidArgument) << "channels";
  EXPECT_THROW(bn2(torch::randn({4, 3})), InvalidArgument);
  EXPECT_THROW(bn2(torch::randn({4, 3, 5})), InvalidArgument);
  EXPECT_THROW(bn2(torch::randn({4, 3, 2, 2, 2})), InvalidArgument);
  EXPECT_THROW(bn2(torch::randn({4, 2, 2, 2})), InvalidArgument) << "channels";
  bn1->eval();
  bn2->eval();
  EXPECT_THROW(bn1(torch::randn({4, 2})), InvalidArgument) << "channels, eval";
  EXPECT_THROW(bn2(torch::randn({4, 3, 5})), InvalidArgument) << "rank, eval";
  EXPECT_THROW(rt::CrossReplicaBatchNorm1d(0), InvalidArgument);
  // Nothing was tracked by the failed calls.
  EXPECT_EQ(bn1->num_batches_tracked.item<std::int64_t>(), 0);
  EXPECT_EQ(bn2->num_batches_tracked.item<std::int64_t>(), 0);
}

// Training needs two values per channel over ALL replicas.
TEST(CrossReplicaBatchNormSingleTest, SingleValuePerChannelIsInvalidArgument) {
  rt::CrossReplicaBatchNorm1d bn1(3);
  rt::CrossReplicaBatchNorm2d bn2(3);
  EXPECT_THROW(bn1(torch::randn({1, 3})), InvalidArgument);
  EXPECT_THROW(bn1(torch::randn({1, 3, 1})), InvalidArgument);
  EXPECT_THROW(bn2(torch::randn({1, 3, 1, 1})), InvalidArgument);
  EXPECT_EQ(bn1->num_batches_tracked.item<std::int64_t>(), 0);
  EXPECT_TRUE(torch::equal(bn1->running_mean, torch::zeros({3})));
  EXPECT_NO_THROW(bn1(torch::randn({1, 3, 2}))) << "two values per channel";

  // Replica 0 holds one row, replica 1 none: one value per channel over all replicas,
  // which every replica must report.
  std::vector<rt::CrossReplicaBatchNorm1d> bns{rt::CrossReplicaBatchNorm1d(3),
                                               rt::CrossReplicaBatchNorm1d(3)};
  Replicator repl(Config{.local_replicas = 2});
  const auto errors = repl.run([&](ReplicaContext& ctx) -> std::string {
    const int r = ctx.replica_id();
    try {
      bns[r](torch::randn({r == 0 ? 1 : 0, 3}));
    } catch (const InvalidArgument&) {
      return "InvalidArgument";
    } catch (const std::exception& e) {
      return std::string("other: ") + e.what();
    }
    return "nothing";
  });
  EXPECT_EQ(errors[0], "InvalidArgument");
  EXPECT_EQ(errors[1], "InvalidArgument");

  // One row on each of two replicas is two values per channel: fine.
  const auto ok = repl.run([&](ReplicaContext& ctx) {
    return bns[ctx.replica_id()](torch::full({1, 3}, 2.0 * ctx.replica_id())).detach();
  });
  // Global batch {0, 2} per channel: mean 1, biased variance 1 → outputs −1 and +1.
  EXPECT_TRUE(close(ok[0], torch::full({1, 3}, -1.0 / std::sqrt(1 + 1e-5))));
  EXPECT_TRUE(close(ok[1], torch::full({1, 3}, 1.0 / std::sqrt(1 + 1e-5))));
}

}  // namespace
