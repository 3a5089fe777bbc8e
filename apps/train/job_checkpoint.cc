#include "apps/train/job_checkpoint.h"

#include <cstdio>
#include <string>

#include "apps/train/job.h"

namespace replicator::apps {

replicator::torch::TrainingPosition resume_job(ReplicaContext& ctx,
                                               const std::filesystem::path& resume,
                                               replicator::torch::CheckpointFolder* folder,
                                               ::torch::nn::Module& model,
                                               ::torch::optim::Optimizer& optimizer) {
  const bool reporter = ctx.replica_id() == 0;
  replicator::torch::TrainingPosition position;
  if (!resume.empty()) {
    position = replicator::torch::load_checkpoint(resume, model, optimizer);
  } else if (folder != nullptr) {
    const auto warn = [&](const std::string& what) {
      if (reporter) std::fprintf(stderr, "warning: %s\n", what.c_str());
    };
    // A restarted job continues where it stopped: nothing repeated, nothing lost.
    if (const auto resumed = folder->resume(model, optimizer, warn)) {
      position = resumed->first;
      if (reporter) {
        std::fprintf(stderr, "resuming from %s (step %lld)\n", resumed->second.c_str(),
                     static_cast<long long>(position.step));
      }
    }
  }
  check_same_start_step(ctx, position.step, folder != nullptr ? folder->dir() : resume);
  return position;
}

}  // namespace replicator::apps
