// Categorical (C51) value distributions over a fixed support, and the projection of a
// distributional Bellman target onto that support (Bellemare, Dabney and Munos 2017,
// "A Distributional Perspective on Reinforcement Learning", Algorithm 1), batched.
//
// The support is N atoms z_i = v_min + i Δz, Δz = (v_max − v_min) / (N − 1). The target of a
// transition with reward r and discount γ (the n-step return and γ^n, or 0 after a
// termination) moves the mass p_j of atom z_j to T z_j = clip(r + γ z_j, v_min, v_max) and
// splits it between the two atoms around it in proportion to closeness:
//   m_i = Σ_j p_j · max(0, 1 − |T z_j − z_i| / Δz)
// which is Algorithm 1's lower/upper split (a T z_j that falls exactly on an atom gives all
// its mass to that atom). docs/d4pg.md works an example through.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace replicator::rl {

struct CategoricalSupport {
  double v_min = -150;
  double v_max = 150;
  std::int64_t num_atoms = 51;

  double delta() const { return (v_max - v_min) / static_cast<double>(num_atoms - 1); }
  // The atoms z_0 .. z_{N-1} as a [N] tensor of `dtype` (computed in double, then rounded).
  // Throws InvalidArgument when check() would.
  ::torch::Tensor atoms(::torch::ScalarType dtype = ::torch::kFloat32) const;
  // Throws InvalidArgument unless num_atoms >= 2 and v_min < v_max (both finite).
  void check() const;
};

// Projects the shifted target distributions onto `support`: `probabilities` [B, N] (each
// row a distribution over the atoms), `rewards` and `discounts` [B] (discounts >= 0). Returns
// [B, N] in probabilities' dtype, computed in double; each row sums to its input row's sum
// (up to rounding).
// Differentiable in the probabilities (a learner's target calls it under NoGradGuard).
// Never blocks. Throws InvalidArgument for a bad support, a non-floating dtype or shapes
// that do not match.
::torch::Tensor categorical_projection(const ::torch::Tensor& probabilities,
                                       const ::torch::Tensor& rewards,
                                       const ::torch::Tensor& discounts,
                                       const CategoricalSupport& support);

// The mean of each distribution given by `logits` [B, N] over `support`: Σ_i softmax_i z_i,
// [B]. Differentiable. Throws InvalidArgument as categorical_projection.
::torch::Tensor categorical_mean(const ::torch::Tensor& logits, const CategoricalSupport& support);

}  // namespace replicator::rl
