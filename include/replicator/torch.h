// The LibTorch layer (target replicator::torch): tensor collectives, gradient reduction,
// cross-replica batch norm, checkpoints.
#pragma once

#include "replicator/torch/batch_norm.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/gradient_reducer.h"
#include "replicator/torch/tensor_collectives.h"
