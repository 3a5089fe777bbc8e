#include "apps/eval/gan_quality.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "replicator/data/sharded_loader.h"
#include "replicator/errors.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/memory_format.h"
#include "replicator/torch/sample_quality.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

namespace rt = replicator::torch;

using Clock = std::chrono::steady_clock;

using train::seconds_since;

// The training of cas_training_options(), measured on the real training set (one replica,
// 2 threads; docs/torch.md, Sample quality): with the train job's augmentation 3, 4 and 5
// epochs reach 89.0, 90.4 and 90.9 % test accuracy, without it 3, 5 and 7 epochs reach
// 91.1, 92.5 and 92.4 %; 93 % takes about 25 epochs. Five epochs without augmentation: the
// best accuracy of the short runs.
constexpr int kCasEpochs = 5;
constexpr bool kCasAugment = false;

struct Scored {
  double fd = 0;        // to the test set's statistics
  double accuracy = 0;  // of the classifier
};

Scored score(ResNet& classifier, const data::Examples& examples, const rt::GaussianStats& test,
             std::int64_t batch) {
  const rt::ImageScores s = classifier_scores(classifier, examples, batch);
  return {rt::frechet_distance(rt::gaussian_stats(s.features), test), s.accuracy};
}

data::Examples first(const data::Examples& examples, std::int64_t n) {
  return {examples.images.narrow(0, 0, n), examples.labels.narrow(0, 0, n)};
}

void check_enough(const data::Examples& examples, std::int64_t n, const char* what) {
  if (n < 2) throw InvalidArgument("samples must be at least 2, got " + std::to_string(n));
  if (examples.size() < n) {
    throw InvalidArgument(std::string("the ") + what + " set has " +
                          std::to_string(examples.size()) + " examples, fewer than the " +
                          std::to_string(n) + " samples of each Fréchet distance");
  }
}

}  // namespace

