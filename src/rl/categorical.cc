#include "replicator/rl/categorical.h"

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "replicator/errors.h"

namespace replicator::rl {

void CategoricalSupport::check() const {
  if (num_atoms < 2 || !std::isfinite(v_min) || !std::isfinite(v_max) || !(v_min < v_max)) {
    throw InvalidArgument(
        "CategoricalSupport: needs num_atoms >= 2 and finite v_min < v_max, "
        "got " +
        std::to_string(num_atoms) + " atoms over [" + std::to_string(v_min) + ", " +
        std::to_string(v_max) + "]");
  }
}

::torch::Tensor CategoricalSupport::atoms(::torch::ScalarType dtype) const {
  check();
  // v_min + i Δz in double, so every atom is the double value rounded once.
  return (::torch::arange(num_atoms, ::torch::kFloat64) * delta() + v_min).to(dtype);
}

namespace {

void check_distributions(const ::torch::Tensor& t, const CategoricalSupport& support,
                         const char* call) {
  support.check();
  if (t.dim() != 2 || t.size(1) != support.num_atoms || !t.is_floating_point()) {
    throw InvalidArgument(std::string(call) + ": expected a floating [B, " +
                          std::to_string(support.num_atoms) + "] tensor, got " +
                          std::string(c10::toString(t.scalar_type())) + " of shape " +
                          c10::str(t.sizes()));
  }
}

}  // namespace

::torch::Tensor categorical_projection(const ::torch::Tensor& probabilities,
                                       const ::torch::Tensor& rewards,
                                       const ::torch::Tensor& discounts,
                                       const CategoricalSupport& support) {
  const char* call = "categorical_projection";
  check_distributions(probabilities, support, call);
  const std::int64_t B = probabilities.size(0);
  const std::int64_t N = support.num_atoms;
  for (const ::torch::Tensor* t : {&rewards, &discounts}) {
    if (t->dim() != 1 || t->size(0) != B) {
      throw InvalidArgument(std::string(call) + ": rewards and discounts must be [" +
                            std::to_string(B) + "], got " + c10::str(t->sizes()));
    }
  }
  // In double whatever the input: T z_j = r + γ z_j rounds to float's absolute error near the
  // support's edges (1e-6 at |z| = 10), a few parts in a million of Δz in every weight.
  const auto dtype = probabilities.scalar_type();
  const auto compute = ::torch::kFloat64;
  const ::torch::Tensor z = support.atoms(compute);
  // T z_j for every row: [B, N], clipped to the support.
  const ::torch::Tensor target_atoms =
      (rewards.to(compute).unsqueeze(1) + discounts.to(compute).unsqueeze(1) * z.unsqueeze(0))
          .clamp(support.v_min, support.v_max);
  // weight[b, i, j] = max(0, 1 − |T z_j − z_i| / Δz): the share of atom j's mass that lands
  // on atom i. Dense [B, N, N]; with N = 51 that is a few thousand values per row, cheaper
  // than a scatter and free of its order of additions.
  const ::torch::Tensor weight =
      (1 - (target_atoms.unsqueeze(1) - z.view({1, N, 1})).abs() / support.delta()).clamp_min(0);
  return ::torch::bmm(weight, probabilities.to(compute).unsqueeze(2)).squeeze(2).to(dtype);
}

::torch::Tensor categorical_mean(const ::torch::Tensor& logits, const CategoricalSupport& support) {
  check_distributions(logits, support, "categorical_mean");
  return (::torch::softmax(logits, 1) * support.atoms(logits.scalar_type())).sum(1);
}

}  // namespace replicator::rl
