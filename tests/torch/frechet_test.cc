// Tests of the Fréchet distance (replicator/torch/frechet.h) against closed forms: a set
// with itself, shifted means, diagonal covariances, a non-commuting 2x2 pair, one sampled
// pair; its errors.
#include "replicator/torch/frechet.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "replicator/errors.h"

namespace {

namespace rt = replicator::torch;
using replicator::InvalidArgument;
using rt::GaussianStats;

torch::Tensor doubles(std::initializer_list<double> values) {
  return torch::tensor(std::vector<double>(values), torch::kDouble);
}

GaussianStats stats(torch::Tensor mean, torch::Tensor covariance) {
  return {.mean = std::move(mean), .covariance = std::move(covariance), .count = 1000};
}

// A random symmetric positive definite matrix.
torch::Tensor random_covariance(std::int64_t d, std::uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  const torch::Tensor a = at::randn({d, d}, g, torch::kDouble);
  return a.mm(a.t()) + 0.1 * torch::eye(d, torch::kDouble);
}

// Features x = μ + L z, z ~ N(0, I), L Lᵀ = Σ.
torch::Tensor sample(const torch::Tensor& mean, const torch::Tensor& covariance, std::int64_t n,
                     std::uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  const torch::Tensor z = at::randn({n, mean.size(0)}, g, torch::kDouble);
  return mean + z.mm(torch::linalg_cholesky(covariance).t());
}

TEST(Frechet, OfASetWithItselfIsZero) {
  const torch::Tensor features =
      sample(doubles({1, -2, 3, 0, 5}), random_covariance(5, 1), 2000, 2).to(torch::kFloat);
  const GaussianStats s = rt::gaussian_stats(features);
  EXPECT_EQ(s.count, 2000);
  EXPECT_EQ(s.mean.scalar_type(), torch::kDouble);
  const double trace = s.covariance.trace().item<double>();
  EXPECT_LT(std::abs(rt::frechet_distance(s, s)), 1e-8 * trace);
}

TEST(Frechet, StatsAreTheMeanAndUnbiasedCovariance) {
  const torch::Tensor x = doubles({1, 2, 3, 5, 5, 4}).reshape({3, 2});
  const GaussianStats s = rt::gaussian_stats(x);
  EXPECT_TRUE(torch::allclose(s.mean, doubles({3, 11.0 / 3})));
  // Column 0: 1, 3, 5 (variance 4); column 1: 2, 5, 4 (variance 7/3); covariance 2.
  EXPECT_TRUE(torch::allclose(s.covariance, doubles({4, 2, 2, 7.0 / 3}).reshape({2, 2})));
  // Any floating dtype, computed in double.
  const GaussianStats f = rt::gaussian_stats(x.to(torch::kHalf));
  EXPECT_TRUE(torch::allclose(f.covariance, s.covariance));
}

TEST(Frechet, SameCovarianceShiftedMeanIsTheSquaredShift) {
  const torch::Tensor sigma = random_covariance(6, 3);
  const torch::Tensor mu = doubles({0.5, 1, -1, 2, 0, 3});
  const torch::Tensor shift = doubles({1, -2, 0.5, 0, 0, 3});
  const double fd = rt::frechet_distance(stats(mu, sigma), stats(mu + shift, sigma));
  EXPECT_NEAR(fd, shift.square().sum().item<double>(), 1e-9);
}

TEST(Frechet, DiagonalCovariances) {
  const torch::Tensor a = doubles({1, 4, 9, 0.25, 2});
  const torch::Tensor b = doubles({4, 1, 1, 1, 0});  // one zero variance: semi-definite
  const torch::Tensor mu_a = doubles({0, 1, 2, 3, 4});
  const torch::Tensor mu_b = doubles({1, 1, 0, 3, 2});
  const double expected = (a.sqrt() - b.sqrt()).square().sum().item<double>() +
                          (mu_a - mu_b).square().sum().item<double>();
  EXPECT_NEAR(rt::frechet_distance(stats(mu_a, torch::diag(a)), stats(mu_b, torch::diag(b))),
              expected, 1e-9);
}

// For 2x2 covariances, M = Σa Σb has real non-negative eigenvalues λ1, λ2, so
// tr √M = √λ1 + √λ2 = √(tr M + 2 √det M).
double two_by_two_fd(const torch::Tensor& mu_a, const torch::Tensor& sa, const torch::Tensor& mu_b,
                     const torch::Tensor& sb) {
  const torch::Tensor m = sa.mm(sb);
  const double det = m[0][0].item<double>() * m[1][1].item<double>() -
                     m[0][1].item<double>() * m[1][0].item<double>();
  const double trace_root = std::sqrt(m.trace().item<double>() + 2 * std::sqrt(det));
  return (mu_a - mu_b).square().sum().item<double>() + sa.trace().item<double>() +
         sb.trace().item<double>() - 2 * trace_root;
}

TEST(Frechet, NonCommutingPairMatchesTheTwoByTwoClosedForm) {
  const torch::Tensor sa = doubles({2, 1, 1, 2}).reshape({2, 2});
  const torch::Tensor sb = doubles({1, -0.5, -0.5, 3}).reshape({2, 2});
  ASSERT_FALSE(torch::allclose(sa.mm(sb), sb.mm(sa)));
  const torch::Tensor mu_a = doubles({0, 1});
  const torch::Tensor mu_b = doubles({2, -1});
  const double expected = two_by_two_fd(mu_a, sa, mu_b, sb);
  EXPECT_NEAR(rt::frechet_distance(stats(mu_a, sa), stats(mu_b, sb)), expected, 1e-9);
  // Symmetric in its arguments.
  EXPECT_NEAR(rt::frechet_distance(stats(mu_b, sb), stats(mu_a, sa)), expected, 1e-9);
}

TEST(Frechet, SampledPairIsCloseToTheClosedForm) {
  const torch::Tensor sa = doubles({2, 1, 1, 2}).reshape({2, 2});
  const torch::Tensor sb = doubles({1, -0.5, -0.5, 3}).reshape({2, 2});
  const torch::Tensor mu_a = doubles({0, 1});
  const torch::Tensor mu_b = doubles({2, -1});
  const double expected = two_by_two_fd(mu_a, sa, mu_b, sb);
  const double fd = rt::frechet_distance(rt::gaussian_stats(sample(mu_a, sa, 20000, 4)),
                                         rt::gaussian_stats(sample(mu_b, sb, 20000, 5)));
  EXPECT_NEAR(fd, expected, 0.03 * expected);
}

TEST(Frechet, RejectsMismatchedDimensionsAndTooFewExamples) {
  const GaussianStats two = stats(torch::zeros({2}, torch::kDouble), torch::eye(2, torch::kDouble));
  const GaussianStats three =
      stats(torch::zeros({3}, torch::kDouble), torch::eye(3, torch::kDouble));
  EXPECT_THROW(rt::frechet_distance(two, three), InvalidArgument);
  GaussianStats one = two;
  one.count = 1;
  EXPECT_THROW(rt::frechet_distance(two, one), InvalidArgument);
  GaussianStats misshapen = two;
  misshapen.covariance = torch::eye(3, torch::kDouble);
  EXPECT_THROW(rt::frechet_distance(misshapen, two), InvalidArgument);
  EXPECT_THROW(rt::gaussian_stats(torch::zeros({1, 4})), InvalidArgument);
  EXPECT_THROW(rt::gaussian_stats(torch::zeros({5})), InvalidArgument);
}

}  // namespace
