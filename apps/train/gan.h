// The GAN job (`replicator train gan`): a BigGAN-style class-conditional GAN
// (examples/models/biggan.h) on Fashion-MNIST, data-parallel over every replica of the job.
//
// One step: `d_steps` discriminator steps, each on a fresh real batch and fresh fakes
// (G forward without gradient: D's step never reaches G), then one generator step (D's
// parameters frozen: G's step leaves no gradient in D). Both networks' gradients are
// averaged over replicas by a ReplicatedOptimizer each, and G's batch norms take statistics
// of the global batch, so R replicas at B/R take the step one replica takes at B. The noise
// and fake labels of step s are drawn for the whole global batch from a generator seeded by
// (seed, s, role) on every replica, each replica taking its rows: nothing depends on R or on
// how the run was interrupted. After each step an EMA of G's weights is updated; samples and
// quality come from it, with standing statistics for its batch norms.
//
// Writes into `out`: metrics.jsonl, checkpoint-<step>.pt (G, D, the EMA, both optimizers,
// spectral-norm vectors, running statistics, the data position), samples.png (one row per
// class, fixed noise) every `sample_every` steps and at the end, samples-<step>.png beside
// it, and curves.png. A run resumes from the newest checkpoint in `out` bitwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "examples/models/biggan.h"
#include "replicator/data/fashion_mnist.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/train/job_options.h"

namespace replicator::apps {

// The networks and losses of examples/models/biggan.h.
using examples::BigGanOptions;
using examples::Discriminator;
using examples::Generator;
using examples::hinge_d_loss;
using examples::hinge_g_loss;
using examples::orthogonal_init;

// The options every job shares (engine, seed, out, tensorboard, resume, checkpoints, threads,
// progress) are train::JobOptions'; a GAN job writes a checkpoint every 500 steps by default
// (and at the end).
struct GanOptions : train::JobOptions {
  GanOptions() { checkpoint_every = 500; }
  BigGanOptions model;
  std::int64_t global_batch = 64;
  std::int64_t steps = 2000;  // generator steps in total
  int d_steps = 1;            // discriminator steps per generator step
  int accumulate = 1;         // micro-batches per step and replica (gradient accumulation)
  // Logical shards of the global batch (replicator/shards.h; 0: none): each replica runs
  // G and D per shard of its range, batch norm over the shard, and both networks'
  // gradients and buffers are combined in the tree over shard ids, so the models have the
  // same bits for every replica count up to `shards`. Takes the place of --accumulate.
  int shards = 0;
  double lr_g = 1e-4;
  double lr_d = 4e-4;
  double ema_decay = 0.999;
  std::int64_t ema_start = 500;     // before this step the EMA is a copy of G
  int standing_batches = 8;         // batches of standing statistics before sampling
  std::filesystem::path data_dir;   // empty: where the Debian package puts Fashion-MNIST
  std::int64_t sample_every = 500;  // and at the end (0: only at the end)
  std::int64_t report_every = 10;
  std::int64_t timed_after = 2;  // steps not counted in images_per_s (warm-up)
  // Measures sample quality: called on replica 0 after each sample grid with the EMA
  // generator (eval mode, standing statistics) and the step; its named figures go into
  // metrics.jsonl (type "quality") and the progress notes. Empty: none. The other replicas
  // wait for it in their next collective: a --timeout must leave it time.
  std::function<std::vector<std::pair<std::string, double>>(Generator& ema, std::int64_t step)>
      quality;
};

struct GanResult : train::JobResult {
  double images_per_s = 0;        // global batch × timed steps / their time
  double d_loss = 0, g_loss = 0;  // mean of the last report window
};

// Runs the job. BLOCKS for the whole run. Throws InvalidArgument for bad options (a global
// batch not divisible by replicas × accumulate or by the shards, more replicas than shards,
// shards with accumulate, ...), DataError for unreadable data or
// checkpoints, and what collectives throw.
GanResult train_gan(const GanOptions& options);

// Standing statistics (replicator::torch::standing_statistics) for `generator`'s batch norms
// over `batches` batches of `global` noise vectors and random classes drawn from `seed`,
// this replica's rows [begin, begin + rows) of each; leaves it in eval mode. In a replicated
// run a collective (every replica calls it); outside one begin = 0, rows = global.
void standing_statistics_for_sampling(Generator& generator, int batches, std::int64_t global,
                                      std::int64_t begin, std::int64_t rows, std::uint64_t seed);

// What a checkpoint of the job holds besides the optimizers: G, D and the EMA of G.
class GanModelsImpl : public ::torch::nn::Module {
 public:
  explicit GanModelsImpl(const BigGanOptions& options);
  Generator generator;
  Discriminator discriminator;
  Generator ema;
};
class GanModels : public ::torch::nn::ModuleHolder<GanModelsImpl> {
 public:
  using ::torch::nn::ModuleHolder<GanModelsImpl>::ModuleHolder;
};

// Loads a checkpoint of the job written with `model`'s architecture, in eval mode, and its
// position into `position` when given; the EMA's batch norms are as saved (G's: take
// standing statistics before sampling). Throws DataError when the file does not load.
// BLOCKS on file I/O.
GanModels load_gan_checkpoint(const std::filesystem::path& checkpoint,
                              const BigGanOptions& model = {},
                              replicator::torch::TrainingPosition* position = nullptr);

// `per_class` examples of each class drawn from `generator` (eval mode, no gradient) with
// noise from `seed`, quantized to uint8 like the real images; example i has class
// i % classes (so every prefix is balanced). Never communicates.
data::Examples sample_examples(Generator& generator, std::int64_t per_class, std::uint64_t seed,
                               std::int64_t batch = 500);

}  // namespace replicator::apps
