// The job skeleton: what every training job does around its own model and loop, so that a
// job is its model, its step and its records. A Job (one per process) sets LibTorch's
// intra-op threads, starts the Replicator, splits a global batch over the replicas, builds the
// model from the seed on every replica and runs the per-replica part. A JobReplica (one per
// replica, in that part) resumes from a checkpoint, holds the reporter on replica 0, writes
// checkpoints from there, and at the end draws the curves from metrics.jsonl, closes the
// files and checks that every replica ends with the same parameters.
//
// A worked example: a linear model on synthetic data, 2 replicas as threads, checkpoints and
// metrics.jsonl in "run" (run it again and it continues from its last checkpoint):
//
//   namespace rt = replicator::torch;
//   namespace train = replicator::train;
//   train::JobOptions options;
//   options.config.local_replicas = 2;
//   options.out = "run";
//   train::Job job(options);
//   const std::int64_t rows = job.split_batch(64);  // InvalidArgument unless R divides 64
//   const std::int64_t last = 100;
//   const train::JobResult result = job.run([&](replicator::ReplicaContext& ctx) {
//     auto model = job.build_model(ctx, [] { return ::torch::nn::Linear(8, 1); });
//     auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), 0.1);
//     rt::ReplicatedOptimizer optimizer(ctx, sgd);
//     train::JobReplica replica(job, ctx, *model, {sgd.get()});
//     train::JobResult mine;
//     replica.describe(mine);
//     train::JobReporter* reporter = replica.report_until(last);  // null but on replica 0
//     std::int64_t step = replica.position().step;
//     while (step < last) {
//       const ::torch::Tensor x = my_rows(step, ctx.replica_id(), rows);
//       optimizer.zero_grad();
//       const ::torch::Tensor loss = (model(x) - x.sum(1, true)).pow(2).mean();
//       loss.backward();
//       optimizer.step();
//       ++step;
//       replica.count_step();
//       if (reporter) reporter->metric({{"type", "train"}, {"step", step},
//                                       {"loss", loss.item<double>()}});
//       if (step % 10 == 0) replica.checkpoint({.step = step});
//     }
//     replica.checkpoint({.step = step});
//     mine.steps = step;
//     mine.digest = replica.finish(step, {.charts = [](const std::filesystem::path& metrics) {
//       return train::charts_from_metrics(metrics, "step", {{"loss"}});
//     }});
//     return mine;
//   });
#pragma once

#include <torch/nn/module.h>
#include <torch/utils.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "replicator/replica_context.h"
#include "replicator/replicator.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/gradient_reducer.h"
#include "replicator/torch/tensor_collectives.h"
#include "replicator/train/job_checkpoint.h"
#include "replicator/train/job_options.h"
#include "replicator/train/plot.h"
#include "replicator/train/reporter.h"

namespace replicator::train {

// One per process: a job's Replicator and what its replicas share. Not copyable.
class Job {
 public:
  // Sets LibTorch's intra-op threads of this process to options.threads and starts the
  // Replicator on options.config (mpi and gloo: BLOCKS until every process has come). Throws
  // InvalidArgument (threads or keep_checkpoints below 1) and what Replicator throws.
  explicit Job(JobOptions options);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const JobOptions& options() const { return options_; }
  Replicator& replicator() { return replicator_; }
  int num_replicas() const { return replicator_.num_replicas(); }
  int num_local_replicas() const { return replicator_.num_local_replicas(); }
  int num_processes() const { return num_replicas() / num_local_replicas(); }

  // The rows of `batch` (a global batch) that each replica takes. Throws InvalidArgument
  // ("the <what> (<batch>) must be a multiple of the number of replicas (<R>)") when the
  // replicas do not divide it.
  std::int64_t split_batch(std::int64_t batch, const std::string& what = "global batch") const;

  // States what the job's bits depend on beyond its checkpoint and its data, in the job's
  // own terms (e.g. "8 shards of a batch of 64"), to which this process's
  // kernel_conditions() are added (replicator/torch/cpu_kernels.h): every JobReplica writes
  // the text into its checkpoints and refuses to resume from a checkpoint that states
  // other conditions. Call before run(). Never blocks or throws.
  void state_conditions(const std::string& terms);
  // state_conditions() for a job whose step is split into `shards` logical shards of a
  // global batch of `batch` (`unit`, e.g. "unrolls", after the count when given): "8 shards
  // of a batch of 64". Call before run(). Never blocks or throws.
  void state_shards(int shards, std::int64_t batch, const std::string& unit = "");
  // What state_conditions() made of its terms; empty before (nothing is checked then).
  const std::string& conditions() const { return conditions_; }

