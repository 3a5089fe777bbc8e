#include "replicator/train/job.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <string>
#include <utility>

#include "replicator/errors.h"
#include "replicator/torch/cpu_kernels.h"

namespace replicator::train {
namespace {

namespace rt = replicator::torch;

JobOptions checked(JobOptions o) {
  if (o.threads < 1) {
    throw InvalidArgument("threads must be at least 1, got " + std::to_string(o.threads));
  }
  if (o.keep_checkpoints < 1) {
    throw InvalidArgument("keep_checkpoints must be at least 1, got " +
                          std::to_string(o.keep_checkpoints));
  }
  // Before the Replicator: its worker threads are where LibTorch runs, beside a job's own
  // threads (the actors).
  at::set_num_threads(o.threads);
  rt::prepare_cpu_kernels();
  return o;
}

}  // namespace

Job::Job(JobOptions options)
    : options_(checked(std::move(options))), replicator_(options_.config) {}

std::int64_t Job::split_batch(std::int64_t batch, const std::string& what) const {
  const int R = num_replicas();
  if (batch % R != 0) {
    throw InvalidArgument("the " + what + " (" + std::to_string(batch) +
                          ") must be a multiple of the number of replicas (" + std::to_string(R) +
                          ")");
  }
  return batch / R;
}

void Job::state_conditions(const std::string& terms) {
  conditions_ = terms;
  conditions_ += "; ";
  conditions_ += rt::kernel_conditions();
}

void Job::state_shards(int shards, std::int64_t batch, const std::string& unit) {
  state_conditions(std::to_string(shards) + " shards of a batch of " + std::to_string(batch) +
                   (unit.empty() ? "" : " " + unit));
}

JobReplica::JobReplica(Job& job, ReplicaContext& ctx, ::torch::nn::Module& model,
                       rt::Optimizers optimizers)
    : job_(job), ctx_(ctx), model_(model), optimizers_(std::move(optimizers)) {
  const JobOptions& o = job_.options();
  if (!o.out.empty()) folder_.emplace(o.out, o.keep_checkpoints);
  position_ = resume_job(ctx_, o.resume, folder_ ? &*folder_ : nullptr, model_, optimizers_);
  const std::string& wanted = job_.conditions();
  if (!wanted.empty() && !position_.conditions.empty() && position_.conditions != wanted) {
    const std::string from = (o.resume.empty() ? o.out : o.resume).string();
    throw DataError("the checkpoint at step " + std::to_string(position_.step) + " (" + from +
                        ") was written under \"" + position_.conditions +
                        "\", and this run is under \"" + wanted +
                        "\": its steps would not continue the same bits. Resume under the "
                        "checkpoint's conditions, or start afresh with another --out",
                    from);
  }
}

void JobReplica::describe(JobResult& result) const {
  result.reporter = ctx_.replica_id() == 0;
  result.replicas = ctx_.num_replicas();
  result.local_replicas = ctx_.num_local_replicas();
  result.processes = ctx_.num_replicas() / ctx_.num_local_replicas();
}

JobReporter* JobReplica::report_until(std::int64_t last_step) {
  const JobOptions& o = job_.options();
  if (ctx_.replica_id() != 0 || o.quiet) return nullptr;
  reporter_.emplace(
      JobReporterOptions{.out = o.out,
                         .tensorboard = o.tensorboard,
                         .progress = o.progress,
                         .resume_step = position_.step,
                         .steps_to_run = std::max<std::int64_t>(0, last_step - position_.step)});
  return &*reporter_;
}

void JobReplica::checkpoint(const rt::TrainingPosition& at) {
  if (!writes_checkpoints() || !folder_) return;
  rt::TrainingPosition stated = at;
  stated.conditions = job_.conditions();
  folder_->save(model_, optimizers_, stated);
}

std::string JobReplica::finish(std::int64_t step, const JobPicture& picture) {
  if (reporter_) {
    if (!job_.options().out.empty() && picture.charts) {
      const std::vector<Chart> charts = picture.charts(reporter_->metrics_path());
      if (!charts.empty()) reporter_->picture(picture.name, step, render_charts(charts));
    }
    reporter_->finish();
  }
  return check_replicas_agree(ctx_, model_);
}

}  // namespace replicator::train
