// The categorical (C51) projection: hand-computed cases (3 and 5 atoms, worked out below),
// the edges (a target beyond the support, on an atom, γ = 0), mass preserved, and random
// batches against a naive per-element loop of Bellemare et al.'s Algorithm 1.
#include "replicator/rl/categorical.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "replicator/errors.h"

namespace replicator::rl {
namespace {

::torch::Tensor row(std::vector<float> values) {
  return ::torch::tensor(values, ::torch::kFloat32).unsqueeze(0);
}

::torch::Tensor project_one(std::vector<float> p, float r, float gamma,
                            const CategoricalSupport& support) {
  return categorical_projection(row(std::move(p)), ::torch::tensor({r}), ::torch::tensor({gamma}),
                                support)
      .squeeze(0);
}

void expect_near(const ::torch::Tensor& got, std::vector<double> want, double tolerance) {
  ASSERT_EQ(got.numel(), static_cast<std::int64_t>(want.size()));
  const ::torch::Tensor g = got.to(::torch::kFloat64).contiguous();
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(g.data_ptr<double>()[i], want[i], tolerance) << "atom " << i;
  }
}

// 3 atoms z = {−1, 0, 1} (Δz = 1), p = {0.2, 0.3, 0.5}, r = 0.5, γ = 0.5:
//   T z = 0.5 + 0.5 z = {0, 0.5, 1}
//   atom 0's 0.2 lands exactly on z_1 = 0            -> m_1 += 0.2
//   atom 1's 0.3 lands halfway between z_1 and z_2    -> m_1 += 0.15, m_2 += 0.15
//   atom 2's 0.5 lands exactly on z_2 = 1            -> m_2 += 0.5
//   m = {0, 0.35, 0.65}
TEST(CategoricalProjectionTest, ThreeAtomsByHand) {
  const CategoricalSupport support{.v_min = -1, .v_max = 1, .num_atoms = 3};
  expect_near(project_one({0.2f, 0.3f, 0.5f}, 0.5f, 0.5f, support), {0, 0.35, 0.65}, 1e-7);
}

// 5 atoms z = {−2, −1, 0, 1, 2} (Δz = 1), p = {0.1, 0.2, 0.3, 0.25, 0.15}, r = 1, γ = 0.9:
//   T z = 1 + 0.9 z = {−0.8, 0.1, 1, 1.9, 2.8 -> clipped to 2}
//   0.1  at −0.8: 0.8 of it to z_1 = −1, 0.2 to z_2 = 0   -> m_1 += 0.08,  m_2 += 0.02
//   0.2  at  0.1: 0.9 to z_2, 0.1 to z_3                   -> m_2 += 0.18,  m_3 += 0.02
//   0.3  at  1  : on z_3                                   -> m_3 += 0.3
//   0.25 at  1.9: 0.1 to z_3, 0.9 to z_4                   -> m_3 += 0.025, m_4 += 0.225
//   0.15 at  2  : on z_4 (the clipped edge)                -> m_4 += 0.15
//   m = {0, 0.08, 0.2, 0.345, 0.375}
TEST(CategoricalProjectionTest, FiveAtomsByHandWithClipping) {
  const CategoricalSupport support{.v_min = -2, .v_max = 2, .num_atoms = 5};
  expect_near(project_one({0.1f, 0.2f, 0.3f, 0.25f, 0.15f}, 1, 0.9f, support),
              {0, 0.08, 0.2, 0.345, 0.375}, 1e-6);
}

TEST(CategoricalProjectionTest, Edges) {
  const CategoricalSupport support{.v_min = -1, .v_max = 1, .num_atoms = 3};
  const std::vector<float> p{0.2f, 0.3f, 0.5f};
  // Beyond the support on either side: all the mass on the edge atom.
  expect_near(project_one(p, 10, 0.9f, support), {0, 0, 1}, 1e-7);
  expect_near(project_one(p, -10, 0.9f, support), {1, 0, 0}, 1e-7);
  // γ = 0: every atom lands on r; r = 0.25 splits 0.75 / 0.25 between z_1 and z_2.
  expect_near(project_one(p, 0.25f, 0, support), {0, 0.75, 0.25}, 1e-7);
  // γ = 1, r = 0: every atom on itself, the distribution unchanged.
  expect_near(project_one(p, 0, 1, support), {0.2, 0.3, 0.5}, 1e-7);
  // γ = 1, r = 1 (one Δz): each atom moves up one; the top one stays at the edge.
  expect_near(project_one(p, 1, 1, support), {0, 0.2, 0.8}, 1e-7);
}

// Bellemare et al. 2017, Algorithm 1, one element at a time, in double.
std::vector<double> naive_projection(const ::torch::Tensor& probabilities,
                                     const ::torch::Tensor& rewards,
                                     const ::torch::Tensor& discounts,
                                     const CategoricalSupport& s) {
  const ::torch::Tensor p = probabilities.to(::torch::kFloat64).contiguous();
  const ::torch::Tensor r = rewards.to(::torch::kFloat64).contiguous();
  const ::torch::Tensor g = discounts.to(::torch::kFloat64).contiguous();
  const std::int64_t B = p.size(0);
  const std::int64_t N = s.num_atoms;
  std::vector<double> m(static_cast<std::size_t>(B * N), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t j = 0; j < N; ++j) {
      const double z = s.v_min + static_cast<double>(j) * s.delta();
      const double tz =
          std::clamp(r.data_ptr<double>()[b] + g.data_ptr<double>()[b] * z, s.v_min, s.v_max);
      const double pos = (tz - s.v_min) / s.delta();
      const auto l = static_cast<std::int64_t>(std::floor(pos));
      const auto u = static_cast<std::int64_t>(std::ceil(pos));
      const double mass = p.data_ptr<double>()[b * N + j];
      if (l == u) {
        m[static_cast<std::size_t>(b * N + l)] += mass;
      } else {
        m[static_cast<std::size_t>(b * N + l)] += mass * (static_cast<double>(u) - pos);
        m[static_cast<std::size_t>(b * N + u)] += mass * (pos - static_cast<double>(l));
      }
    }
  }
  return m;
}

