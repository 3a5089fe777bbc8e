// What every training job takes and gives back besides its own model and loop: where it runs,
// where it writes, how it runs (JobOptions), and the fields every result has (JobResult). A
// job's own options and result derive from them. No LibTorch here (replicator/train/job.h
// is the skeleton that uses them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "replicator/config.h"

namespace replicator::train {

struct JobOptions {
  Config config;           // engine and local replicas of the job
  std::uint64_t seed = 0;  // the model's initialisation (and what the job draws from it)
  // Folder for metrics.jsonl, checkpoint-<step>.pt and the pictures; empty: none written.
  std::filesystem::path out;
  // TensorBoard log folder: the metrics as scalars and the pictures as images; empty: none.
  std::filesystem::path tensorboard;
  // A checkpoint to continue from; empty: the newest in `out` that loads, if any, else afresh.
  std::filesystem::path resume;
  int keep_checkpoints = 3;           // the newest checkpoints kept in `out`
  std::int64_t checkpoint_every = 0;  // steps between checkpoints (0: the job's own times only)
  int threads = 1;                    // LibTorch intra-op threads per process
  bool progress = true;               // a progress line on stderr when it is a terminal
  bool quiet = false;  // no reporter at all: nothing on stderr, no metrics.jsonl or pictures
                       // (checkpoints still go to `out`)
};

struct JobResult {
  bool reporter = false;  // this process holds replica 0 (it prints and writes files)
  int replicas = 0;
  int local_replicas = 0;
  int processes = 0;
  std::int64_t steps = 0;  // steps taken in total (including those before a resume)
  double seconds = 0;      // wall time of this run's loop
  std::string digest;      // hash of the final parameters and buffers (equal on every replica;
                           // checked)
};

}  // namespace replicator::train
