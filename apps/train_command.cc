// `replicator train classifier`: the train job (apps/train/classifier.h) from the command
// line. Prints the final test accuracy (and, with --json, one JSON object on stdout).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/command.h"
#include "apps/job_flags.h"
#include "apps/train/classifier.h"
#include "replicator/errors.h"
#include "replicator/launch/memory_mode.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

struct TrainFlags {
  TrainOptions options;
  JobFlags job;
  std::string data_dir;
  std::int64_t bucket_kib = std::int64_t{25} * 1024;
  bool no_overlap = false;
  bool no_augment = false;
  bool no_eval = false;
  char** argv = nullptr;  // main's, for the memory setting's re-execution
};

int run_train(const TrainFlags& f) {
  launch::apply_memory_mode(launch::parse_memory_mode(f.job.memory), f.argv);
  TrainOptions o = f.options;
  f.job.apply("train classifier", o);
  o.data_dir = f.data_dir;
  if (f.bucket_kib < 1) throw ConfigError("--bucket-kib must be at least 1");
  o.bucket_bytes = static_cast<std::size_t>(f.bucket_kib) << 10;
  o.overlap = !f.no_overlap;
  o.augment = !f.no_augment;
  o.evaluate = !f.no_eval;

  const TrainResult r = train_classifier(o);
  if (!r.reporter) return 0;
  std::fprintf(stderr,
               "trained %lld steps on %d replicas (%d processes x %d) in %.1f s: %.0f images/s",
               static_cast<long long>(r.steps), r.replicas, r.processes, r.local_replicas,
               r.seconds, r.images_per_s);
  if (r.test_accuracy >= 0) std::fprintf(stderr, ", test accuracy %.4f", r.test_accuracy);
  std::fprintf(stderr, "; parameters digest %s\n", r.digest.c_str());
  if (f.job.json) {
    nlohmann::ordered_json j;
    j["type"] = "train";
    j["engine"] = std::string(to_string(o.config.engine));
    j["replicas"] = r.replicas;
    j["local_replicas"] = r.local_replicas;
    j["processes"] = r.processes;
    j["threads"] = o.threads;
    j["memory"] = f.job.memory;
    j["memory_format"] = o.channels_last ? "channels-last" : "contiguous";
    j["allocator"] = launch::active_allocator();
    j["batch"] = o.batch;
    j["bucket_bytes"] = o.bucket_bytes;
    j["overlap"] = o.overlap;
    j["shards"] = o.shards;
    j["steps"] = r.steps;
    j["seconds"] = r.seconds;
    j["images_per_s"] = r.images_per_s;
    j["test_accuracy"] = r.test_accuracy;
    j["digest"] = r.digest;
    train::print_json_result(j);
  }
  return 0;
}

}  // namespace

Command add_train_classifier(CLI::App& train, char** argv) {
  auto flags = std::make_shared<TrainFlags>();
  flags->argv = argv;
  TrainOptions& o = flags->options;
  CLI::App* app = train.add_subcommand(
      "classifier", "Train a small ResNet with cross-replica batch norm on Fashion-MNIST");
  flags->job.replicas = 2;
  add_job_flags(
      app, flags->job, o,
      {.out = "metrics.jsonl, checkpoint-<step>.pt and curves.png",
       .checkpoint_every = "Steps between checkpoints (one is always written at each epoch's end)",
       .memory = true});
  app->add_option("--epochs", o.epochs, "Epochs over the training set")
      ->check(CLI::Range(1, 100000));
  app->add_option("--batch", o.batch, "Global batch, split evenly over the replicas")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app->add_option("--lr", o.lr, "Peak learning rate per 256 examples of batch");
  app->add_option("--momentum", o.momentum, "SGD momentum (Nesterov)");
  app->add_option("--weight-decay", o.weight_decay, "SGD weight decay");
  app->add_option(
      "--data", flags->data_dir,
      "Folder of the Fashion-MNIST .gz files (default /usr/share/datasets/fashion-mnist)");
  app->add_option("--steps", o.max_steps,
                  "Stop after this many steps in total (0: all epochs); the learning-rate "
                  "schedule still spans all epochs")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--timed-after", o.timed_after, "images/s counts only the steps after these")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--bucket-kib", flags->bucket_kib, "Gradient bucket size in KiB");
  add_memory_format_flag(app, o.channels_last);
  add_devices_flag(app, flags->job);
  app->add_flag("--no-overlap", flags->no_overlap,
                "Reduce all gradient buckets after backward instead of from within it");
  app->add_option("--shards", o.shards,
                  "Logical shards of the global batch (0: none): the same parameters, bit for "
                  "bit, for every replica count up to the shards (docs/shards.md)")
      ->check(CLI::Range(0, 1 << 16));
  app->add_flag("--no-augment", flags->no_augment, "No random flips and shifts");
  app->add_flag("--no-eval", flags->no_eval, "Skip the test-set evaluation");
  return {app, [flags] { return run_train(*flags); }};
}

}  // namespace replicator::apps
