#include "replicator/torch/frechet.h"

#include <torch/torch.h>

#include <string>

#include "replicator/errors.h"

namespace replicator::torch {
namespace {

// (m + mᵀ)/2: the products below are symmetric up to rounding; eigh reads one triangle only.
::torch::Tensor symmetric(const ::torch::Tensor& m) { return 0.5 * (m + m.t()); }

// The symmetric positive semi-definite square root of a covariance; negative eigenvalues
// (rounding of a semi-definite matrix) count as 0.
::torch::Tensor sqrt_psd(const ::torch::Tensor& m) {
  const auto [values, vectors] = at::linalg_eigh(symmetric(m));
  return (vectors * values.clamp_min(0).sqrt().unsqueeze(0)).mm(vectors.t());
}

std::string shape_text(const ::torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string text = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(t.size(i));
  }
  return text + "]";
}

void check_stats(const GaussianStats& s, const char* which) {
  const bool shaped = s.mean.defined() && s.covariance.defined() && s.mean.dim() == 1 &&
                      s.covariance.dim() == 2 && s.covariance.size(0) == s.mean.size(0) &&
                      s.covariance.size(1) == s.mean.size(0);
  if (!shaped) {
    throw InvalidArgument(std::string("Fréchet distance: the ") + which +
                          " statistics need a mean [D] and a covariance [D, D], got " +
                          shape_text(s.mean) + " and " + shape_text(s.covariance));
  }
  if (s.count < 2) {
    throw InvalidArgument(std::string("Fréchet distance: the ") + which + " statistics come from " +
                          std::to_string(s.count) + " examples; a covariance needs at least 2");
  }
}

}  // namespace

GaussianStats gaussian_stats(const ::torch::Tensor& features) {
  if (!features.defined() || features.dim() != 2 || features.size(0) < 2) {
    throw InvalidArgument("Gaussian statistics need features [N, D] with N >= 2, got " +
                          shape_text(features));
  }
  const ::torch::Tensor x = features.to(::torch::kDouble);
  const std::int64_t n = x.size(0);
  const ::torch::Tensor mean = x.mean(0);
  const ::torch::Tensor centred = x - mean;
  const ::torch::Tensor covariance = centred.t().mm(centred) / static_cast<double>(n - 1);
  return {.mean = mean, .covariance = covariance, .count = n};
}

double frechet_distance(const GaussianStats& a, const GaussianStats& b) {
  check_stats(a, "first");
  check_stats(b, "second");
  if (a.mean.size(0) != b.mean.size(0)) {
    throw InvalidArgument("Fréchet distance between features of different dimensions: " +
                          std::to_string(a.mean.size(0)) + " and " +
                          std::to_string(b.mean.size(0)));
  }
  const ::torch::Tensor sa = a.covariance.to(::torch::kDouble);
  const ::torch::Tensor sb = b.covariance.to(::torch::kDouble);
  const ::torch::Tensor root_a = sqrt_psd(sa);
  // Σa^½ Σb Σa^½ is symmetric positive semi-definite and has the eigenvalues of Σa Σb.
  const double trace_root = at::linalg_eigvalsh(symmetric(root_a.mm(sb).mm(root_a)))
                                .clamp_min(0)
                                .sqrt()
                                .sum()
                                .item<double>();
  const double mean_term =
      (a.mean.to(::torch::kDouble) - b.mean.to(::torch::kDouble)).square().sum().item<double>();
  return mean_term + sa.trace().item<double>() + sb.trace().item<double>() - 2 * trace_root;
}

}  // namespace replicator::torch
