// `replicator eval gan`: the sample quality of GAN checkpoints (apps/train/gan.h) measured
// with the Fashion-MNIST classifier (apps/eval/gan_quality.h): for each checkpoint, its EMA
// generator after standing statistics draws the images; FD and GAN-test accuracy for each,
// beside the floor and ceiling computed once, and the CAS of the last one with --cas.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/command.h"
#include "apps/eval/gan_quality.h"
#include "apps/eval_flags.h"
#include "apps/train/gan.h"
#include "replicator/data/fashion_mnist.h"
#include "replicator/train/plot.h"
#include "replicator/train/png.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

struct EvalGanFlags {
  EvalOptions options;
  BigGanOptions model;
  std::vector<std::string> checkpoints;
  std::string classifier;
  std::string data_dir;
  std::string plot;
  int standing_batches = 8;
  std::int64_t standing_batch = 128;
  int threads = 2;
  bool json = false;
};

int run_eval_gan(const EvalGanFlags& f) {
  const auto started = std::chrono::steady_clock::now();
  EvalOptions o = f.options;
  o.cas_training.threads = f.threads;
  at::set_num_threads(f.threads);
  // The classifier first: a bad file fails before the data are read.
  ResNet classifier = load_classifier(f.classifier);
  announce_cas(o, " of the last checkpoint");
  QualitySetup q = prepare_quality(std::move(classifier), f.data_dir, o);

  train::Chart fd_chart{.title = "Frechet distance (classifier features)", .x_label = "step"};
  train::Chart accuracy_chart{.title = "GAN-test accuracy", .x_label = "step"};
  fd_chart.series.push_back({.name = "generator"});
  accuracy_chart.series.push_back({.name = "generator"});
  for (std::size_t i = 0; i < f.checkpoints.size(); ++i) {
    const bool last = i + 1 == f.checkpoints.size();
    replicator::torch::TrainingPosition position;
    GanModels models = load_gan_checkpoint(f.checkpoints[i], f.model, &position);
    standing_statistics_for_sampling(models->ema, f.standing_batches, f.standing_batch, 0,
                                     f.standing_batch, o.seed);
    EvalOptions each = o;
    each.cas = o.cas && last;
    // As many images as the training set for the CAS, else the FD's.
    const std::int64_t n = each.cas ? q.train.size() : o.samples;
    const data::Examples generated =
        sample_examples(models->ema, (n + f.model.classes - 1) / f.model.classes, o.seed + 1);
    const GanQuality quality = evaluate_samples(q.classifier, q.reference, generated, q.test, each);
    fd_chart.series[0].x.push_back(static_cast<double>(position.step));
    fd_chart.series[0].y.push_back(quality.fd);
    accuracy_chart.series[0].x.push_back(static_cast<double>(position.step));
    accuracy_chart.series[0].y.push_back(quality.gan_test_accuracy);
    if (f.json) {
      nlohmann::ordered_json j;
      j["type"] = "eval";
      j["generator"] = "gan";
      j["checkpoint"] = f.checkpoints[i];
      j["step"] = position.step;
      j["classifier"] = f.classifier;
      j.update(to_json(quality));
      train::print_json_result(j);
    } else {
      std::printf("%s (step %lld)\n%s", f.checkpoints[i].c_str(),
                  static_cast<long long>(position.step),
                  quality_table(quality, "generator").c_str());
    }
  }
  if (!f.plot.empty()) {
    // The floor and ceiling as flat lines beside the generator's curve.
    const std::vector<double>& x = fd_chart.series[0].x;
    const double lo = x.front(), hi = x.back();
    fd_chart.series.push_back(
        {.name = "floor (real)", .x = {lo, hi}, .y = {q.reference.fd_floor, q.reference.fd_floor}});
    fd_chart.series.push_back({.name = "ceiling (class mean + noise)",
                               .x = {lo, hi},
                               .y = {q.reference.fd_ceiling, q.reference.fd_ceiling}});
    accuracy_chart.series.push_back({.name = "real test images",
                                     .x = {lo, hi},
                                     .y = {q.reference.test_accuracy, q.reference.test_accuracy}});
    train::write_png(f.plot, train::render_charts({fd_chart, accuracy_chart}));
  }
  if (!f.json) {
    std::printf("%.1f s in all\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return 0;
}

}  // namespace

Command add_eval_gan(CLI::App& eval) {
  auto flags = std::make_shared<EvalGanFlags>();
  EvalOptions& o = flags->options;
  CLI::App* app = eval.add_subcommand(
      "gan",
      "FD, GAN-test accuracy (and CAS) of `replicator train gan` checkpoints' EMA generators, "
      "beside their floor (real images) and ceiling (class mean + noise)");
  app->add_option("--checkpoint", flags->checkpoints,
                  "Checkpoints of the GAN job (checkpoint-<step>.pt), in step order")
      ->required();
  app->add_option("--classifier", flags->classifier,
                  "A checkpoint of `replicator train classifier` (checkpoint-<step>.pt)")
      ->required();
  app->add_option("--width", flags->model.width, "The GAN's --width")->capture_default_str();
  app->add_option("--data", flags->data_dir,
                  "Folder of the Fashion-MNIST .gz files (default "
                  "/usr/share/datasets/fashion-mnist)");
  add_cas_flags(app, o,
                "Also the Classification Accuracy Score of the last checkpoint: trains a "
                "classifier on 60,000 generated images and one on the real ones (minutes)");
  app->add_option("--samples", o.samples, "Images in each Fréchet distance")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{60000}));
  app->add_option("--standing-batches", flags->standing_batches,
                  "Batches of standing statistics for the EMA generator's batch norms")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app->add_option("--standing-batch", flags->standing_batch, "Images per such batch")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 20));
  app->add_option("--seed", o.seed, "Seed of the images drawn");
  app->add_option("--plot", flags->plot,
                  "Write FD and GAN-test accuracy over the checkpoints' steps to this PNG");
  app->add_option("--threads", flags->threads, "LibTorch intra-op threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app->add_flag("--json", flags->json, "One JSON object per checkpoint on stdout");
  return {app, [flags] { return run_eval_gan(*flags); }};
}

}  // namespace replicator::apps
