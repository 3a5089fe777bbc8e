// Tests of gradient reduction (replicator/torch/gradient_reducer.h).
//
// The headline property: R replicas, each with its B/R rows of a global batch and a loss
// that is the MEAN over its rows, stepping a ReplicatedOptimizer around SGD with momentum,
// end with the parameters (and batch-norm running statistics) that one plain SGD gets on
// the whole batch, after one and after two steps, with one big bucket, a bucket per
// parameter reduced from inside backward, and no overlap. Every replica's parameters are
// bitwise identical. Then parameters without gradients: unused everywhere (the gradient
// stays undefined and SGD, even with weight decay, leaves the parameter alone) and used on
// one replica only (every replica gets its gradient / R).
#include "replicator/torch/gradient_reducer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/batch_norm.h"
#include "tests/torch/close.h"

namespace {

namespace rt = replicator::torch;
using replicator::Config;
using replicator::ReduceOp;
using replicator::ReplicaContext;
using replicator::Replicator;
using replicator::testing::close;

// Linear → CrossReplicaBatchNorm1d → ReLU → Linear.
struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 8))),
        bn(register_module("bn", rt::CrossReplicaBatchNorm1d(8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  static torch::Tensor input(std::int64_t batch) { return torch::randn({batch, 6}) * 2 + 1; }
  static constexpr std::int64_t kClasses = 4;

  torch::nn::Linear fc1;
  rt::CrossReplicaBatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

// Conv2d → CrossReplicaBatchNorm2d → ReLU → Linear.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : conv(register_module("conv",
                             torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3).padding(1)))),
        bn(register_module("bn", rt::CrossReplicaBatchNorm2d(3))),
        fc(register_module("fc", torch::nn::Linear(3 * 4 * 4, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(torch::relu(bn(conv(x))).flatten(1)); }
  static torch::Tensor input(std::int64_t batch) { return torch::randn({batch, 2, 4, 4}) + 1; }
  static constexpr std::int64_t kClasses = 3;

  torch::nn::Conv2d conv;
  rt::CrossReplicaBatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

// Parameters, then buffers, as copies.
std::vector<torch::Tensor> snapshot(const torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  for (const torch::Tensor& b : m.buffers()) out.push_back(b.clone());
  return out;
}

torch::optim::SGDOptions sgd_options() { return torch::optim::SGDOptions(0.1).momentum(0.9); }

enum class Buckets { kDefault, kPerParameterOverlap, kPerParameterNoOverlap, kDefaultNoOverlap };

std::string name_of(Buckets b) {
  switch (b) {
    case Buckets::kDefault:
      return "OneBucket";
    case Buckets::kPerParameterOverlap:
      return "TinyBucketsOverlap";
    case Buckets::kPerParameterNoOverlap:
      return "TinyBucketsNoOverlap";
    case Buckets::kDefaultNoOverlap:
      return "OneBucketNoOverlap";
  }
  return "?";
}

rt::GradientOptions options_of(Buckets b) {
  rt::GradientOptions o;
  if (b == Buckets::kPerParameterOverlap || b == Buckets::kPerParameterNoOverlap) {
    o.bucket_bytes = 4;  // below every parameter's size: a bucket per parameter
  }
  o.overlap = b == Buckets::kDefault || b == Buckets::kPerParameterOverlap;
  return o;
}

template <typename Model>
void expect_replicated_sgd_matches_one(int n, Buckets buckets) {
  constexpr std::int64_t kBatch = 8;
  constexpr int kSteps = 2;
  torch::manual_seed(3);
  std::vector<torch::Tensor> inputs, labels;
  for (int s = 0; s < kSteps; ++s) {
    inputs.push_back(Model::Impl::input(kBatch));
    labels.push_back(torch::randint(Model::Impl::kClasses, {kBatch}, torch::kLong));
  }
  const auto make = [] {
    torch::manual_seed(42);
    return Model();
  };

  // One replica, plain SGD and backward, on the global batch.
  Model single = make();
  torch::optim::SGD sgd(single->parameters(), sgd_options());
  std::vector<std::vector<torch::Tensor>> expected;
  for (int s = 0; s < kSteps; ++s) {
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(single(inputs[s]), labels[s]).backward();
    sgd.step();
    expected.push_back(snapshot(*single));
  }

  std::vector<Model> models;
  for (int r = 0; r < n; ++r) models.push_back(make());
  const std::size_t num_parameters = models[0]->parameters().size();
  struct Out {
    std::vector<std::vector<torch::Tensor>> snapshots;  // per step
    std::vector<std::size_t> in_backward;               // per step
    std::size_t buckets = 0;
  };
  Replicator repl(Config{.local_replicas = n});
  const auto got = repl.run([&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    Model& model = models[r];
    rt::ReplicatedOptimizer optimizer(
        ctx, std::make_shared<torch::optim::SGD>(model->parameters(), sgd_options()),
        options_of(buckets));
    Out out;
    out.buckets = optimizer.reducer().num_buckets();
    const std::int64_t rows = kBatch / n;
    for (int s = 0; s < kSteps; ++s) {
      optimizer.zero_grad();
      const torch::Tensor x = inputs[s].slice(0, r * rows, (r + 1) * rows);
      const torch::Tensor y = labels[s].slice(0, r * rows, (r + 1) * rows);
      torch::nn::functional::cross_entropy(model(x), y).backward();
      optimizer.step();
      out.snapshots.push_back(snapshot(*model));
      out.in_backward.push_back(optimizer.reducer().buckets_reduced_in_backward());
    }
    return out;
  });

  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    const Out& o = got[r];
    switch (buckets) {
      case Buckets::kDefault:
      case Buckets::kDefaultNoOverlap:
        EXPECT_EQ(o.buckets, 1u);
        break;
      case Buckets::kPerParameterOverlap:
      case Buckets::kPerParameterNoOverlap:
        EXPECT_EQ(o.buckets, num_parameters);
        break;
    }
    for (int s = 0; s < kSteps; ++s) {
      SCOPED_TRACE(::testing::Message() << "after step " << s + 1);
      if (options_of(buckets).overlap) {
        // Every parameter is used, so every bucket completes within backward.
        EXPECT_GT(o.in_backward[s], 0u);
        EXPECT_EQ(o.in_backward[s], o.buckets);
      } else {
        EXPECT_EQ(o.in_backward[s], 0u);
      }
      ASSERT_EQ(o.snapshots[s].size(), expected[s].size());
      for (std::size_t k = 0; k < expected[s].size(); ++k) {
        EXPECT_TRUE(close(o.snapshots[s][k], expected[s][k])) << "tensor " << k;
        EXPECT_TRUE(torch::equal(o.snapshots[s][k], got[0].snapshots[s][k]))
            << "tensor " << k << " differs from replica 0's";
      }
    }
  }
}

class ReplicatedOptimizerTest : public ::testing::TestWithParam<std::tuple<int, Buckets, bool>> {};

TEST_P(ReplicatedOptimizerTest, MatchesOneReplicaOnTheGlobalBatch) {
  const auto [replicas, buckets, conv] = GetParam();
  if (conv) {
    expect_replicated_sgd_matches_one<ConvNet>(replicas, buckets);
  } else {
    expect_replicated_sgd_matches_one<Mlp>(replicas, buckets);
  }
}

INSTANTIATE_TEST_SUITE_P(ReplicasAndBuckets, ReplicatedOptimizerTest,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(Buckets::kDefault,
                                                              Buckets::kPerParameterOverlap,
                                                              Buckets::kPerParameterNoOverlap,
                                                              Buckets::kDefaultNoOverlap),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, Buckets, bool>>& info) {
                           return "R" + std::to_string(std::get<0>(info.param)) + "_" +
                                  name_of(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_Conv" : "_Mlp");
                         });

// Three parameters: `used` by every replica's loss, `unused` by none, `only0` by replica 0's
// alone (only when `use_only0`). SGD with weight decay, two steps.
struct ProbeResult {
  torch::Tensor used, unused, only0;
  bool unused_grad_defined = true;
  bool only0_grad_defined = false;
  torch::Tensor used_grad, only0_grad;
};

ProbeResult probe(ReplicaContext& ctx, const rt::GradientOptions& options, bool use_only0) {
  const int r = ctx.replica_id();
  const torch::Tensor used = torch::tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  const torch::Tensor unused = torch::tensor({4.0f, 5.0f}).requires_grad_();
  const torch::Tensor only0 = torch::tensor({6.0f, 7.0f, 8.0f, 9.0f}).requires_grad_();
  rt::ReplicatedOptimizer optimizer(
      ctx,
      std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{used, unused, only0},
                                          torch::optim::SGDOptions(0.1).weight_decay(0.5)),
      options);
  ProbeResult out;
  for (int step = 0; step < 2; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = (used * torch::tensor({1.0f, 2.0f, 3.0f}) * (r + 1)).sum();
    if (use_only0 && r == 0)
      loss = loss + (only0 * torch::tensor({1.0f, -1.0f, 2.0f, -2.0f})).sum();
    loss.backward();
    optimizer.step();
    out.unused_grad_defined = out.unused_grad_defined && unused.grad().defined();
  }
  out.used = used.detach().clone();
  out.unused = unused.detach().clone();
  out.only0 = only0.detach().clone();
  out.used_grad = used.grad().defined() ? used.grad().clone() : torch::Tensor();
  out.only0_grad_defined = only0.grad().defined();
  out.only0_grad = out.only0_grad_defined ? only0.grad().clone() : torch::Tensor();
  return out;
}

