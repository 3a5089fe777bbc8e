// `replicator eval`: sample quality measured with the Fashion-MNIST classifier
// (apps/eval/gan_quality.h). `eval real` measures the trivial generator (each class's mean
// image plus pixel noise), so the whole pipeline, its floor and its ceiling run without a
// generative model; other generators add their subcommands to the same group.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "apps/command.h"
#include "apps/eval/gan_quality.h"
#include "apps/eval_flags.h"
#include "replicator/data/fashion_mnist.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

struct EvalRealFlags {
  EvalOptions options;
  std::string classifier;
  std::string data_dir;
  int threads = 2;
  bool json = false;
};

int run_eval_real(const EvalRealFlags& f) {
  const auto started = std::chrono::steady_clock::now();
  EvalOptions o = f.options;
  o.cas_training.threads = f.threads;
  at::set_num_threads(f.threads);
  // The classifier first: a bad file fails before the data are read.
  ResNet classifier = load_classifier(f.classifier);
  announce_cas(o, "");
  QualitySetup q = prepare_quality(std::move(classifier), f.data_dir, o);
  // As many images as the training set, so that the CAS trains on as many as the real one;
  // another seed than the ceiling's.
  const std::int64_t n = o.cas ? q.train.size() : o.samples;
  const GanQuality quality = evaluate_samples(
      q.classifier, q.reference, trivial_generator_examples(q.train, n, o.seed + 1), q.test, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (f.json) {
    nlohmann::ordered_json j;
    j["type"] = "eval";
    j["generator"] = "trivial";
    j["classifier"] = f.classifier;
    j.update(to_json(quality));
    j["total_seconds"] = seconds;
    train::print_json_result(j);
  } else {
    std::printf("classifier %s\n%s%.1f s in all\n", f.classifier.c_str(),
                quality_table(quality, "trivial generator").c_str(), seconds);
  }
  return 0;
}

}  // namespace

CLI::App* add_eval_group(CLI::App& app) {
  CLI::App* eval =
      app.add_subcommand("eval", "Sample quality of image generators, with the classifier");
  eval->require_subcommand(1);
  return eval;
}

Command add_eval_real(CLI::App& eval) {
  auto flags = std::make_shared<EvalRealFlags>();
  EvalOptions& o = flags->options;
  CLI::App* app = eval.add_subcommand(
      "real",
      "FD, GAN-test accuracy and CAS of the trivial generator (class mean + noise), "
      "beside their floor (real images)");
  app->add_option("--classifier", flags->classifier,
                  "A checkpoint of `replicator train classifier` (checkpoint-<step>.pt)")
      ->required();
  app->add_option(
      "--data", flags->data_dir,
      "Folder of the Fashion-MNIST .gz files (default /usr/share/datasets/fashion-mnist)");
  add_cas_flags(app, o,
                "Also the Classification Accuracy Score: trains a classifier on the generated "
                "images and one on the real ones (minutes)");
  app->add_option("--samples", o.samples, "Images in each Fréchet distance")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{60000}));
  app->add_option("--batch", o.batch, "Images per forward pass of the classifier")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app->add_option("--seed", o.seed, "Seed of the real and trivial images drawn");
  app->add_option("--threads", flags->threads, "LibTorch intra-op threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app->add_flag("--json", flags->json, "Print the result as one JSON object on stdout");
  return {app, [flags] { return run_eval_real(*flags); }};
}

}  // namespace replicator::apps
