// Tests of sample-quality measures (apps/eval): the Fréchet distance against closed forms
// (a set with itself, shifted means, diagonal covariances, a non-commuting 2x2 pair, one
// sampled pair), its errors; the trivial generator; the classifier's features, accuracy
// and a checkpoint loaded as the classifier; the CAS plumbing on a tiny set; the whole
// evaluation on an untrained classifier. Synthetic images only: no dataset is needed.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "apps/eval/frechet.h"
#include "apps/eval/gan_quality.h"
#include "replicator/errors.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/memory_format.h"

namespace {

namespace fs = std::filesystem;
using replicator::DataError;
using replicator::InvalidArgument;
using replicator::apps::GaussianStats;
using replicator::data::Examples;
namespace apps = replicator::apps;

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
  const GaussianStats s = apps::gaussian_stats(features);
  EXPECT_EQ(s.count, 2000);
  EXPECT_EQ(s.mean.scalar_type(), torch::kDouble);
  const double trace = s.covariance.trace().item<double>();
  EXPECT_LT(std::abs(apps::frechet_distance(s, s)), 1e-8 * trace);
}

TEST(Frechet, StatsAreTheMeanAndUnbiasedCovariance) {
  const torch::Tensor x = doubles({1, 2, 3, 5, 5, 4}).reshape({3, 2});
  const GaussianStats s = apps::gaussian_stats(x);
  EXPECT_TRUE(torch::allclose(s.mean, doubles({3, 11.0 / 3})));
  // Column 0: 1, 3, 5 (variance 4); column 1: 2, 5, 4 (variance 7/3); covariance 2.
  EXPECT_TRUE(torch::allclose(s.covariance, doubles({4, 2, 2, 7.0 / 3}).reshape({2, 2})));
  // Any floating dtype, computed in double.
  const GaussianStats f = apps::gaussian_stats(x.to(torch::kHalf));
  EXPECT_TRUE(torch::allclose(f.covariance, s.covariance));
}

TEST(Frechet, SameCovarianceShiftedMeanIsTheSquaredShift) {
  const torch::Tensor sigma = random_covariance(6, 3);
  const torch::Tensor mu = doubles({0.5, 1, -1, 2, 0, 3});
  const torch::Tensor shift = doubles({1, -2, 0.5, 0, 0, 3});
  const double fd = apps::frechet_distance(stats(mu, sigma), stats(mu + shift, sigma));
  EXPECT_NEAR(fd, shift.square().sum().item<double>(), 1e-9);
}