// Two SGD steps with lr 0.1, weight decay 0.5 and a constant gradient g, from p.
torch::Tensor two_steps(torch::Tensor p, const torch::Tensor& g) {
  for (int step = 0; step < 2; ++step) p = p - 0.1 * (g + 0.5 * p);
  return p;
}

class UnusedParameterTest : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int replicas() const { return std::get<0>(GetParam()); }
  rt::GradientOptions options() const {
    rt::GradientOptions o;
    if (std::get<1>(GetParam())) o.bucket_bytes = 4;  // a bucket per parameter
    return o;
  }
};

// Unused on every replica: the gradient stays undefined and SGD skips the parameter
// (weight decay would move it otherwise), with and without overlap.
TEST_P(UnusedParameterTest, UnusedEverywhereKeepsUndefinedGradient) {
  const int n = replicas();
  Replicator repl(Config{.local_replicas = n});
  for (const bool overlap : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "overlap " << overlap);
    rt::GradientOptions o = options();
    o.overlap = overlap;
    const auto got =
        repl.run([&](ReplicaContext& ctx) { return probe(ctx, o, /*use_only0=*/false); });
    const torch::Tensor mean_grad = torch::tensor({1.0f, 2.0f, 3.0f}) * ((n + 1) / 2.0f);
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(::testing::Message() << "replica " << r);
      EXPECT_FALSE(got[r].unused_grad_defined);
      EXPECT_FALSE(got[r].only0_grad_defined);
      EXPECT_TRUE(torch::equal(got[r].unused, torch::tensor({4.0f, 5.0f})));
      EXPECT_TRUE(torch::equal(got[r].only0, torch::tensor({6.0f, 7.0f, 8.0f, 9.0f})));
      EXPECT_TRUE(close(got[r].used_grad, mean_grad));
      EXPECT_TRUE(close(got[r].used, two_steps(torch::tensor({1.0f, 2.0f, 3.0f}), mean_grad)));
      EXPECT_TRUE(torch::equal(got[r].used, got[0].used));
    }
  }
}

