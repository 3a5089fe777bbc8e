// An exponential moving average of a module's weights (BigGAN samples from such a copy of
// its generator), and "standing statistics" for the batch norms of a module used in eval.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace replicator::torch {

struct EmaOptions {
  double decay = 0.999;         // in [0, 1)
  std::int64_t start_step = 0;  // before it, update() copies the source
};

// Keeps `target` (a module of the same architecture as `source`, e.g. built from the same
// options) the moving average of `source`:
//   step < start_step:  target ← source
//   else:               target ← decay · target + (1 − decay) · source   (parameters)
// Buffers (batch-norm running statistics, spectral-norm vectors) are copied. Holds
// references: both modules must outlive it. Never communicates: replicas that update from
// equal sources keep equal targets.
class ModuleEma {
 public:
  // Throws InvalidArgument for a decay outside [0, 1) or modules whose parameters or
  // buffers differ in names or shapes. Copies `source` into `target`.
  ModuleEma(::torch::nn::Module& source, ::torch::nn::Module& target, EmaOptions options = {});

  // One update after optimizer step `step` (the count of steps taken). Never throws but
  // std::bad_alloc.
  void update(std::int64_t step);

  const EmaOptions& options() const { return options_; }

 private:
  EmaOptions options_;
  std::vector<::torch::Tensor> source_params_, target_params_;
  std::vector<::torch::Tensor> source_buffers_, target_buffers_;
};

// Standing statistics (BigGAN, appendix): resets the running statistics of every batch norm
// in `module` (CrossReplicaBatchNorm1d/2d, also inside ConditionalBatchNorm2d), then calls
// `forward_batch(i)` for i in [0, batches) with the module in training mode and no gradient,
// each batch weighted equally (cumulative average: momentum 1/(i+1)); restores the
// momenta and puts the module in eval mode. The running variance is then the mean of the
// batches' unbiased variances. In a replicated run the batch norms take global statistics,
// so it is a collective: every replica calls it with the same `batches`; it BLOCKS and
// throws what forward_batch throws. Throws InvalidArgument for batches < 1.
void standing_statistics(::torch::nn::Module& module, int batches,
                         const std::function<void(int)>& forward_batch);

}  // namespace replicator::torch
