// `replicator train gan`: the GAN job (apps/train/gan.h) from the command line. Prints the
// result on stderr (and, with --json, one JSON object on stdout).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/command.h"
#include "apps/eval/gan_quality.h"
#include "apps/job_flags.h"
#include "apps/train/gan.h"
#include "replicator/launch/memory_mode.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

struct GanFlags {
  GanOptions options;
  JobFlags job;
  std::string data_dir;
  std::string classifier;
  std::int64_t quality_samples = 10000;
  char** argv = nullptr;  // main's, for the memory setting's re-execution
};

int run_gan(const GanFlags& f) {
  launch::apply_memory_mode(launch::parse_memory_mode(f.job.memory), f.argv);
  GanOptions o = f.options;
  f.job.apply("train gan", o);
  o.data_dir = f.data_dir;
  if (!f.classifier.empty()) {
    // FD and GAN-test accuracy at every sample grid, against a reference computed once.
    // The classifier is read before the run, so that a bad file fails early; the data and
    // the reference at the first grid.
    const ResNet classifier = load_classifier(f.classifier);
    auto q = std::make_shared<std::optional<QualitySetup>>();
    const EvalOptions options{.samples = f.quality_samples};
    const std::filesystem::path dir = o.data_dir;
    const std::uint64_t seed = o.seed;
    const std::int64_t classes = o.model.classes;
    o.quality = [classifier, q, options, dir, seed, classes](Generator& ema, std::int64_t step) {
      if (!*q) q->emplace(prepare_quality(classifier, dir, options));
      QualitySetup& setup = **q;
      const data::Examples generated = sample_examples(
          ema, (options.samples + classes - 1) / classes, seed + static_cast<std::uint64_t>(step));
      const GanQuality quality =
          evaluate_samples(setup.classifier, setup.reference, generated, setup.test, options);
      return std::vector<std::pair<std::string, double>>{
          {"fd", quality.fd},
          {"fd_floor", setup.reference.fd_floor},
          {"fd_ceiling", setup.reference.fd_ceiling},
          {"gan_test_accuracy", quality.gan_test_accuracy}};
    };
  }

  const GanResult r = train_gan(o);
  if (!r.reporter) return 0;
  std::fprintf(stderr,
               "trained %lld generator steps at global batch %lld on %d replicas (%d processes x "
               "%d) in %.1f s: %.0f images/s; D loss %.3f, G loss %.3f; parameters digest %s\n",
               static_cast<long long>(r.steps), static_cast<long long>(o.global_batch), r.replicas,
               r.processes, r.local_replicas, r.seconds, r.images_per_s, r.d_loss, r.g_loss,
               r.digest.c_str());
  if (f.job.json) {
    train::print_json_result({{"type", "gan"},
                              {"engine", std::string(to_string(o.config.engine))},
                              {"replicas", r.replicas},
                              {"local_replicas", r.local_replicas},
                              {"processes", r.processes},
                              {"threads", o.threads},
                              {"global_batch", o.global_batch},
                              {"accumulate", o.accumulate},
                              {"shards", o.shards},
                              {"width", o.model.width},
                              {"d_steps", o.d_steps},
                              {"steps", r.steps},
                              {"seconds", r.seconds},
                              {"images_per_s", r.images_per_s},
                              {"d_loss", r.d_loss},
                              {"g_loss", r.g_loss},
                              {"digest", r.digest}});
  }
  return 0;
}

}  // namespace

Command add_train_gan(CLI::App& train, char** argv) {
  auto flags = std::make_shared<GanFlags>();
  flags->argv = argv;
  GanOptions& o = flags->options;
  CLI::App* app = train.add_subcommand(
      "gan",
      "Train a BigGAN-style class-conditional GAN on Fashion-MNIST (spectral norm, cross-replica "
      "conditional batch norm, hinge loss, EMA generator)");
  add_job_flags(app, flags->job, o,
                {.out = "metrics.jsonl, checkpoint-<step>.pt, samples.png and curves.png",
                 .checkpoint_every = "Generator steps between checkpoints (and at the end)",
                 .memory = true});
  app->add_option("--global-batch", o.global_batch,
                  "Images per step over all replicas (real and fake each)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app->add_option("--steps", o.steps, "Generator steps in total")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--d-steps", o.d_steps, "Discriminator steps per generator step")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app->add_option("--accumulate", o.accumulate,
                  "Micro-batches per step and replica, gradients accumulated (for batches that "
                  "do not fit at once; batch norm statistics are then per micro-batch)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--shards", o.shards,
                  "Logical shards of the global batch (0: none): the same models, bit for bit, "
                  "for every replica count up to the shards (docs/shards.md)")
      ->check(CLI::Range(0, 1 << 16));
  app->add_option("--lr-g", o.lr_g, "Adam learning rate of G")->capture_default_str();
  app->add_option("--lr-d", o.lr_d, "Adam learning rate of D")->capture_default_str();
  app->add_option("--width", o.model.width, "Channels of the 28x28 blocks (7x7 ones have 4x)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  add_memory_format_flag(app, o.model.channels_last);
  app->add_option("--ema-decay", o.ema_decay, "Decay of the generator's moving average")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999999999));
  app->add_option("--ema-start", o.ema_start, "Step before which the average is a copy of G")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--standing-batches", o.standing_batches,
                  "Batches of standing statistics for the average's batch norms before sampling")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app->add_option("--sample-every", o.sample_every,
                  "Steps between sample grids (samples.png; 0: only at the end)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--report-every", o.report_every, "Steps between progress lines and records")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app->add_option("--timed-after", o.timed_after, "images/s counts only the steps after these")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--classifier", flags->classifier,
                  "A checkpoint of `replicator train classifier`: measure FD and GAN-test "
                  "accuracy at every sample grid (seconds each; see `replicator eval gan`)");
  app->add_option("--quality-samples", flags->quality_samples,
                  "Generated images in each such measurement")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{60000}));
  app->add_option(
      "--data", flags->data_dir,
      "Folder of the Fashion-MNIST .gz files (default /usr/share/datasets/fashion-mnist)");
  return {app, [flags] { return run_gan(*flags); }};
}

}  // namespace replicator::apps
