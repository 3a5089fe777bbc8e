// Channels-last layout for a whole module (LibTorch's C++ Module has no `to(memory_format)`).
// On CPU, LibTorch's oneDNN convolutions with channels-last weights run channels last and
// skip reordering their input and weights on every call; cross-replica batch norm keeps
// that layout too.
#pragma once

#include <torch/nn/module.h>

namespace replicator::torch {

// Lays out every 4-dimensional parameter and buffer of `module` and its submodules channels
// last (MemoryFormat::ChannelsLast), in place: the same values, the same shapes, the same
// tensors (optimizers and hooks that hold them keep working; their gradients, if any, are
// left as they are). Other tensors are untouched. Call it before creating optimizers, whose
// state then takes the same layout. Does not block; throws only std::bad_alloc.
void to_channels_last(::torch::nn::Module& module);

}  // namespace replicator::torch
