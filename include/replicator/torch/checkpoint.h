// Checkpoints of a data-parallel training run: the model's parameters and buffers, the
// optimizers' states (one, or several for a loop with several, as a GAN's G and D), where the run
// is (step, epoch, next batch) and LibTorch's default CPU generator. Nothing in a checkpoint
// depends on the replica count (every replica holds the same model and optimizer state, and data
// positions count global batches), so a run can resume on a different number of replicas; with the
// same count it resumes bitwise.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace replicator::torch {

struct TrainingPosition {
  std::int64_t step = 0;   // optimizer steps taken
  std::int64_t epoch = 0;  // epoch of the next batch
  std::int64_t batch = 0;  // index of the next global batch within that epoch
  // What the run's bits depend on besides the checkpoint and its data, as the job states it
  // (e.g. its logical shards and kernel_conditions(), replicator/torch/cpu_kernels.h); empty
  // when it states none, and in checkpoints written before it was kept.
  std::string conditions;
};

// The optimizers of a checkpoint, in a fixed order (saved as "optimizer", "optimizer1", ...).
using Optimizers = std::vector<::torch::optim::Optimizer*>;

// Writes the checkpoint to `path` atomically: a temporary file in the same folder, flushed
// to disk, then renamed over `path` (a crash leaves the old checkpoint or the new one,
// never half of one). BLOCKS on file I/O. Throws DataError when the file cannot be written.
void save_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                     const Optimizers& optimizers, const TrainingPosition& position);
inline void save_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                            ::torch::optim::Optimizer& optimizer,
                            const TrainingPosition& position) {
  save_checkpoint(path, model, Optimizers{&optimizer}, position);
}

// Restores what save_checkpoint wrote into `model` and `optimizers` (built with the same
// architecture and parameter groups, as many as were saved) and LibTorch's default CPU
// generator, and returns the position. BLOCKS on file I/O. Throws DataError when the file is
// missing or corrupt, or does not fit the model or the number of optimizers.
TrainingPosition load_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                                 const Optimizers& optimizers);
inline TrainingPosition load_checkpoint(const std::filesystem::path& path,
                                        ::torch::nn::Module& model,
                                        ::torch::optim::Optimizer& optimizer) {
  return load_checkpoint(path, model, Optimizers{&optimizer});
}

// A folder of numbered checkpoints, "checkpoint-<step>.pt": a run saves one at each of its
// checkpoints and keeps the newest `keep`; a restarted run resumes from the newest one that
// loads. Not thread-safe: one writer (replica 0 of process 0).
class CheckpointFolder {
 public:
  // `keep` >= 1. Creates nothing until the first save.
  CheckpointFolder(std::filesystem::path dir, int keep);

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path path_for(std::int64_t step) const;

  // The folder's checkpoints, newest (highest step) first; none if the folder is missing.
  // Temporary files of a save that did not finish are not listed. Never throws but
  // std::bad_alloc.
  std::vector<std::filesystem::path> list() const;

  // save_checkpoint to path_for(position.step), then removes all but the newest `keep`.
  // BLOCKS on file I/O; throws DataError as save_checkpoint.
  void save(::torch::nn::Module& model, const Optimizers& optimizers,
            const TrainingPosition& position);
  void save(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
            const TrainingPosition& position) {
    save(model, Optimizers{&optimizer}, position);
  }

  // Loads the newest checkpoint that loads into `model` and `optimizers`, newest first; each
  // one that is torn or corrupt is skipped, after `warn` is called with a sentence naming
  // it and what is wrong. Returns the position and the file, or nullopt when the folder has
  // no checkpoint. Throws DataError when it has some but none loads (the message names
  // each). BLOCKS on file I/O.
  std::optional<std::pair<TrainingPosition, std::filesystem::path>> resume(
      ::torch::nn::Module& model, const Optimizers& optimizers,
      const std::function<void(const std::string&)>& warn);
  std::optional<std::pair<TrainingPosition, std::filesystem::path>> resume(
      ::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
      const std::function<void(const std::string&)>& warn) {
    return resume(model, Optimizers{&optimizer}, warn);
  }

 private:
  std::filesystem::path dir_;
  int keep_;
};

}  // namespace replicator::torch
