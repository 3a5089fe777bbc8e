// A program a user would write against the installed package. `consumer` runs 4 replicas and
// checks an all_reduce and a gather through the installed headers and libraries; then runs
// itself as the 2 workers of an elastic job through the launch layer's API, whose first
// generation fails on purpose, and checks that the agent restarted it and the job finished.
// With LibTorch, it trains a linear layer through the job skeleton (replicator::train) on 2
// replicas for 4 steps, resumes it to 6, and checks that the resumed run started from the
// checkpoint of step 4, kept metrics.jsonl whole and ended with the bits of an uninterrupted
// run. Exit 0 when every result is right.
#include <replicator/launch/elastic.h>
#include <replicator/replicator.h>
#ifdef CONSUMER_WITH_TRAIN
#include <replicator/train/job.h>
#include <torch/torch.h>

#include <fstream>
#include <memory>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

bool collectives() {
  replicator::Config config;
  config.local_replicas = 4;
  replicator::Replicator repl(config);
  const auto sums = repl.run([](replicator::ReplicaContext& ctx) {
    std::vector<double> v(1000, ctx.replica_id() + 1.0);
    ctx.all_reduce(v);
    std::vector<double> mine(2, ctx.replica_id()), all(ctx.replica_id() == 0 ? 8 : 0);
    ctx.gather(mine, all);
    return v[999] + (all.empty() ? 0.0 : all[7]);
  });
  // 1 + 2 + 3 + 4 = 10 everywhere, and replica 0 also holds replica 3's value last.
  return sums[0] == 13.0 && sums[1] == 10.0 && sums[3] == 10.0;
}

// A worker of the elastic job: rank 1 of the first generation fails; the others leave a
// file naming their rank and generation in `folder`.
int worker(const std::string& folder) {
  const char* rank = std::getenv("REPLICATOR_RANK");
  const char* generation = std::getenv("REPLICATOR_GENERATION");
  if (rank == nullptr || generation == nullptr) return 3;
  if (std::strcmp(generation, "0") == 0 && std::strcmp(rank, "1") == 0) return 4;
  const std::string name = folder + "/rank" + rank + ".gen" + generation;
  std::FILE* f = std::fopen(name.c_str(), "w");
  if (f == nullptr) return 5;
  std::fclose(f);
  return 0;
}

bool elastic(const char* self) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / "replicator-consumer-elastic";
  fs::remove_all(folder);
  fs::create_directories(folder);
  replicator::launch::ElasticOptions options;
  options.processes = 2;
  options.max_restarts = 1;
  options.last_call = std::chrono::milliseconds(0);
  options.rdzv = "file://" + (folder / "rdzv" / "job").string();
  options.command = {self, "worker", folder.string()};
  const int rc = replicator::launch::run_elastic(options);
  const bool ok = rc == 0 && fs::exists(folder / "rank0.gen1") && fs::exists(folder / "rank1.gen1");
  fs::remove_all(folder);
  return ok;
}

#ifdef CONSUMER_WITH_TRAIN
struct FitResult : replicator::train::JobResult {
  std::int64_t first_step = 0;  // where the run started
};

// Fits a linear layer to y = x1 + x2 + x3 + x4 on synthetic rows, 2 replicas of 8 rows each,
// up to step `last`, with metrics.jsonl and a checkpoint every 2 steps in `out`.
FitResult fit(const std::filesystem::path& out, std::int64_t last) {
  namespace train = replicator::train;
  train::JobOptions options;
  options.config.local_replicas = 2;
  options.out = out;
  options.progress = false;
  options.checkpoint_every = 2;
  train::Job job(options);
  const std::int64_t rows = job.split_batch(16);
  return job.run([&](replicator::ReplicaContext& ctx) {
    auto model = job.build_model(ctx, [] { return ::torch::nn::Linear(4, 1); });
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), 0.05);
    replicator::torch::ReplicatedOptimizer optimizer(ctx, sgd);
    train::JobReplica replica(job, ctx, *model, {sgd.get()});
    FitResult result;
    replica.describe(result);
    result.first_step = replica.position().step;
    train::JobReporter* reporter = replica.report_until(last);
    std::int64_t step = replica.position().step;
    while (step < last) {
      // This replica's rows of the step's global batch: the same data for any resume.
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
    replica.checkpoint({.step = step});
    result.steps = step;
    result.digest = replica.finish(step, {.charts = [](const std::filesystem::path& metrics) {
                                     return train::charts_from_metrics(metrics, "step", {{"loss"}});
                                   }});
    return result;
  });
}

int lines_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

bool job_skeleton() {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / "replicator-consumer-train";
  fs::remove_all(folder);
  const FitResult first = fit(folder / "run", 4);
  const FitResult resumed = fit(folder / "run", 6);
  const FitResult whole = fit(folder / "whole", 6);
  const bool ok = first.first_step == 0 && first.steps == 4 && resumed.first_step == 4 &&
                  resumed.steps == 6 && resumed.replicas == 2 &&
                  fs::exists(folder / "run" / "checkpoint-000000006.pt") &&
                  fs::exists(folder / "run" / "curves.png") &&
                  lines_of(folder / "run" / "metrics.jsonl") == 6 &&
                  resumed.digest == whole.digest && first.digest != whole.digest;
  if (!ok) {
    std::printf("consumer: train started at %lld and %lld, ended at %lld and %lld; digests %s %s\n",
                static_cast<long long>(first.first_step),
                static_cast<long long>(resumed.first_step), static_cast<long long>(first.steps),
                static_cast<long long>(resumed.steps), resumed.digest.c_str(),
                whole.digest.c_str());
  }
  fs::remove_all(folder);
  return ok;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "worker") return worker(argv[2]);
  const bool ok_collectives = collectives();
  std::printf("consumer: collectives %s\n", ok_collectives ? "ok" : "wrong results");
  const bool ok_elastic = elastic(argv[0]);
  std::printf("consumer: elastic job %s\n",
              ok_elastic ? "restarted once and finished" : "did not finish as it should");
  bool ok_train = true;
#ifdef CONSUMER_WITH_TRAIN
  ok_train = job_skeleton();
  std::printf("consumer: job skeleton %s\n",
              ok_train ? "resumed from its checkpoint and ended as an uninterrupted run"
                       : "did not resume as it should");
#endif
  return ok_collectives && ok_elastic && ok_train ? 0 : 1;
}