// Random batches: distributions from random logits, rewards that often leave the support,
// discounts in [0, 1] with exact 0 and 1 among them.
void compare_with_naive(::torch::ScalarType dtype, double tolerance) {
  ::torch::manual_seed(3);
  const CategoricalSupport support{.v_min = -10, .v_max = 10, .num_atoms = 51};
  const std::int64_t B = 256;
  const ::torch::Tensor p = ::torch::softmax(::torch::randn({B, 51}, dtype) * 2, 1);
  const ::torch::Tensor r = ::torch::randn({B}, dtype) * 6;
  ::torch::Tensor g = ::torch::rand({B}, dtype);
  g.index_put_({::torch::indexing::Slice(0, 16)}, 0);
  g.index_put_({::torch::indexing::Slice(16, 32)}, 1);
  g.index_put_({::torch::indexing::Slice(32, 48)}, 0.99);
  const ::torch::Tensor got = categorical_projection(p, r, g, support);
  ASSERT_EQ(got.sizes(), p.sizes());
  ASSERT_EQ(got.scalar_type(), dtype);
  const std::vector<double> want = naive_projection(p, r, g, support);
  const ::torch::Tensor got64 = got.to(::torch::kFloat64).contiguous();
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got64.data_ptr<double>()[i] - want[i]));
  }
  EXPECT_LT(worst, tolerance);
  // Mass is preserved row by row, and nothing is negative.
  const ::torch::Tensor mass_error = (got64.sum(1) - p.to(::torch::kFloat64).sum(1)).abs();
  EXPECT_LT(mass_error.max().item<double>(), tolerance * 10);
  EXPECT_GE(got64.min().item<double>(), 0.0);
}

TEST(CategoricalProjectionTest, MatchesANaiveLoopInFloat) {
  compare_with_naive(::torch::kFloat32, 1e-6);
}
TEST(CategoricalProjectionTest, MatchesANaiveLoopInDouble) {
  compare_with_naive(::torch::kFloat64, 1e-12);
}

TEST(CategoricalProjectionTest, MeanAndAtomsAndRefusals) {
  const CategoricalSupport support{.v_min = -1, .v_max = 1, .num_atoms = 3};
  expect_near(support.atoms(), {-1, 0, 1}, 0);
  // logits {0, 0, log 3}: probabilities {0.2, 0.2, 0.6}, mean 0.4.
  const ::torch::Tensor logits = row({0, 0, std::log(3.f)});
  expect_near(categorical_mean(logits, support), {0.4}, 1e-6);
  EXPECT_THROW(categorical_projection(::torch::ones({2, 4}), ::torch::zeros({2}),
                                      ::torch::zeros({2}), support),
               InvalidArgument);
  EXPECT_THROW(categorical_projection(::torch::ones({2, 3}), ::torch::zeros({3}),
                                      ::torch::zeros({2}), support),
               InvalidArgument);
  EXPECT_THROW(categorical_projection(::torch::ones({2, 3}, ::torch::kInt64), ::torch::zeros({2}),
                                      ::torch::zeros({2}), support),
               InvalidArgument);
  EXPECT_THROW(CategoricalSupport({.v_min = 1, .v_max = 1, .num_atoms = 3}).atoms(),
               InvalidArgument);
  EXPECT_THROW(CategoricalSupport({.v_min = 0, .v_max = 1, .num_atoms = 1}).atoms(),
               InvalidArgument);
}

}  // namespace
}  // namespace replicator::rl
