// Tests of sample quality with the project's classifier (apps/eval/gan_quality.h; the
// measures themselves: tests/torch/frechet_test.cc, sample_quality_test.cc): the
// classifier's features, accuracy and a checkpoint loaded as the classifier; the CAS
// plumbing on a tiny set; the whole evaluation on an untrained classifier. Synthetic images
// only: no dataset is needed.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "apps/eval/gan_quality.h"
#include "replicator/errors.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/memory_format.h"

namespace {

namespace fs = std::filesystem;
using replicator::DataError;
using replicator::InvalidArgument;
using replicator::data::Examples;
namespace apps = replicator::apps;
namespace models = replicator::examples;

// n examples, class i % 10, each image a class-dependent level plus noise.
Examples synthetic(std::int64_t n, std::uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  const torch::Tensor labels = torch::arange(n, torch::kLong).remainder(10);
  const torch::Tensor images = (labels.to(torch::kFloat) * 20 + 10).view({n, 1, 1}) +
                               8 * at::randn({n, 28, 28}, g, torch::kFloat);
  return {images.round().clamp(0, 255).to(torch::kUInt8).contiguous(), labels};
}

TEST(Classifier, FeaturesAndAccuracy) {
  torch::manual_seed(0);
  models::ResNet model(models::ResNetOptions{});
  const Examples examples = synthetic(70, 4);
  const torch::Tensor features = apps::classifier_scores(model, examples, 32).features;
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
  EXPECT_DOUBLE_EQ(apps::classifier_scores(model, examples, 32).accuracy, accuracy);
  EXPECT_THROW(apps::classifier_scores(model, examples, 0), InvalidArgument);
  EXPECT_THROW(apps::classifier_scores(model, Examples{}, 8), InvalidArgument);
}

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / ("eval_test." + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

TEST(Classifier, LoadsATrainJobCheckpoint) {
  const fs::path dir = temp_dir();
  torch::manual_seed(5);
  models::ResNet model(models::ResNetOptions{});
  // Laid out as the train job saves it.
  replicator::torch::to_memory_format(*model, models::memory_format(model->options()));
  torch::optim::SGD sgd(
      model->parameters(),
      torch::optim::SGDOptions(0.2).momentum(0.9).nesterov(true).weight_decay(5e-4));
  replicator::torch::save_checkpoint(dir / "checkpoint-1.pt", *model, sgd, {.step = 1});
  models::ResNet loaded = apps::load_classifier(dir / "checkpoint-1.pt");
  EXPECT_FALSE(loaded->is_training());
  const Examples examples = synthetic(20, 6);
  EXPECT_TRUE(torch::equal(apps::classifier_scores(model, examples).features,
                           apps::classifier_scores(loaded, examples).features));
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
  models::ResNet model(models::ResNetOptions{});
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