TEST(Frechet, DiagonalCovariances) {
  const torch::Tensor a = doubles({1, 4, 9, 0.25, 2});
  const torch::Tensor b = doubles({4, 1, 1, 1, 0});  // one zero variance: semi-definite
  const torch::Tensor mu_a = doubles({0, 1, 2, 3, 4});
  const torch::Tensor mu_b = doubles({1, 1, 0, 3, 2});
  const double expected = (a.sqrt() - b.sqrt()).square().sum().item<double>() +
                          (mu_a - mu_b).square().sum().item<double>();
  EXPECT_NEAR(apps::frechet_distance(stats(mu_a, torch::diag(a)), stats(mu_b, torch::diag(b))),
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
  EXPECT_NEAR(apps::frechet_distance(stats(mu_a, sa), stats(mu_b, sb)), expected, 1e-9);
  // Symmetric in its arguments.
  EXPECT_NEAR(apps::frechet_distance(stats(mu_b, sb), stats(mu_a, sa)), expected, 1e-9);
}

TEST(Frechet, SampledPairIsCloseToTheClosedForm) {
  const torch::Tensor sa = doubles({2, 1, 1, 2}).reshape({2, 2});
  const torch::Tensor sb = doubles({1, -0.5, -0.5, 3}).reshape({2, 2});
  const torch::Tensor mu_a = doubles({0, 1});
  const torch::Tensor mu_b = doubles({2, -1});
  const double expected = two_by_two_fd(mu_a, sa, mu_b, sb);
  const double fd = apps::frechet_distance(apps::gaussian_stats(sample(mu_a, sa, 20000, 4)),
                                           apps::gaussian_stats(sample(mu_b, sb, 20000, 5)));
  EXPECT_NEAR(fd, expected, 0.03 * expected);
}

TEST(Frechet, RejectsMismatchedDimensionsAndTooFewExamples) {
  const GaussianStats two = stats(torch::zeros({2}, torch::kDouble), torch::eye(2, torch::kDouble));
  const GaussianStats three =
      stats(torch::zeros({3}, torch::kDouble), torch::eye(3, torch::kDouble));
  EXPECT_THROW(apps::frechet_distance(two, three), InvalidArgument);
  GaussianStats one = two;
  one.count = 1;
  EXPECT_THROW(apps::frechet_distance(two, one), InvalidArgument);
  GaussianStats misshapen = two;
  misshapen.covariance = torch::eye(3, torch::kDouble);
  EXPECT_THROW(apps::frechet_distance(misshapen, two), InvalidArgument);
  EXPECT_THROW(apps::gaussian_stats(torch::zeros({1, 4})), InvalidArgument);
  EXPECT_THROW(apps::gaussian_stats(torch::zeros({5})), InvalidArgument);
}

// n examples, class i % 10, each image a class-dependent level plus noise; class 9 is near
// white (alternately 255 and 215), where a generator that does not clamp wraps around.
Examples synthetic(std::int64_t n, std::uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  const torch::Tensor labels = torch::arange(n, torch::kLong).remainder(10);
  torch::Tensor images = (labels.to(torch::kFloat) * 20 + 10).view({n, 1, 1}) +
                         8 * at::randn({n, 28, 28}, g, torch::kFloat);
  const torch::Tensor white = labels.eq(9).view({n, 1, 1});
  const torch::Tensor level =
      (215 + 40 * torch::arange(n, torch::kLong).remainder(20).eq(9).to(torch::kFloat))
          .view({n, 1, 1});
  images = torch::where(white, level.expand({n, 28, 28}), images);
  return {images.round().clamp(0, 255).to(torch::kUInt8).contiguous(), labels};
}

TEST(TrivialGenerator, BalancedLabelsAndEachClassNearItsMean) {
  const Examples train = synthetic(400, 1);
  const Examples out = apps::trivial_generator_examples(train, 1003, 7);
  ASSERT_EQ(out.images.sizes(), (std::vector<std::int64_t>{1003, 28, 28}));
  EXPECT_EQ(out.images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(out.labels.scalar_type(), torch::kLong);
  const torch::Tensor counts = torch::bincount(out.labels, {}, 10);
  EXPECT_LE((counts.max() - counts.min()).item<std::int64_t>(), 1);
  const auto class_mean = [](const Examples& e, int c) {
    return e.images.index({e.labels == c}).to(torch::kDouble).mean().item<double>();
  };
  for (int c = 0; c < 9; ++c) {
    EXPECT_NEAR(class_mean(out, c), class_mean(train, c), 1.0) << "class " << c;
  }
  // Class 9: pixels of mean 235 and std 20, clamped at 255 (which lowers the mean by about
  // 20·E[(z − 1)⁺] ≈ 1.7), never wrapped around to dark pixels.
  const torch::Tensor white = out.images.index({out.labels == 9});
  EXPECT_GE(white.min().item<int>(), 100);
  EXPECT_EQ(white.max().item<int>(), 255);
  EXPECT_NEAR(class_mean(out, 9), 235 - 1.7, 1.0);
}

TEST(TrivialGenerator, DependsOnTheSeedOnly) {
  const Examples train = synthetic(200, 2);
  torch::manual_seed(1);
  const Examples a = apps::trivial_generator_examples(train, 50, 3);
  torch::manual_seed(2);
  const Examples b = apps::trivial_generator_examples(train, 50, 3);
  const Examples c = apps::trivial_generator_examples(train, 50, 4);
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_FALSE(torch::equal(a.images, c.images));
  EXPECT_EQ(apps::trivial_generator_examples(train, 0, 3).size(), 0);
  EXPECT_EQ(apps::trivial_generator_examples(train, 4, 3).size(), 4);
}

TEST(TrivialGenerator, NeedsEveryClass) {
  const Examples train = synthetic(9, 3);  // classes 0..8
  EXPECT_THROW(apps::trivial_generator_examples(train, 10, 0), InvalidArgument);
}

TEST(Classifier, FeaturesAndAccuracy) {
  torch::manual_seed(0);
  apps::ResNet model(apps::ResNetOptions{});
  const Examples examples = synthetic(70, 4);
  const torch::Tensor features = apps::classifier_features(model, examples, 32);
  EXPECT_EQ(features.sizes(), (std::vector<std::int64_t>{70, 64}));
  EXPECT_EQ(features.scalar_type(), torch::kDouble);
  EXPECT_FALSE(model->is_training());
  // The same as one batch, normalised as the loader does; logits = head(features).
  const torch::Tensor images =
      (examples.images.to(torch::kFloat).unsqueeze(1) / 255 - 0.2860f) / 0.3530f;
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(features, model->features(images).to(torch::kDouble), 1e-4, 1e-5));
  const torch::Tensor predicted = model->forward(images).argmax(1);
  const double accuracy = predicted.eq(examples.labels).to(torch::kDouble).mean().item<double>();
  EXPECT_DOUBLE_EQ(apps::classifier_accuracy(model, examples, 32), accuracy);
  EXPECT_THROW(apps::classifier_features(model, examples, 0), InvalidArgument);
  EXPECT_THROW(apps::classifier_features(model, Examples{}, 8), InvalidArgument);
}

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / ("eval_test." + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

TEST(Classifier, LoadsATrainJobCheckpoint) {
  const fs::path dir = temp_dir();
  torch::manual_seed(5);
  apps::ResNet model(apps::ResNetOptions{});
  // Laid out as the train job saves it.
  replicator::torch::to_memory_format(*model, apps::memory_format(model->options()));
  torch::optim::SGD sgd(
      model->parameters(),
      torch::optim::SGDOptions(0.2).momentum(0.9).nesterov(true).weight_decay(5e-4));
  replicator::torch::save_checkpoint(dir / "checkpoint-1.pt", *model, sgd, {.step = 1});
  apps::ResNet loaded = apps::load_classifier(dir / "checkpoint-1.pt");
  EXPECT_FALSE(loaded->is_training());
  const Examples examples = synthetic(20, 6);
  EXPECT_TRUE(torch::equal(apps::classifier_features(model, examples),
                           apps::classifier_features(loaded, examples)));
  try {
    apps::load_classifier(dir / "missing.pt");
    ADD_FAILURE() << "a missing classifier loaded";
  } catch (const DataError& e) {
    EXPECT_EQ(e.path(), (dir / "missing.pt").string());
  }
  fs::remove_all(dir);
}

TEST(Cas, TrainsOnATinySetAndScoresIt) {
  replicator::apps::TrainOptions training = apps::cas_training_options();
  EXPECT_TRUE(training.quiet);
  training.epochs = 2;
  training.batch = 64;
  training.threads = 1;
  const Examples train = synthetic(128, 7);  // 2 steps an epoch
  const Examples test = synthetic(100, 8);
  const double cas = apps::classification_accuracy_score(train, test, training);
  EXPECT_GE(cas, 0);
  EXPECT_LE(cas, 1);
  training.max_steps = 1;  // stops before the first epoch's test
  EXPECT_THROW(apps::classification_accuracy_score(train, test, training), InvalidArgument);
}

TEST(Quality, WholeEvaluationOnAnUntrainedClassifier) {
  torch::manual_seed(0);
  apps::ResNet model(apps::ResNetOptions{});
  const Examples train = synthetic(300, 9);
  const Examples test = synthetic(200, 10);
  const apps::EvalOptions options{.samples = 100, .batch = 64};
  const apps::QualityReference reference = apps::quality_reference(model, train, test, options);
  EXPECT_EQ(reference.test.count, 200);
  EXPECT_GE(reference.fd_floor, 0);
  EXPECT_FALSE(reference.cas_real.has_value());
  const apps::GanQuality q = apps::evaluate_samples(
      model, reference, apps::trivial_generator_examples(train, 150, 1), test, options);
  EXPECT_EQ(q.samples, 100);
  EXPECT_GE(q.fd, 0);
  EXPECT_GE(q.gan_test_accuracy, 0);
  EXPECT_LE(q.gan_test_accuracy, 1);
  const nlohmann::ordered_json j = apps::to_json(q);
  for (const char* key : {"fd", "fd_floor", "fd_ceiling", "gan_test_accuracy",
                          "classifier_test_accuracy", "cas", "cas_real"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j["cas"].is_null());
  EXPECT_NE(apps::quality_table(q, "samples").find("ceiling"), std::string::npos);
  // Too few generated or training examples for the FD.
  EXPECT_THROW(apps::evaluate_samples(
                   model, reference, apps::trivial_generator_examples(train, 99, 1), test, options),
               InvalidArgument);
  EXPECT_THROW(apps::quality_reference(model, synthetic(99, 1), test, options), InvalidArgument);
}

}  // namespace