// Used on replica 0 only: every replica gets replica 0's gradient / R (overlap = false, as
// the header requires for replica-dependent sets of used parameters).
TEST_P(UnusedParameterTest, UsedOnOneReplicaGetsMeanOnAll) {
  const int n = replicas();
  Replicator repl(Config{.local_replicas = n});
  rt::GradientOptions o = options();
  o.overlap = false;
  const auto got = repl.run([&](ReplicaContext& ctx) { return probe(ctx, o, /*use_only0=*/true); });
  const torch::Tensor only0_grad = torch::tensor({1.0f, -1.0f, 2.0f, -2.0f}) / n;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    EXPECT_FALSE(got[r].unused_grad_defined);
    ASSERT_TRUE(got[r].only0_grad_defined);
    EXPECT_TRUE(close(got[r].only0_grad, only0_grad));
    EXPECT_TRUE(
        close(got[r].only0, two_steps(torch::tensor({6.0f, 7.0f, 8.0f, 9.0f}), only0_grad)));
    EXPECT_TRUE(torch::equal(got[r].unused, torch::tensor({4.0f, 5.0f})));
    EXPECT_TRUE(torch::equal(got[r].only0, got[0].only0));
    EXPECT_TRUE(torch::equal(got[r].used, got[0].used));
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, UnusedParameterTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return "R" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_TinyBuckets" : "_OneBucket");
                         });

