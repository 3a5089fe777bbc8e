// Tests of the sample-quality measures (replicator/torch/sample_quality.h) through small
// networks of known outputs: features batch by batch as in one pass, the Fréchet distance
// of a shifted set (the squared shift), accuracies of a classifier whose right answers are
// counted by hand, one pass for both; their errors; the trivial generator on uint8 and
// floating images.
#include "replicator/torch/sample_quality.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "replicator/errors.h"

namespace {

namespace rt = replicator::torch;
using replicator::InvalidArgument;

torch::Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  return at::randn(shape, g, torch::kFloat);
}

// A linear map of the flattened images, recording the rows of each slice it is given.
struct LinearFeatures {
  torch::Tensor weight;  // [pixels, D]
  std::vector<std::int64_t>* slices;
  torch::Tensor operator()(const torch::Tensor& images) const {
    slices->push_back(images.size(0));
    return images.flatten(1).mm(weight);
  }
};

TEST(SampleQuality, FeaturesBatchByBatchAsInOnePass) {
  const torch::Tensor images = randn({10, 3, 2}, 1);
  std::vector<std::int64_t> slices;
  const LinearFeatures linear{randn({6, 4}, 2), &slices};
  const torch::Tensor features = rt::image_features(linear, images, 4);
  EXPECT_EQ(slices, (std::vector<std::int64_t>{4, 4, 2}));
  EXPECT_EQ(features.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::allclose(features, linear(images).to(torch::kDouble), 1e-6, 1e-6));
  slices.clear();
  EXPECT_EQ(rt::image_features(linear, images, 500).sizes(), (std::vector<std::int64_t>{10, 4}));
  EXPECT_EQ(slices, (std::vector<std::int64_t>{10}));
  // Without gradients, whatever the weights ask.
  const LinearFeatures learnable{randn({6, 4}, 3).requires_grad_(), &slices};
  EXPECT_FALSE(rt::image_features(learnable, images, 3).requires_grad());
}

TEST(SampleQuality, FrechetDistanceOfAShiftedSetIsTheSquaredShift) {
  const torch::Tensor real = randn({500, 3}, 4).to(torch::kDouble);
  const torch::Tensor shift = torch::tensor({1.0, -2.0, 0.5}, torch::kDouble);
  const rt::FeatureExtractor identity = [](const torch::Tensor& x) { return x; };
  const rt::GaussianStats stats = rt::image_statistics(identity, real, 64);
  EXPECT_EQ(stats.count, 500);
  EXPECT_NEAR(rt::image_frechet_distance(identity, real + shift, stats, 100), 5.25, 1e-9);
  EXPECT_NEAR(rt::image_frechet_distance(identity, real, stats, 7), 0, 1e-9);
}

// Images [N, 1] holding their predicted class: logits one-hot of it, over `classes`.
rt::Classifier one_hot_classifier(std::int64_t classes) {
  return [classes](const torch::Tensor& images) {
    return torch::one_hot(images.squeeze(1).to(torch::kLong), classes).to(torch::kFloat);
  };
}

TEST(SampleQuality, AccuracyCountsTheRightAnswers) {
  // 9 images of classes 0..4 (i % 5); labels right for 6 of them.
  const torch::Tensor images = torch::arange(9, torch::kLong).remainder(5).view({9, 1});
  torch::Tensor labels = images.squeeze(1).clone();
  labels.index_put_({torch::tensor({1, 4, 8})}, torch::tensor({0, 0, 0}, torch::kLong));
  EXPECT_DOUBLE_EQ(rt::classifier_accuracy(one_hot_classifier(5), images, labels, 4), 6.0 / 9);
  EXPECT_DOUBLE_EQ(rt::classifier_accuracy(one_hot_classifier(5), images, labels, 1), 6.0 / 9);
  // Both in one pass: features the one-hot vectors, the head picks them as logits.
  const rt::ImageScores scores = rt::score_images(
      one_hot_classifier(5), [](const torch::Tensor& f) { return 2 * f; }, images, labels, 2);
  EXPECT_DOUBLE_EQ(scores.accuracy, 6.0 / 9);
  EXPECT_TRUE(
      torch::equal(scores.features, torch::one_hot(images.squeeze(1), 5).to(torch::kDouble)));
}

