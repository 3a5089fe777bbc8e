#include "apps/job_flags.h"

#include <string>

#include "apps/engine_choice.h"
#include "replicator/launch/memory_mode.h"

namespace replicator::apps {

void JobFlags::apply(const std::string& command, train::JobOptions& options) const {
  options.config =
      job_config(engine, command, replicas_option != nullptr && replicas_option->count() > 0,
                 replicas, timeout);
  if (!devices.empty()) options.config.set("devices", devices);
  options.out = out;
  options.resume = resume;
  options.tensorboard = tensorboard;
}

void add_job_flags(CLI::App* app, JobFlags& f, train::JobOptions& t, const JobFlagHelp& help) {
  f.replicas_option =
      app->add_option("--replicas", f.replicas,
                      "Replicas (threads) in this process; default " + std::to_string(f.replicas) +
                          " on the local engine, REPLICATOR_LOCAL_REPLICAS or 1 across processes")
          ->check(CLI::Range(1, 1024));
  app->add_option("--engine", f.engine,
                  "local, mpi or gloo; must match how the processes were started (default: "
                  "what the environment selects)")
      ->check(CLI::IsMember({"local", "mpi", "gloo"}));
  app->add_option("--timeout", f.timeout,
                  "Deadline of every collective (and of the job's other waits), e.g. 30s");
  app->add_option(
      "--out", f.out,
      "Folder for " + help.out + "; a run resumes from the newest checkpoint there that loads");
  app->add_option("--resume", f.resume,
                  "Continue from this checkpoint instead of the newest in --out");
  app->add_option("--tensorboard", f.tensorboard,
                  "TensorBoard log folder for the metrics and pictures (those drawn from "
                  "metrics.jsonl need --out); see them with `tensorboard --logdir DIR`");
  app->add_option("--keep-checkpoints", t.keep_checkpoints,
                  "Checkpoints kept in --out (the newest)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app->add_option("--checkpoint-every", t.checkpoint_every, help.checkpoint_every)
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--threads", t.threads, "LibTorch intra-op threads per process")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app->add_option("--seed", t.seed, "Seed of everything random in the run")->capture_default_str();
  bool* progress = &t.progress;
  app->add_flag(
      "--no-progress", [progress](std::int64_t) { *progress = false; },
      "No progress line on the terminal");
  if (help.memory) add_memory_flag(app, f.memory);
  app->add_flag("--json", f.json, "Print the result as one JSON object on stdout");
}

void add_devices_flag(CLI::App* app, JobFlags& flags) {
  app->add_option("--devices,--device", flags.devices,
                  "Where the replicas train: host, cuda (replica r on GPU r mod GPUs) or cuda:N "
                  "(the first N GPUs); default REPLICATOR_DEVICES or host. On CUDA each replica "
                  "of a process needs a GPU of its own (cross-replica batch norm)");
}

void add_memory_flag(CLI::App* app, std::string& memory) {
  app->add_option("--memory", memory, launch::kMemoryFlagHelp)
      ->check(CLI::IsMember({"keep", "system"}));
}

void add_memory_format_flag(CLI::App* app, bool& channels_last) {
  app->add_option_function<std::string>(
         "--memory-format",
         [&channels_last](const std::string& format) { channels_last = format == "channels-last"; },
         "Layout of the networks' activations and convolution weights: channels-last (faster "
         "convolutions on CPU) or contiguous; the same networks either way, equal to rounding")
      ->check(CLI::IsMember({"channels-last", "contiguous"}))
      ->default_str(channels_last ? "channels-last" : "contiguous");
}

}  // namespace replicator::apps
