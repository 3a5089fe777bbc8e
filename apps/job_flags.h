// The flags every training job's command shares (`replicator train classifier|impala|gan`):
// where the job runs (--engine, --replicas, --timeout), where it writes (--out, --resume,
// --tensorboard, --keep-checkpoints, --checkpoint-every), how it runs (--threads,
// --memory, --no-progress, --seed) and --json. A job's command adds its own flags beside.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "replicator/config.h"
#include "replicator/train/job_options.h"

namespace replicator::apps {

// The shared flags that a job's options (train::JobOptions) do not hold as they are typed.
struct JobFlags {
  std::string engine;
  int replicas = 1;
  CLI::Option* replicas_option = nullptr;
  std::string timeout;
  std::string out;
  std::string resume;
  std::string tensorboard;
  std::string memory = "keep";
  std::string devices;  // --devices (add_devices_flag); empty: the environment's
  bool json = false;

  // Writes these flags into `options`: config (job_config; `command` as typed, "train gan";
  // then devices when given), out, resume and tensorboard. Throws ConfigError.
  void apply(const std::string& command, train::JobOptions& options) const;
};

struct JobFlagHelp {
  std::string out;  // what --out holds
  std::string checkpoint_every;
  bool memory = false;  // whether the job offers --memory
};

// Adds the shared flags to `app`, bound to `flags` and to `options` (--keep-checkpoints,
// --checkpoint-every, --threads, --no-progress, --seed; both must outlive the parse); their
// values before the call are the defaults (--replicas: flags.replicas). Never throws but
// std::bad_alloc (CLI11 throws on a duplicate flag name).
void add_job_flags(CLI::App* app, JobFlags& flags, train::JobOptions& options,
                   const JobFlagHelp& help);

// Adds --devices (Config's devices: host, cuda or cuda:N) to `app`, bound to `flags.devices`,
// for a job that trains where its replicas are bound. Never throws but std::bad_alloc.
void add_devices_flag(CLI::App* app, JobFlags& flags);

// Adds --memory (keep or system, replicator/launch/memory_mode.h) to `app`, bound to `memory`.
// Never throws but std::bad_alloc.
void add_memory_flag(CLI::App* app, std::string& memory);

// Adds --memory-format (channels-last or contiguous: the layout of a job's activations and
// convolution weights) to `app`, bound to `channels_last`; its value before the call is the
// default. Never throws but std::bad_alloc.
void add_memory_format_flag(CLI::App* app, bool& channels_last);

}  // namespace replicator::apps
