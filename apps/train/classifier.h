// The train job: a small ResNet (examples/models/resnet.h) with cross-replica batch norm on
// Fashion-MNIST, data-parallel over every replica of the job (local threads, or processes
// over mpi or gloo). Free of LibTorch types, so the command line can include it cheaply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "replicator/train/job_options.h"

namespace replicator::data {
struct Examples;  // replicator/data/fashion_mnist.h
}

namespace replicator::apps {

// The options every job shares (engine, seed, out, tensorboard, resume, checkpoints, threads,
// progress, quiet) are train::JobOptions'; `out` holds metrics.jsonl, checkpoint-<step>.pt and
// curves.png, and a checkpoint is also written at each epoch's end.
struct TrainOptions : train::JobOptions {
  int epochs = 1;
  std::int64_t batch = 256;  // global batch, split evenly over the replicas
  double lr = 0.2;           // peak learning rate for a global batch of 256 (scaled
                             // linearly with the batch), warm-up then cosine decay
  double momentum = 0.9;     // SGD, Nesterov
  double weight_decay = 5e-4;
  bool augment = true;             // random flips and 2-pixel shifts (drawn from the seed)
  std::filesystem::path data_dir;  // the Fashion-MNIST .gz files
  // Examples held in memory that replace the split read from data_dir when set (e.g.
  // generated images, for the Classification Accuracy Score of apps/eval).
  std::shared_ptr<const data::Examples> train_examples;
  std::shared_ptr<const data::Examples> test_examples;
  std::int64_t max_steps = 0;    // stop after this many steps in total (0: all epochs); the
                                 // learning-rate schedule still spans all epochs
  std::int64_t timed_after = 0;  // images/s counts the steps after this many (warm-up)
  bool channels_last = true;     // the network's layout (ResNetOptions::channels_last)
  std::size_t bucket_bytes = std::size_t{25} << 20;
  bool overlap = true;   // reduce gradient buckets from within backward
  bool evaluate = true;  // test accuracy after each epoch
  // Logical shards of the global batch (replicator/shards.h; 0: none): each replica runs
  // forward and backward per shard of its range, batch norm over the shard, and the
  // gradients and running statistics are combined in the tree over shard ids, so the
  // parameters have the same bits for every replica count up to `shards`. The batch must be
  // a multiple of the shards; the replicas need not divide them.
  int shards = 0;
};

struct TrainResult : train::JobResult {
  double images_per_s = 0;    // over the timed steps
  double test_accuracy = -1;  // after the last epoch evaluated; -1 when none was
};

// Runs the job. BLOCKS until done. Throws DataError (data or checkpoint files),
// InvalidArgument (a batch not divisible by the replica count, or by the shards, more
// replicas than shards, bad options) and what collectives throw.
TrainResult train_classifier(const TrainOptions& options);

}  // namespace replicator::apps
