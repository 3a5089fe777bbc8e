// The memory layout of a whole module's 4-dimensional tensors (LibTorch's C++ Module has no
// `to(memory_format)`). On CPU, LibTorch's oneDNN convolutions with channels-last weights
// run channels last and skip reordering their input and weights on every call;
// cross-replica batch norm keeps either layout in its own loops.
#pragma once

#include <c10/core/MemoryFormat.h>
#include <torch/nn/module.h>

namespace replicator::torch {

// Lays out every 4-dimensional parameter and buffer of `module` and its submodules in
// `format` (MemoryFormat::ChannelsLast or MemoryFormat::Contiguous), in place: the same
// values, the same shapes, the same tensors (optimizers, their state and gradient hooks that
// hold them keep working; gradients are left as they are). Tensors already laid out so, and
// tensors of other ranks, are untouched. Call it before a training step, not during one: it
// is not safe while the module is used on another thread. Does not block. Throws
// InvalidArgument for another format, c10::Error when memory runs out.
void to_memory_format(::torch::nn::Module& module, c10::MemoryFormat format);

// MemoryFormat::ChannelsLast when `channels_last`, else MemoryFormat::Contiguous (what a
// job's --memory-format names). Never throws.
inline c10::MemoryFormat memory_format_of(bool channels_last) {
  return channels_last ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
}

}  // namespace replicator::torch