// op = kSum: the gradients are summed, not averaged; parameters without requires_grad are
// not registered.
TEST(GradientReducerTest, SumOpAndFrozenParameters) {
  constexpr int kReplicas = 3;
  Replicator repl(Config{.local_replicas = kReplicas});
  const auto got = repl.run([&](ReplicaContext& ctx) {
    const torch::Tensor w = torch::ones({5}).requires_grad_();
    const torch::Tensor frozen = torch::ones({5});
    rt::GradientReducer reducer(ctx, {w, frozen}, {.op = ReduceOp::kSum});
    (w * frozen * (ctx.replica_id() + 1)).sum().backward();
    reducer.synchronize();
    return std::make_tuple(w.grad().clone(), reducer.num_buckets(), frozen.grad().defined());
  });
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_TRUE(torch::equal(std::get<0>(got[r]), torch::full({5}, 6.0f)));  // 1 + 2 + 3
    EXPECT_EQ(std::get<1>(got[r]), 1u);
    EXPECT_FALSE(std::get<2>(got[r]));
  }
}

// A channels-last weight's gradient is a channels-last view into its bucket (autograd
// accumulates into it as it is, without a strided copy), with the values plain backward
// gives, summed over the replicas; after the weight is laid out again, zero_grad() lays
// the gradient out the same way.
TEST(GradientReducerTest, GradientsKeepTheParametersLayout) {
  constexpr int kReplicas = 2;
  const auto cl = torch::MemoryFormat::ChannelsLast;
  torch::manual_seed(5);
  const torch::Tensor start = torch::randn({4, 3, 3, 3}).contiguous(cl);
  const torch::Tensor x = torch::randn({2, 3, 5, 5});
  const torch::Tensor w0 = start.clone().requires_grad_();
  torch::conv2d(x, w0, {}, 1, 1).square().sum().backward();
  const torch::Tensor expected = w0.grad() * kReplicas;

  Replicator repl(Config{.local_replicas = kReplicas});
  const auto got = repl.run([&](ReplicaContext& ctx) {
    const torch::Tensor w = start.clone().requires_grad_();  // keeps channels last
    rt::GradientReducer reducer(ctx, {w}, {.op = ReduceOp::kSum});
    const auto step = [&] {
      reducer.zero_grad();
      torch::conv2d(x, w, {}, 1, 1).square().sum().backward();
      reducer.synchronize();
      return std::make_tuple(w.grad().is_contiguous(cl), w.grad().clone());
    };
    const auto [first_cl, first] = step();
    {
      const torch::NoGradGuard no_grad;
      w.set_data(w.data().contiguous());
    }
    const auto [second_cl, second] = step();
    const bool second_contiguous = w.grad().is_contiguous();
    return std::make_tuple(first_cl, first, second_cl, second_contiguous, second);
  });
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_TRUE(std::get<0>(got[r]));
    EXPECT_TRUE(torch::allclose(std::get<1>(got[r]), expected, 1e-5, 1e-5));
    EXPECT_FALSE(std::get<2>(got[r]));
    EXPECT_TRUE(std::get<3>(got[r]));
    EXPECT_TRUE(torch::allclose(std::get<4>(got[r]), expected, 1e-5, 1e-5));
  }
}

