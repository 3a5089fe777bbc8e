// The LibTorch glue every training job shares: where a run starts from, and the check that
// every replica ends with the same parameters. The checkpoints themselves are
// replicator::torch's (save_checkpoint, CheckpointFolder).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "replicator/errors.h"
#include "replicator/replica_context.h"
#include "replicator/replicator.h"
#include "replicator/torch/checkpoint.h"

namespace replicator::train {

// Loads where a job starts from into `model` and `optimizers`, on every replica: the
// checkpoint `resume` when given, else the newest checkpoint of `folder` that loads (a torn
// one is skipped with a warning on stderr), else nothing (afresh, step 0). Replica 0 prints
// "resuming from FILE (step N)" and the warnings. Then checks that every replica starts
// from the same step (check_same_start_step). A collective: every replica calls it; BLOCKS
// on file I/O and until all have called. Throws DataError (a checkpoint that does not load,
// a folder where none loads, replicas at different steps) and what all_reduce throws.
replicator::torch::TrainingPosition resume_job(ReplicaContext& ctx,
                                               const std::filesystem::path& resume,
                                               replicator::torch::CheckpointFolder* folder,
                                               ::torch::nn::Module& model,
                                               const replicator::torch::Optimizers& optimizers);
inline replicator::torch::TrainingPosition resume_job(ReplicaContext& ctx,
                                                      const std::filesystem::path& resume,
                                                      replicator::torch::CheckpointFolder* folder,
                                                      ::torch::nn::Module& model,
                                                      ::torch::optim::Optimizer& optimizer) {
  return resume_job(ctx, resume, folder, model, replicator::torch::Optimizers{&optimizer});
}

// Runs `replica_job(ctx)` on every replica of `replicator` and returns the result of the
// replica whose `reporter` field is true on this process (replica 0's process), else local
// replica 0's. LibTorch's errors become replicator::Error with their sentence (LibTorch's
// messages carry a C++ backtrace). BLOCKS for the whole run; throws what the replicas throw.
template <typename ReplicaJob>
auto run_job_replicas(Replicator& replicator, ReplicaJob&& replica_job) {
  auto results = replicator.run([&](ReplicaContext& ctx) {
    try {
      return replica_job(ctx);
    } catch (const c10::Error& e) {
      throw Error(std::string("LibTorch: ") + e.what_without_backtrace());
    }
  });
  for (int local = 0; local < replicator.num_local_replicas(); ++local) {
    if (results[local].reporter) return results[local];
  }
  return results[0];
}

// Checks that every replica ends with the same parameters and buffers (a difference would be
// a silent divergence) and returns their digest as 16 hex digits (FNV-1a over their bytes).
// A collective: every replica calls it; BLOCKS until all have. Throws Error naming a replica
// whose digest differs, and what all_gather throws.
std::string check_replicas_agree(ReplicaContext& ctx, ::torch::nn::Module& model);

}  // namespace replicator::train
