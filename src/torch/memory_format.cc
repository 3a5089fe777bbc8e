#include "replicator/torch/memory_format.h"

#include <torch/torch.h>

namespace replicator::torch {
namespace {

void lay_out_channels_last(::torch::Tensor& t) {
  if (!t.defined() || t.dim() != 4) return;
  t.set_data(t.data().contiguous(::torch::MemoryFormat::ChannelsLast));
}

}  // namespace

void to_channels_last(::torch::nn::Module& module) {
  const ::torch::NoGradGuard no_grad;
  for (::torch::Tensor& p : module.parameters()) lay_out_channels_last(p);
  for (::torch::Tensor& b : module.buffers()) lay_out_channels_last(b);
}

}  // namespace replicator::torch
