// The job skeleton (replicator/train/job.h) on a linear layer and synthetic rows, 2 replicas
// as threads: the batch split, a run stopped and resumed ending with the bits of one that
// never stopped, checkpoints and metrics.jsonl written by replica 0 only (none when quiet),
// and the digest check naming a replica that diverged.
#include "replicator/train/job.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "replicator/errors.h"
#include "replicator/train/impala.h"
#include "tests/harness/temp_dir.h"

namespace replicator::train {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;

struct FitResult : JobResult {
  std::int64_t first_step = 0;
};

JobOptions two_replicas(const fs::path& out) {
  JobOptions o;
  o.config.local_replicas = 2;
  o.out = out;
  o.progress = false;
  o.checkpoint_every = 2;
  o.keep_checkpoints = 10;
  return o;
}

// Fits y = x1 + x2 + x3 + x4 up to step `last`; with `diverge`, replica 1 changes its weights
// before the end.
FitResult fit(const JobOptions& options, std::int64_t last, bool diverge = false) {
  Job job(options);
  const std::int64_t rows = job.split_batch(16);
  return job.run([&](ReplicaContext& ctx) {
    auto model = job.build_model(ctx, [] { return ::torch::nn::Linear(4, 1); });
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), 0.05);
    replicator::torch::ReplicatedOptimizer optimizer(ctx, sgd);
    JobReplica replica(job, ctx, *model, {sgd.get()});
    FitResult result;
    replica.describe(result);
    result.first_step = replica.position().step;
    JobReporter* reporter = replica.report_until(last);
    EXPECT_EQ(reporter != nullptr, ctx.replica_id() == 0 && !options.quiet);
    std::int64_t step = replica.position().step;
    while (step < last) {
      const double offset = static_cast<double>((step * 2 + ctx.replica_id()) * rows * 4);
      const ::torch::Tensor x =
          ::torch::sin(0.1 * (::torch::arange(rows * 4, ::torch::kFloat) + offset))
              .reshape({rows, 4});
      optimizer.zero_grad();
      const ::torch::Tensor loss = (model(x) - x.sum(1, true)).pow(2).mean();
      loss.backward();
      optimizer.step();
      ++step;
      replica.count_step();
      if (reporter) {
        reporter->metric({{"type", "train"}, {"step", step}, {"loss", loss.item<double>()}});
      }
      if (step % options.checkpoint_every == 0) replica.checkpoint({.step = step});
    }
    if (diverge && ctx.replica_id() == 1) {
      const ::torch::NoGradGuard no_grad;
      model->weight.add_(1e-3);
    }
    result.steps = step;
    result.digest = replica.finish(step, {.charts = [](const fs::path& metrics) {
                                     return charts_from_metrics(metrics, "step", {{"loss"}});
                                   }});
    return result;
  });
}

int lines_of(const fs::path& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(Job, SplitsTheBatchOrSaysWhyNot) {
  Job job(two_replicas({}));
  EXPECT_EQ(job.num_replicas(), 2);
  EXPECT_EQ(job.split_batch(64), 32);
  try {
    job.split_batch(63, "batch of unrolls");
    FAIL() << "63 rows split over 2 replicas";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "the batch of unrolls (63) must be a multiple of the number of replicas (2)");
  }
  JobOptions no_threads = two_replicas({});
  no_threads.threads = 0;
  EXPECT_THROW(Job{no_threads}, InvalidArgument);
}

TEST(Job, AResumedRunEndsWithTheBitsOfOneThatNeverStopped) {
  TempDir dir;
  const FitResult first = fit(two_replicas(dir.path() / "run"), 4);
  EXPECT_TRUE(first.reporter);
  EXPECT_EQ(first.replicas, 2);
  EXPECT_EQ(first.first_step, 0);
  EXPECT_EQ(first.steps, 4);
  const FitResult resumed = fit(two_replicas(dir.path() / "run"), 7);
  const FitResult whole = fit(two_replicas(dir.path() / "whole"), 7);
  EXPECT_EQ(resumed.first_step, 4);
  EXPECT_EQ(resumed.steps, 7);
  EXPECT_EQ(resumed.digest, whole.digest);
  EXPECT_NE(first.digest, whole.digest);
  // One writer: the checkpoints of steps 2, 4 and 6 once each, one line per step.
  int checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(dir.path() / "run")) {
    checkpoints += entry.path().extension() == ".pt" ? 1 : 0;
  }
  EXPECT_EQ(checkpoints, 3);
  EXPECT_EQ(lines_of(dir.path() / "run" / "metrics.jsonl"), 7);
  EXPECT_TRUE(fs::exists(dir.path() / "run" / "curves.png"));
}

TEST(Job, AQuietJobWritesCheckpointsOnly) {
  TempDir dir;
  JobOptions quiet = two_replicas(dir.path() / "run");
  quiet.quiet = true;
  fit(quiet, 2);
  EXPECT_TRUE(fs::exists(dir.path() / "run" / "checkpoint-000000002.pt"));
  EXPECT_FALSE(fs::exists(dir.path() / "run" / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir.path() / "run" / "curves.png"));
}

TEST(Job, AReplicaThatDivergedIsNamed) {
  try {
    fit(two_replicas({}), 2, /*diverge=*/true);
    FAIL() << "the replicas ended with different parameters";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ended with parameters different"), std::string::npos)
        << e.what();
  }
}

TEST(ImpalaDefaultsTest, TheMinAtarGamesGetTheirOwnAndGivenValuesStay) {
  ImpalaOptions o;
  o.env = "breakout";
  ImpalaOptions d = impala_defaults(o);
  EXPECT_EQ(d.learning_rate, 4e-3);
  EXPECT_EQ(d.entropy_cost, 0.05);
  o.env = "cartpole";
  d = impala_defaults(o);
  EXPECT_EQ(d.learning_rate, 2e-3);
  EXPECT_EQ(d.entropy_cost, 0.01);
  o.env = "seaquest";
  o.learning_rate = 1e-3;
  o.entropy_cost = 0.005;
  d = impala_defaults(o);
  EXPECT_EQ(d.learning_rate, 1e-3);
  EXPECT_EQ(d.entropy_cost, 0.005);
}

}  // namespace
}  // namespace replicator::train
