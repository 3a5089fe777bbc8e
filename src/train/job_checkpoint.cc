#include "replicator/train/job_checkpoint.h"

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/train/reporter.h"

namespace replicator::train {

replicator::torch::TrainingPosition resume_job(ReplicaContext& ctx,
                                               const std::filesystem::path& resume,
                                               replicator::torch::CheckpointFolder* folder,
                                               ::torch::nn::Module& model,
                                               const replicator::torch::Optimizers& optimizers) {
  const bool reporter = ctx.replica_id() == 0;
  replicator::torch::TrainingPosition position;
  if (!resume.empty()) {
    position = replicator::torch::load_checkpoint(resume, model, optimizers);
  } else if (folder != nullptr) {
    const auto warn = [&](const std::string& what) {
      if (reporter) std::fprintf(stderr, "warning: %s\n", what.c_str());
    };
    // A restarted job continues where it stopped: nothing repeated, nothing lost.
    if (const auto resumed = folder->resume(model, optimizers, warn)) {
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

namespace {

// FNV-1a over every parameter's and buffer's bytes (copied to the host from a device).
std::uint64_t digest_of(::torch::nn::Module& model) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto add = [&](const ::torch::Tensor& t) {
    const ::torch::Tensor c = t.to(::torch::kCPU).contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (std::int64_t i = 0; i < c.numel() * static_cast<std::int64_t>(c.element_size()); ++i) {
      h = (h ^ p[i]) * 0x100000001b3ULL;
    }
  };
  for (const ::torch::Tensor& t : model.parameters()) add(t);
  for (const ::torch::Tensor& t : model.buffers()) add(t);
  return h;
}

std::string hex(std::uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

std::string check_replicas_agree(ReplicaContext& ctx, ::torch::nn::Module& model) {
  const std::uint64_t mine = digest_of(model);
  const int R = ctx.num_replicas();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(R));
  ctx.all_gather(std::span(reinterpret_cast<const std::int64_t*>(&mine), 1),
                 std::span(reinterpret_cast<std::int64_t*>(all.data()), all.size()));
  for (int r = 0; r < R; ++r) {
    if (all[static_cast<std::size_t>(r)] != mine) {
      throw Error("replica " + std::to_string(r) +
                  " ended with parameters different from replica " +
                  std::to_string(ctx.replica_id()) + "'s (digest " +
                  hex(all[static_cast<std::size_t>(r)]) + " vs " + hex(mine) + ")");
    }
  }
  return hex(mine);
}

}  // namespace replicator::train