TEST(GradientReducerTest, BadOptionsAndParametersAreInvalidArgument) {
  Replicator repl(Config{.local_replicas = 1});
  repl.run([&](ReplicaContext& ctx) {
    const torch::Tensor w = torch::ones({3}).requires_grad_();
    EXPECT_THROW(rt::GradientReducer(ctx, {w}, {.bucket_bytes = 0}), replicator::InvalidArgument);
    EXPECT_THROW(rt::GradientReducer(ctx, {w}, {.op = ReduceOp::kMax}),
                 replicator::InvalidArgument);
    const torch::Tensor complex = torch::ones({3}, torch::kComplexFloat).requires_grad_();
    EXPECT_THROW(rt::GradientReducer(ctx, {w, complex}), replicator::InvalidArgument);
    const torch::Tensor meta =
        torch::empty({2, 3}, torch::TensorOptions().device(c10::kMeta)).requires_grad_();
    try {
      rt::GradientReducer reducer(ctx, {w, meta});
      ADD_FAILURE() << "a parameter on the meta device was taken";
    } catch (const replicator::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("GradientReducer: a parameter of shape [2, 3]: "
                                           "tensors must be on the CPU or a CUDA device"),
                std::string::npos)
          << e.what();
    }
  });
}

// Backward's hooks that run on a thread other than the replica's (autograd's thread for a
// GPU; here a thread of the test's) only mark their buckets complete: every bucket is
// reduced in synchronize(), on the replica's thread, and the gradients have the bits they
// have when backward runs on the replica's thread and reduces from within it.
TEST(GradientReducerTest, HooksOffTheReplicaThreadLeaveTheReductionToSynchronize) {
  constexpr int kReplicas = 3;
  constexpr std::int64_t kRows = 4;
  torch::manual_seed(11);
  const torch::Tensor inputs = Mlp::Impl::input(kReplicas * kRows);
  const torch::Tensor labels = torch::randint(Mlp::Impl::kClasses, {kReplicas * kRows});
  const auto train = [&](bool backward_elsewhere) {
    std::vector<Mlp> models;
    for (int r = 0; r < kReplicas; ++r) {
      torch::manual_seed(42);
      models.push_back(Mlp());
    }
    Replicator repl(Config{.local_replicas = kReplicas});
    return repl.run([&](ReplicaContext& ctx) {
      Mlp& model = models[ctx.replica_id()];
      rt::GradientReducer reducer(ctx, model->parameters(), {.bucket_bytes = 4});
      const torch::Tensor x =
          inputs.slice(0, ctx.replica_id() * kRows, (ctx.replica_id() + 1) * kRows);
      const torch::Tensor y =
          labels.slice(0, ctx.replica_id() * kRows, (ctx.replica_id() + 1) * kRows);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(model(x), y);
      if (backward_elsewhere) {
        std::exception_ptr failed;
        std::thread autograd([&] {
          try {
            loss.backward();
          } catch (...) {
            failed = std::current_exception();
          }
        });
        autograd.join();
        if (failed) std::rethrow_exception(failed);
      } else {
        loss.backward();
      }
      reducer.synchronize();
      std::vector<torch::Tensor> grads;
      for (const torch::Tensor& p : model->parameters()) grads.push_back(p.grad().clone());
      return std::make_tuple(reducer.buckets_reduced_in_backward(), reducer.num_buckets(), grads);
    });
  };
  const auto here = train(false);
  const auto elsewhere = train(true);
  for (int r = 0; r < kReplicas; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    EXPECT_EQ(std::get<0>(here[r]), std::get<1>(here[r]));  // all within backward
    EXPECT_EQ(std::get<0>(elsewhere[r]), 0u);               // all in synchronize()
    const auto& a = std::get<2>(here[r]);
    const auto& b = std::get<2>(elsewhere[r]);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_TRUE(torch::equal(a[k], b[k])) << "gradient " << k;
      EXPECT_TRUE(torch::equal(b[k], std::get<2>(elsewhere[0])[k])) << "gradient " << k;
    }
  }
}

}  // namespace
