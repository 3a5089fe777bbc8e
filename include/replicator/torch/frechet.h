// The Fréchet distance between two Gaussians fitted to feature vectors (Heusel et al. 2017,
// the "FID" when the features are Inception's; replicator/torch/sample_quality.h measures
// it between sets of images through a network of the caller's):
//   FD = |μa − μb|² + tr Σa + tr Σb − 2 tr((Σa^½ Σb Σa^½)^½),
// in double throughout, the symmetric square roots from eigendecompositions.
// Pure functions of their arguments; safe to call from any thread.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace replicator::torch {

struct GaussianStats {
  ::torch::Tensor mean;        // double [D]
  ::torch::Tensor covariance;  // double [D, D], unbiased (divided by count − 1)
  std::int64_t count = 0;      // examples they were computed from
};

// The mean and unbiased covariance of `features` [N, D] (any floating dtype, on the CPU;
// computed in double). Throws InvalidArgument unless `features` is 2-D with N >= 2.
GaussianStats gaussian_stats(const ::torch::Tensor& features);

// The Fréchet distance between N(a.mean, a.covariance) and N(b.mean, b.covariance); >= 0 up
// to rounding (about 1e-12 of the traces). Throws InvalidArgument when the dimensions
// differ, a tensor has the wrong shape, or either count is below 2.
double frechet_distance(const GaussianStats& a, const GaussianStats& b);

}  // namespace replicator::torch