ResNet load_classifier(const std::filesystem::path& path) {
  ResNet classifier(examples::ResNetOptions{});
  // The checkpoint holds the train job's optimizer state too; an SGD with momentum over the
  // same parameters has its shape (the options come from the file).
  ::torch::optim::SGD sgd(classifier->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  try {
    rt::load_checkpoint(path, *classifier, sgd);
  } catch (const DataError&) {
    throw;
  } catch (const c10::Error& e) {
    throw DataError(
        "cannot load the classifier " + path.string() + ": " + e.what_without_backtrace(),
        path.string());
  } catch (const std::exception& e) {
    throw DataError("cannot load the classifier " + path.string() + ": " + e.what(), path.string());
  }
  // A checkpoint brings the layout it was saved in; the network's own wins.
  rt::to_memory_format(*classifier, memory_format(classifier->options()));
  classifier->eval();
  return classifier;
}

rt::ImageScores classifier_scores(ResNet& classifier, const data::Examples& examples,
                                  std::int64_t batch) {
  classifier->eval();
  return rt::score_images(
      [&](const ::torch::Tensor& images) {
        return classifier->features(data::normalised_images(images));
      },
      [&](const ::torch::Tensor& features) { return classifier->logits(features); },
      examples.images, examples.labels, batch);
}

data::Examples trivial_generator_examples(const data::Examples& train, std::int64_t n,
                                          std::uint64_t seed) {
  rt::LabelledImages out =
      rt::trivial_generator(train.images, train.labels, examples::ResNetOptions{}.classes, n, seed);
  return {std::move(out.images), std::move(out.labels)};
}

TrainOptions cas_training_options() {
  TrainOptions o;
  o.epochs = kCasEpochs;
  o.augment = kCasAugment;
  o.threads = 2;
  o.progress = false;
  o.quiet = true;
  return o;
}

double classification_accuracy_score(const data::Examples& train, const data::Examples& test,
                                     const TrainOptions& training) {
  TrainOptions o = training;
  // Copies of the tensor handles; the images are shared, not copied.
  o.train_examples = std::make_shared<const data::Examples>(train);
  o.test_examples = std::make_shared<const data::Examples>(test);
  o.evaluate = true;
  const TrainResult result = train_classifier(o);
  if (result.test_accuracy < 0) {
    throw InvalidArgument("the CAS classifier stopped after " + std::to_string(result.steps) +
                          " steps, before the end of its first epoch, and was never tested; "
                          "raise max_steps or train on fewer examples");
  }
  return result.test_accuracy;
}

QualityReference quality_reference(ResNet& classifier, const data::Examples& train,
                                   const data::Examples& test, const EvalOptions& options) {
  const Clock::time_point started = Clock::now();
  check_enough(train, options.samples, "training");
  QualityReference r;
  const rt::ImageScores real = classifier_scores(classifier, test, options.batch);
  r.test = rt::gaussian_stats(real.features);
  r.test_accuracy = real.accuracy;

  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  const ::torch::Tensor subset =
      ::torch::randperm(train.size(), generator, ::torch::kLong).narrow(0, 0, options.samples);
  const data::Examples floor{train.images.index_select(0, subset),
                             train.labels.index_select(0, subset)};
  r.fd_floor = score(classifier, floor, r.test, options.batch).fd;
  const Scored trivial =
      score(classifier, trivial_generator_examples(train, options.samples, options.seed), r.test,
            options.batch);
  r.fd_ceiling = trivial.fd;
  r.ceiling_gan_test_accuracy = trivial.accuracy;

  if (options.cas) {
    r.cas_real = classification_accuracy_score(train, test, options.cas_training);
  }
  r.seconds = seconds_since(started);
  return r;
}

QualitySetup prepare_quality(ResNet classifier, const std::filesystem::path& data_dir,
                             const EvalOptions& options) {
  const std::filesystem::path dir = data_dir.empty() ? data::default_fashion_mnist_dir() : data_dir;
  QualitySetup setup{.classifier = std::move(classifier),
                     .train = data::read_fashion_mnist(dir, data::Split::kTrain),
                     .test = data::read_fashion_mnist(dir, data::Split::kTest)};
  setup.reference = quality_reference(setup.classifier, setup.train, setup.test, options);
  return setup;
}

GanQuality evaluate_samples(ResNet& classifier, const QualityReference& reference,
                            const data::Examples& generated, const data::Examples& test,
                            const EvalOptions& options) {
  const Clock::time_point started = Clock::now();
  check_enough(generated, options.samples, "generated");
  GanQuality q;
  q.samples = options.samples;
  const Scored scored =
      score(classifier, first(generated, options.samples), reference.test, options.batch);
  q.fd = scored.fd;
  q.gan_test_accuracy = scored.accuracy;
  if (options.cas) {
    q.cas = classification_accuracy_score(generated, test, options.cas_training);
  }
  q.reference = reference;
  q.seconds = seconds_since(started);
  return q;
}

nlohmann::ordered_json to_json(const GanQuality& q) {
  const auto optional = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  const QualityReference& r = q.reference;
  nlohmann::ordered_json j;
  j["samples"] = q.samples;
  j["fd"] = q.fd;
  j["fd_floor"] = r.fd_floor;
  j["fd_ceiling"] = r.fd_ceiling;
  j["gan_test_accuracy"] = q.gan_test_accuracy;
  j["classifier_test_accuracy"] = r.test_accuracy;
  j["ceiling_gan_test_accuracy"] = r.ceiling_gan_test_accuracy;
  j["cas"] = optional(q.cas);
  j["cas_real"] = optional(r.cas_real);
  j["seconds"] = q.seconds;
  j["reference_seconds"] = r.seconds;
  return j;
}

std::string quality_table(const GanQuality& q, const std::string& samples_name) {
  const QualityReference& r = q.reference;
  const auto cas_text = [](const std::optional<double>& v) {
    char text[16];
    if (v) {
      std::snprintf(text, sizeof text, "%.4f", *v);
    } else {
      std::snprintf(text, sizeof text, "-");
    }
    return std::string(text);
  };
  std::string table;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %10s %10s %8s\n", "images", "FD", "accuracy", "CAS");
  table += line;
  std::snprintf(line, sizeof line, "%-28s %10.4f %10.4f %8s\n", samples_name.c_str(), q.fd,
                q.gan_test_accuracy, cas_text(q.cas).c_str());
  table += line;
  std::snprintf(line, sizeof line, "%-28s %10.4f %10.4f %8s\n", "floor: real images", r.fd_floor,
                r.test_accuracy, cas_text(r.cas_real).c_str());
  table += line;
  std::snprintf(line, sizeof line, "%-28s %10.4f %10.4f %8s\n", "ceiling: trivial generator",
                r.fd_ceiling, r.ceiling_gan_test_accuracy, "-");
  table += line;
  std::snprintf(line, sizeof line,
                "FD: %lld images vs the %lld test images, in the classifier's %lld features; "
                "accuracy: the classifier's on the row's images (floor: the test set)\n",
                static_cast<long long>(q.samples), static_cast<long long>(r.test.count),
                static_cast<long long>(r.test.mean.defined() ? r.test.mean.size(0) : 0));
  table += line;
  return table;
}

}  // namespace replicator::apps
