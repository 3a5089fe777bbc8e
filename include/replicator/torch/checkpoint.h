// Checkpoints of a data-parallel training run: the model's parameters and buffers, the
// optimizer's state, where the run is (step, epoch, next batch) and LibTorch's default CPU
// generator. Nothing in a checkpoint depends on the replica count (every replica holds the
// same model and optimizer state, and data positions count global batches), so a run can
// resume on a different number of replicas; with the same count it resumes bitwise.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>

namespace replicator::torch {

struct TrainingPosition {
  std::int64_t step = 0;   // optimizer steps taken
  std::int64_t epoch = 0;  // epoch of the next batch
  std::int64_t batch = 0;  // index of the next global batch within that epoch
};

// Writes the checkpoint to `path` atomically: a temporary file in the same folder, flushed
// to disk, then renamed over `path` (a crash leaves the old checkpoint or the new one,
// never half of one). BLOCKS on file I/O. Throws DataError when the file cannot be written.
void save_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                     ::torch::optim::Optimizer& optimizer, const TrainingPosition& position);

// Restores what save_checkpoint wrote into `model` and `optimizer` (built with the same
// architecture and parameter groups) and LibTorch's default CPU generator, and returns
// the position. BLOCKS on file I/O. Throws DataError when the file is missing or corrupt,
// or does not fit the model.
TrainingPosition load_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                                 ::torch::optim::Optimizer& optimizer);

}  // namespace replicator::torch
