#include "replicator/torch/memory_format.h"

#include <torch/torch.h>

#include "replicator/errors.h"

namespace replicator::torch {
namespace {

void lay_out(::torch::Tensor& t, c10::MemoryFormat format) {
  if (!t.defined() || t.dim() != 4 || t.is_contiguous(format)) return;
  t.set_data(t.data().contiguous(format));
}

}  // namespace

void to_memory_format(::torch::nn::Module& module, c10::MemoryFormat format) {
  if (format != c10::MemoryFormat::ChannelsLast && format != c10::MemoryFormat::Contiguous) {
    throw InvalidArgument("to_memory_format: only ChannelsLast and Contiguous");
  }
  const ::torch::NoGradGuard no_grad;
  for (::torch::Tensor& p : module.parameters()) lay_out(p, format);
  for (::torch::Tensor& b : module.buffers()) lay_out(b, format);
}

}  // namespace replicator::torch
