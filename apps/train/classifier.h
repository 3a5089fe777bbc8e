// The train job: a small ResNet (apps/train/resnet.h) with cross-replica batch norm on
// Fashion-MNIST, data-parallel over every replica of the job (local threads, or processes
// over mpi or gloo). Free of LibTorch types, so the command line can include it cheaply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "replicator/config.h"

namespace replicator::data {
struct Examples;  // replicator/data/fashion_mnist.h
}

namespace replicator::apps {

struct TrainOptions {
  Config config;  // engine and local replicas of the job
  int epochs = 1;
  std::int64_t batch = 256;  // global batch, split evenly over the replicas
  double lr = 0.2;           // peak learning rate for a global batch of 256 (scaled
                             // linearly with the batch), warm-up then cosine decay
  double momentum = 0.9;     // SGD, Nesterov
  double weight_decay = 5e-4;
  std::uint64_t seed = 0;          // model initialisation, shuffling, augmentation
  bool augment = true;             // random flips and 2-pixel shifts
  std::filesystem::path data_dir;  // the Fashion-MNIST .gz files
  // Examples held in memory that replace the split read from data_dir when set (e.g.
  // generated images, for the Classification Accuracy Score of apps/eval).
  std::shared_ptr<const data::Examples> train_examples;
  std::shared_ptr<const data::Examples> test_examples;
  std::filesystem::path out;  // metrics.jsonl and checkpoint-<step>.pt; empty: none written
  // TensorBoard log folder: the metrics as scalars, and with `out` the curves picture as the
  // image "curves" at the last step; empty: none written.
  std::filesystem::path tensorboard;
  // A checkpoint to continue from; empty: the newest in `out` that loads, if any, else afresh.
  std::filesystem::path resume;
  int keep_checkpoints = 3;           // the newest checkpoints kept in `out`
  std::int64_t checkpoint_every = 0;  // steps between checkpoints (also at each epoch end)
  std::int64_t max_steps = 0;         // stop after this many steps in total (0: all epochs); the
                                      // learning-rate schedule still spans all epochs
  std::int64_t timed_after = 0;       // images/s counts the steps after this many (warm-up)
  int threads = 1;                    // LibTorch intra-op threads per process
  bool channels_last = true;          // the network's layout (ResNetOptions::channels_last)
  std::size_t bucket_bytes = std::size_t{25} << 20;
  bool overlap = true;   // reduce gradient buckets from within backward
  bool evaluate = true;  // test accuracy after each epoch
  bool progress = true;  // a progress line on stderr when it is a terminal
  bool quiet = false;    // no reporter at all: nothing on stderr, no metrics.jsonl or
                         // curves.png (checkpoints still go to `out`)
};

struct TrainResult {
  bool reporter = false;  // this process holds replica 0 (it prints and writes files)
  int replicas = 0;
  int local_replicas = 0;
  int processes = 0;
  std::int64_t steps = 0;     // steps taken in total (including those before a resume)
  double seconds = 0;         // wall time of the training loop
  double images_per_s = 0;    // over the timed steps
  double test_accuracy = -1;  // after the last epoch evaluated; -1 when none was
  std::string digest;         // hash of the final parameters and buffers (equal on every
                              // replica; checked)
};

// Runs the job. BLOCKS until done. Throws DataError (data or checkpoint files),
// InvalidArgument (a batch not divisible by the replica count, bad options) and what
// collectives throw.
TrainResult train_classifier(const TrainOptions& options);

}  // namespace replicator::apps
