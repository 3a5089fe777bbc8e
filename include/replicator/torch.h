// The LibTorch layer (target replicator::torch): tensor collectives, gradient reduction,
// cross-replica batch norm (also class-conditional), spectral norm, moving averages of
// weights, checkpoints, sample-quality measures (Fréchet distance, GAN-test accuracy).
#pragma once

#include "replicator/torch/batch_norm.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/conditional_batch_norm.h"
#include "replicator/torch/cpu_kernels.h"
#include "replicator/torch/ema.h"
#include "replicator/torch/frechet.h"
#include "replicator/torch/gradient_reducer.h"
#include "replicator/torch/memory_format.h"
#include "replicator/torch/sample_quality.h"
#include "replicator/torch/shard_gradients.h"
#include "replicator/torch/spectral_norm.h"
#include "replicator/torch/tensor_collectives.h"