TEST(SampleQuality, RejectsBadImagesBatchesAndOutputs) {
  const rt::FeatureExtractor identity = [](const torch::Tensor& x) { return x; };
  const torch::Tensor images = randn({6, 3}, 5);
  EXPECT_THROW(rt::image_features(identity, images, 0), InvalidArgument);
  EXPECT_THROW(rt::image_features(identity, torch::Tensor(), 4), InvalidArgument);
  EXPECT_THROW(rt::image_features(identity, torch::zeros({0, 3}), 4), InvalidArgument);
  EXPECT_THROW(rt::image_features(identity, torch::zeros({}), 4), InvalidArgument);
  EXPECT_THROW(rt::image_statistics(identity, randn({1, 3}, 6), 4), InvalidArgument);
  // Features of the wrong rows, rank, dtype, or a width that changes between slices.
  const auto bad = [](rt::FeatureExtractor f) {
    EXPECT_THROW(rt::image_features(f, randn({6, 3}, 7), 4), InvalidArgument);
  };
  bad([](const torch::Tensor& x) { return x.narrow(0, 0, 1); });
  bad([](const torch::Tensor& x) { return x.flatten(); });
  bad([](const torch::Tensor& x) { return x.to(torch::kLong); });
  bad([](const torch::Tensor& x) { return x.narrow(1, 0, x.size(0) == 4 ? 3 : 2); });
  // Labels of the wrong dtype or count; logits that are not [B, C].
  const torch::Tensor classes = torch::zeros({6, 1});
  const torch::Tensor labels = torch::zeros({6}, torch::kLong);
  EXPECT_THROW(rt::classifier_accuracy(one_hot_classifier(2), classes, labels.to(torch::kInt), 4),
               InvalidArgument);
  EXPECT_THROW(rt::classifier_accuracy(one_hot_classifier(2), classes, labels.narrow(0, 0, 5), 4),
               InvalidArgument);
  EXPECT_THROW(rt::classifier_accuracy([](const torch::Tensor& x) { return x.flatten(); }, classes,
                                       labels, 4),
               InvalidArgument);
}

// The trivial generator fitted to `train`'s 10 classes.
rt::LabelledImages trivial(const rt::LabelledImages& train, std::int64_t n, std::uint64_t seed) {
  return rt::trivial_generator(train.images, train.labels, 10, n, seed);
}

// n examples, class i % 10, each image a class-dependent level plus noise; class 9 is near
// white (alternately 255 and 215), where a generator that does not clamp wraps around.
rt::LabelledImages synthetic(std::int64_t n, std::uint64_t seed) {
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
  const rt::LabelledImages train = synthetic(400, 1);
  const rt::LabelledImages out = trivial(train, 1003, 7);
  ASSERT_EQ(out.images.sizes(), (std::vector<std::int64_t>{1003, 28, 28}));
  EXPECT_EQ(out.images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(out.labels.scalar_type(), torch::kLong);
  const torch::Tensor counts = torch::bincount(out.labels, {}, 10);
  EXPECT_LE((counts.max() - counts.min()).item<std::int64_t>(), 1);
  const auto class_mean = [](const rt::LabelledImages& e, int c) {
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
  const rt::LabelledImages train = synthetic(200, 2);
  torch::manual_seed(1);
  const rt::LabelledImages a = trivial(train, 50, 3);
  torch::manual_seed(2);
  const rt::LabelledImages b = trivial(train, 50, 3);
  const rt::LabelledImages c = trivial(train, 50, 4);
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_FALSE(torch::equal(a.images, c.images));
  EXPECT_EQ(trivial(train, 0, 3).images.size(0), 0);
  EXPECT_EQ(trivial(train, 4, 3).labels.size(0), 4);
}

TEST(TrivialGenerator, NeedsEveryClass) {
  const rt::LabelledImages train = synthetic(9, 3);  // classes 0..8
  EXPECT_THROW(trivial(train, 10, 0), InvalidArgument);
}

TEST(TrivialGenerator, FloatingImagesAreNeitherRoundedNorClamped) {
  const rt::LabelledImages bytes = synthetic(200, 4);
  const rt::LabelledImages floats{bytes.images.to(torch::kFloat) / 255, bytes.labels};
  const rt::LabelledImages out = trivial(floats, 100, 5);
  EXPECT_EQ(out.images.scalar_type(), torch::kFloat);
  EXPECT_GT(out.images.max().item<float>(), 1.0f);  // class 9's noise goes past white
  EXPECT_FALSE(torch::equal(out.images, out.images.round()));
  // The same draws as for the uint8 images, scaled.
  const torch::Tensor scaled = trivial(bytes, 100, 5).images.to(torch::kFloat) / 255;
  EXPECT_LT((out.images.clamp(0, 1) - scaled).abs().max().item<float>(), 0.6f / 255);
}

TEST(TrivialGenerator, RejectsBadArguments) {
  const rt::LabelledImages train = synthetic(20, 6);
  EXPECT_THROW(trivial(train, -1, 0), InvalidArgument);
  EXPECT_THROW(rt::trivial_generator(train.images, train.labels, 0, 4, 0), InvalidArgument);
  EXPECT_THROW(rt::trivial_generator(train.images.to(torch::kInt), train.labels, 10, 4, 0),
               InvalidArgument);
  EXPECT_THROW(rt::trivial_generator(train.images, train.labels.narrow(0, 0, 19), 10, 4, 0),
               InvalidArgument);
}

}  // namespace