  // The model of replica `ctx`: make() called under a lock with LibTorch's default generator
  // seeded from options().seed (the generator is shared by the replica threads), so that
  // every replica builds the same one; then replica 0's parameters and buffers broadcast
  // anyway. `make` returns a module holder (torch::nn::Linear, a TORCH_MODULE). A
  // collective: every replica calls it; BLOCKS until all have. Throws what make and
  // broadcast_parameters throw.
  template <typename Make>
  auto build_model(ReplicaContext& ctx, Make&& make) {
    decltype(make()) model{nullptr};
    {
      const std::lock_guard<std::mutex> lock(init_mutex_);
      ::torch::manual_seed(options_.seed);
      model = make();
    }
    replicator::torch::broadcast_parameters(ctx, *model);
    return model;
  }

  // Runs `replica_job(ctx)` (returning a JobResult or a struct derived from it) on every
  // replica and returns the result of replica 0 when this process holds it, else its local
  // replica 0's. LibTorch's errors become replicator::Error. BLOCKS for the whole run; throws
  // what the replicas throw (run_job_replicas).
  template <typename ReplicaJob>
  auto run(ReplicaJob&& replica_job) {
    return run_job_replicas(replicator_, std::forward<ReplicaJob>(replica_job));
  }

 private:
  JobOptions options_;
  Replicator replicator_;
  std::mutex init_mutex_;
  std::string conditions_;
};

// The picture a job draws at its end from its metrics.jsonl (which holds the steps before a
// resume too): `charts` returns the charts, and none when there is nothing to draw.
struct JobPicture {
  std::string name = "curves";  // <out>/<name>.png and the TensorBoard image <name>
  std::function<std::vector<Chart>(const std::filesystem::path& metrics)> charts;
};

// A job on one replica, made in the per-replica part of Job::run. Used by that replica's
// thread only.
class JobReplica {
 public:
  // Loads where the job starts from into `model` and `optimizers` (resume_job): the
  // checkpoint options().resume, else the newest in options().out that loads, else afresh;
  // then checks that every replica starts at the same step. A collective: every replica
  // calls it; BLOCKS on file I/O and until all have. Throws DataError (a checkpoint that does
  // not load, replicas at different steps, a checkpoint whose stated conditions differ from
  // the job's: Job::state_conditions) and what all_reduce throws. `model` and the
  // optimizers must outlive this object.
  JobReplica(Job& job, ReplicaContext& ctx, ::torch::nn::Module& model,
             replicator::torch::Optimizers optimizers);

  ReplicaContext& ctx() { return ctx_; }
  // Where this run starts (step 0 and no position afresh).
  const replicator::torch::TrainingPosition& position() const { return position_; }
  // Fills the fields every result has but steps, seconds and digest, for this replica
  // (reporter: it is replica 0).
  void describe(JobResult& result) const;
  // Whether this replica writes the checkpoints (replica 0).
  bool writes_checkpoints() const { return ctx_.replica_id() == 0; }

  // Starts the reporter on replica 0 (unless options().quiet) for a run that ends at
  // `last_step` (its pace and ETA count the steps from position().step), with metrics.jsonl
  // in options().out cut back to position().step, and returns it; null on the other
  // replicas. BLOCKS on file I/O. Throws DataError when a file cannot be written.
  JobReporter* report_until(std::int64_t last_step);
  // The reporter of report_until (null before it, on other replicas and when quiet).
  JobReporter* reporter() { return reporter_ ? &*reporter_ : nullptr; }
  // One more step taken by this run (the reporter's pace and ETA).
  void count_step() {
    if (reporter_) reporter_->count_step();
  }

  // Writes a checkpoint of the model and the optimizers at `at` into options().out (keeping
  // the newest keep_checkpoints) on replica 0; nothing on the others or without `out`.
  // Never communicates. BLOCKS on file I/O. Throws DataError when it cannot be written.
  void checkpoint(const replicator::torch::TrainingPosition& at);

  // Ends the run on this replica: on the reporter, draws `picture` at `step` when out is set
  // and it has charts, and closes the files; then checks that every replica ends with the
  // same parameters and buffers and returns their digest (check_replicas_agree). A
  // collective: every replica calls it; BLOCKS. Throws Error naming a replica that differs,
  // DataError when the picture cannot be written, and what all_gather throws.
  std::string finish(std::int64_t step, const JobPicture& picture = {});

 private:
  Job& job_;
  ReplicaContext& ctx_;
  ::torch::nn::Module& model_;
  replicator::torch::Optimizers optimizers_;
  std::optional<replicator::torch::CheckpointFolder> folder_;
  replicator::torch::TrainingPosition position_;
  std::optional<JobReporter> reporter_;
};

}  // namespace replicator::train
