// Per-channel loops of cross-replica batch norm over contiguous float32 data of N examples,
// C channels and S positions (S = the product of the spatial sizes), laid out as [N, C, S]
// (LibTorch's contiguous format) or as [N, S, C] (channels last). Each is one pass over the
// activations; sums accumulate in double (vectorised with `omp simd`: along S in [N, C, S],
// across the channels in [N, S, C]).
#pragma once

#include <cstdint>

namespace replicator::torch::detail {

struct Shape {
  std::int64_t n, c, s;
  bool channels_last = false;  // [N, S, C] in memory instead of [N, C, S]
};

// sum[c] = Σ (x − shift[c]), sumsq[c] = Σ (x − shift[c])², over the n·s values of channel c.
void shifted_channel_sums(const float* x, Shape shape, const float* shift, double* sum,
                          double* sumsq);

// y = x·scale[c] + offset[c].
void channel_affine(const float* x, Shape shape, const float* scale, const float* offset, float* y);

// sum_dy[c] = Σ dy, sum_dy_centered[c] = Σ dy·(x − center[c]).
void gradient_sums(const float* dy, const float* x, Shape shape, const float* center,
                   double* sum_dy, double* sum_dy_centered);

// dx = dy·a[c] + x·b[c] + k[c].
void input_gradient(const float* dy, const float* x, Shape shape, const float* a, const float* b,
                    const float* k, float* dx);

}  // namespace replicator::torch::detail
