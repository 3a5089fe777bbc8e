#include "apps/train/gan.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "replicator/data/sharded_loader.h"
#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch.h"
#include "replicator/train/job.h"
#include "replicator/train/plot.h"
#include "replicator/train/png.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

namespace rt = replicator::torch;
using Clock = std::chrono::steady_clock;

using train::seconds_since;

// What draws the noise of a batch. Roles keep the streams of one step apart.
enum class Role : std::uint64_t { kDiscriminator = 1, kGenerator = 2, kStanding = 3, kGrid = 4 };

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// z [rows, z_dim] and labels [rows] for rows [begin, begin + rows) of a global batch of
// `global` drawn from (seed, step, role, index): the same rows for every replica count.
std::pair<::torch::Tensor, ::torch::Tensor> noise(const BigGanOptions& model, std::uint64_t seed,
                                                  std::int64_t step, Role role, std::int64_t index,
                                                  std::int64_t global, std::int64_t begin,
                                                  std::int64_t rows) {
  const std::uint64_t s =
      mix(mix(mix(seed) ^ static_cast<std::uint64_t>(step)) ^
          (static_cast<std::uint64_t>(role) << 32 | static_cast<std::uint64_t>(index)));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s);
  const ::torch::Tensor z = ::torch::randn({global, model.z_dim()}, gen);
  const ::torch::Tensor labels = ::torch::randint(model.classes, {global}, gen);
  return {z.slice(0, begin, begin + rows), labels.slice(0, begin, begin + rows)};
}

// The loader's normalized pixels back to [-1, 1].
::torch::Tensor to_gan_range(const ::torch::Tensor& normalized) {
  return (normalized * 0.3530f + 0.2860f) * 2 - 1;
}

::torch::Tensor to_pixels(const ::torch::Tensor& images) {
  return ((images.squeeze(1) + 1) * 127.5).round().clamp(0, 255).to(::torch::kUInt8);
}

void set_requires_grad(::torch::nn::Module& module, bool on) {
  for (auto& p : module.parameters()) p.requires_grad_(on);
}

// The real batches, epoch after epoch, and where the next one comes from.
class RealBatches {
 public:
  RealBatches(data::ShardedLoader loader, const rt::TrainingPosition& from)
      : loader_(std::move(loader)), epoch_(from.epoch), next_(from.batch) {
    loader_.start_epoch(epoch_, next_);
  }
  data::Batch next() {
    for (;;) {
      if (std::optional<data::Batch> batch = loader_.next()) {
        next_ = batch->index + 1;
        return std::move(*batch);
      }
      loader_.start_epoch(++epoch_, next_ = 0);
    }
  }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t next_index() const { return next_; }

 private:
  data::ShardedLoader loader_;
  std::int64_t epoch_, next_;
};

// Sums over the steps since the last report (all-reduced to their mean over replicas).
enum Sum { kDLoss, kGLoss, kDReal, kDFake, kSteps, kSums };

// This replica's rows of the global batch: [first, first + count), in `parts` micro-batches
// of `micro` rows: --accumulate of them, or with shards one per shard of `shards`.
struct Rows {
  std::int64_t first = 0, count = 0, micro = 0;
  int parts = 1;
  ShardRange shards;  // empty without shards
  double weight = 1;  // of a part's losses in the window (its mean over replicas)
  ::torch::Tensor of(const ::torch::Tensor& t, int k) const {
    return t.slice(0, k * micro, (k + 1) * micro);
  }
};

// Every parameter the optimizer updates, group by group (Optimizer::parameters() is
// deprecated in LibTorch 2.x and warns on every call).
std::vector<::torch::Tensor> parameters_of(::torch::optim::Optimizer& optimizer) {
  std::vector<::torch::Tensor> out;
  for (auto& group : optimizer.param_groups()) {
    out.insert(out.end(), group.params().begin(), group.params().end());
  }
  return out;
}

// The gradients of one network: reduced over the replicas by its replicated optimizer, or
// with shards over the shard tree by ShardGradients, then the optimizer's step.
class NetworkUpdate {
 public:
  // Without shards a replicated optimizer reduces over the replicas (with micro-batches every
  // backward adds to the gradients: reduce once, after the last); with shards
  // ShardGradients reduce over the shard tree, every buffer of the models (`buffers`) with
  // them.
  NetworkUpdate(ReplicaContext& ctx, const std::shared_ptr<::torch::optim::Optimizer>& optimizer,
                const GanOptions& o, const std::vector<::torch::Tensor>& buffers)
      : optimizer_(*optimizer) {
    if (o.shards == 0) {
      replicated_.emplace(ctx, optimizer, rt::GradientOptions{.overlap = o.accumulate == 1});
    } else {
      shards_.emplace(ctx, parameters_of(optimizer_), o.shards,
                      rt::ShardGradientsOptions{.buffers = buffers});
    }
  }
  void zero_grad() {
    if (replicated_) {
      replicated_->zero_grad();
    } else {
      optimizer_.zero_grad();
    }
  }
  // Around the forward and backward of micro-batch k.
  void begin(int k) {
    if (shards_) shards_->begin_shard(shards_->range().first + k);
  }
  void end(int k) {
    if (shards_) shards_->add_shard(shards_->range().first + k);
  }
  void step() {
    if (replicated_) {
      replicated_->step();
      return;
    }
    shards_->synchronize();
    optimizer_.step();
  }

 private:
  ::torch::optim::Optimizer& optimizer_;
  std::optional<rt::ReplicatedOptimizer> replicated_;
  std::optional<rt::ShardGradients> shards_;
};

// The networks of one replica and their updates.
struct GanReplica {
  GanModels& models;
  NetworkUpdate& g;
  NetworkUpdate& d;
};

// One step: `d_steps` discriminator steps on fresh real batches and fakes, then one generator
// step; the last D step's losses and scores, and G's loss, are added to `window`.
void gan_step(const GanOptions& o, GanReplica& r, RealBatches& real, const Rows& rows,
              std::int64_t step, double* window) {
  Generator& G = r.models->generator;
  Discriminator& D = r.models->discriminator;
  std::optional<rt::ShardLocalBatchNorm> per_shard;  // batch norm over one shard at a time
  if (rows.shards.size() > 0) per_shard.emplace();
  for (int d = 0; d < o.d_steps; ++d) {
    const data::Batch batch = real.next();
    const ::torch::Tensor images = to_gan_range(batch.images);
    auto [z, y] = noise(o.model, o.seed, step, Role::kDiscriminator, d, o.global_batch, rows.first,
                        rows.count);
    r.d.zero_grad();
    for (int k = 0; k < rows.parts; ++k) {
      r.d.begin(k);
      ::torch::Tensor fake;
      {
        const ::torch::NoGradGuard no_grad;
        fake = G(rows.of(z, k), rows.of(y, k));
      }
      const ::torch::Tensor real_scores = D(rows.of(images, k), rows.of(batch.labels, k));
      const ::torch::Tensor fake_scores = D(fake, rows.of(y, k));
      auto [loss_real, loss_fake] = hinge_d_loss(real_scores, fake_scores);
      ((loss_real + loss_fake) / o.accumulate).backward();
      r.d.end(k);
      if (d == o.d_steps - 1) {
        window[kDLoss] += (loss_real + loss_fake).item<double>() * rows.weight;
        window[kDReal] += real_scores.mean().item<double>() * rows.weight;
        window[kDFake] += fake_scores.mean().item<double>() * rows.weight;
      }
    }
    r.d.step();
  }
  auto [z, y] =
      noise(o.model, o.seed, step, Role::kGenerator, 0, o.global_batch, rows.first, rows.count);
  set_requires_grad(*D, false);
  r.g.zero_grad();
  for (int k = 0; k < rows.parts; ++k) {
    r.g.begin(k);
    const ::torch::Tensor loss = hinge_g_loss(D(G(rows.of(z, k), rows.of(y, k)), rows.of(y, k)));
    (loss / o.accumulate).backward();
    r.g.end(k);
    window[kGLoss] += loss.item<double>() * rows.weight;
  }
  r.g.step();
  set_requires_grad(*D, true);
}

// The sample grid of the EMA generator after standing statistics (a collective): one row per
// class, the same noise every time; on the reporter samples.png, samples-<step>.png and the
// quality figures.
void samples(const GanOptions& o, GanModels& models, const Rows& rows, std::int64_t step,
             train::JobReporter* reporter) {
  Generator& E = models->ema;
  const std::uint64_t seed = o.seed ^ static_cast<std::uint64_t>(step);
  if (rows.shards.size() == 0) {
    standing_statistics_for_sampling(E, o.standing_batches, o.global_batch, rows.first, rows.count,
                                     seed);
  } else {
    // Each shard's standing statistics from the same start, averaged over the shard tree.
    rt::ShardGradients standing(*ReplicaContext::current(), {}, o.shards,
                                {.buffers = E->buffers()});
    const rt::ShardLocalBatchNorm per_shard;
    for (int k = 0; k < rows.parts; ++k) {
      standing.begin_shard(rows.shards.first + k);
      standing_statistics_for_sampling(E, o.standing_batches, o.global_batch,
                                       rows.first + k * rows.micro, rows.micro, seed);
      standing.add_shard(rows.shards.first + k);
    }
    standing.synchronize();
  }
  if (reporter) {
    const ::torch::NoGradGuard no_grad;
    constexpr std::int64_t kCols = 10;
    auto [z, ignored] = noise(o.model, o.seed, 0, Role::kGrid, 0, kCols, 0, kCols);
    const ::torch::Tensor zs = z.repeat({o.model.classes, 1});
    const ::torch::Tensor ys = ::torch::arange(o.model.classes).repeat_interleave(kCols);
    const ::torch::Tensor pixels = to_pixels(E(zs, ys)).contiguous();
    const train::Image grid = train::tile_images(
        {pixels.data_ptr<std::uint8_t>(), static_cast<std::size_t>(pixels.numel())},
        static_cast<int>(zs.size(0)), 28, 28, 1, {.cols = kCols});
    reporter->picture("samples", step, grid);
    if (!o.out.empty()) {
      char name[40];
      std::snprintf(name, sizeof name, "samples-%09lld.png", static_cast<long long>(step));
      train::write_png(o.out / name, grid);
    }
    if (o.quality) {
      nlohmann::ordered_json record{{"type", "quality"}, {"step", step}};
      std::string line = "step " + std::to_string(step) + ":";
      for (const auto& [name, value] : o.quality(E, step)) {
        record[name] = value;
        char text[80];
        std::snprintf(text, sizeof text, " %s %.4g", name.c_str(), value);
        line += text;
      }
      reporter->note(line);
      reporter->metric(record);
    }
  }
  E->train();
}

// The progress line and the record of a report window (`window`: means over the replicas).
void report_train(train::JobReporter& reporter, std::int64_t step, std::int64_t last,
                  const double* window, double images_per_s, double elapsed) {
  const double n = window[kSteps];
  char line[200];
  std::snprintf(line, sizeof line,
                "step %lld/%lld  D %.3f  G %.3f  D(real) %.2f  D(fake) %.2f  "
                "%.0f images/s  ETA %s",
                static_cast<long long>(step), static_cast<long long>(last), window[kDLoss] / n,
                window[kGLoss] / n, window[kDReal] / n, window[kDFake] / n, images_per_s,
                train::clock_text(reporter.eta(elapsed)).c_str());
  reporter.progress(line);
  reporter.metric({{"type", "train"},
                   {"step", step},
                   {"d_loss", window[kDLoss] / n},
                   {"g_loss", window[kGLoss] / n},
                   {"d_real", window[kDReal] / n},
                   {"d_fake", window[kDFake] / n},
                   {"images_per_s", images_per_s},
                   {"elapsed_s", elapsed}});
}

// The global batch against the replicas, --accumulate and the shards.
void check_gan_batch(const GanOptions& o, int replicas) {
  if (o.shards == 0) {
    if (o.global_batch % (replicas * o.accumulate) != 0) {
      throw InvalidArgument("the global batch (" + std::to_string(o.global_batch) +
                            ") must be a multiple of replicas x --accumulate (" +
                            std::to_string(replicas) + " x " + std::to_string(o.accumulate) + ")");
    }
    return;
  }
  if (o.accumulate != 1) {
    throw InvalidArgument("--shards takes the place of --accumulate: each shard is a micro-batch");
  }
  if (o.shards < 0 || o.global_batch % o.shards != 0) {
    throw InvalidArgument("the global batch (" + std::to_string(o.global_batch) +
                          ") must be a multiple of the shards (" + std::to_string(o.shards) + ")");
  }
  if (replicas > o.shards) {
    throw InvalidArgument(std::to_string(replicas) + " replicas for " + std::to_string(o.shards) +
                          " shards: each replica takes at least one shard");
  }
}

// Replica `replica`'s rows of the global batch and its micro-batches.
Rows rows_of(const GanOptions& o, int replicas, int replica) {
  if (o.shards == 0) {
    const std::int64_t rows = o.global_batch / replicas;
    return {.first = replica * rows,
            .count = rows,
            .micro = rows / o.accumulate,
            .parts = o.accumulate,
            .weight = 1.0 / o.accumulate};
  }
  const ShardRange range = shard_range(o.shards, replicas, replica);
  const std::int64_t micro = o.global_batch / o.shards;
  return {.first = range.first * micro,
          .count = range.size() * micro,
          .micro = micro,
          .parts = range.size(),
          .shards = range,
          .weight = static_cast<double>(replicas) / o.shards};
}

}  // namespace

GanResult train_gan(const GanOptions& o) {
  if (o.global_batch < 1 || o.steps < 0 || o.d_steps < 1 || o.accumulate < 1 || o.threads < 1 ||
      o.report_every < 1 || o.standing_batches < 1) {
    throw InvalidArgument(
        "train gan needs a global batch, --d-steps, --accumulate, --threads, --report-every and "
        "--standing-batches of at least 1 and --steps of at least 0");
  }
  const std::filesystem::path dir =
      o.data_dir.empty() ? data::default_fashion_mnist_dir() : o.data_dir;
  const auto train_set =
      std::make_shared<const data::Examples>(data::read_fashion_mnist(dir, data::Split::kTrain));

  train::Job job(o);
  const int R = job.num_replicas();
  check_gan_batch(o, R);
  if (o.shards > 0) job.state_shards(o.shards, o.global_batch);
  return job.run([&](ReplicaContext& ctx) {
    const Rows mine = rows_of(o, R, ctx.replica_id());
    GanModels models = job.build_model(ctx, [&] {
      GanModels m(o.model);
      orthogonal_init(*m->generator);
      orthogonal_init(*m->discriminator);
      rt::to_memory_format(*m, memory_format(o.model));
      return m;
    });
    const auto adam = [](::torch::nn::Module& m, double lr) {
      return std::make_shared<::torch::optim::Adam>(
          m.parameters(), ::torch::optim::AdamOptions(lr).betas({0.0, 0.999}).eps(1e-6));
    };
    auto adam_g = adam(*models->generator, o.lr_g);
    auto adam_d = adam(*models->discriminator, o.lr_d);
    NetworkUpdate update_g(ctx, adam_g, o, models->buffers());
    NetworkUpdate update_d(ctx, adam_d, o, models->buffers());
    GanReplica networks{models, update_g, update_d};
    // A copy of G here; a checkpoint then loads the EMA it saved (in place: ModuleEma's
    // handles stay valid).
    rt::ModuleEma ema(*models->generator, *models->ema,
                      {.decay = o.ema_decay, .start_step = o.ema_start});
    train::JobReplica replica(job, ctx, *models, {adam_g.get(), adam_d.get()});
    const rt::TrainingPosition position = replica.position();
    // A checkpoint brings the layout it was saved in; the run's own wins.
    rt::to_memory_format(*models, memory_format(o.model));

    RealBatches real(data::ShardedLoader(train_set, {.global_batch = o.global_batch,
                                                     .replica = ctx.replica_id(),
                                                     .num_replicas = R,
                                                     .shards = o.shards,
                                                     .seed = o.seed}),
                     position);
    const std::int64_t last = std::max(position.step, o.steps);
    train::JobReporter* reporter = replica.report_until(last);
    GanResult result;
    replica.describe(result);
    std::int64_t step = position.step;
    const auto checkpoint = [&] {
      replica.checkpoint({.step = step, .epoch = real.epoch(), .batch = real.next_index()});
    };

    double window[kSums] = {};
    std::int64_t timed_steps = 0;
    const Clock::time_point started = Clock::now();
    Clock::time_point timed_from = started;
    const auto images_per_s = [&] {
      return timed_steps > 0
                 ? static_cast<double>(timed_steps * o.global_batch) / seconds_since(timed_from)
                 : 0;
    };
    while (step < last) {
      if (step - position.step == o.timed_after) timed_from = Clock::now();
      gan_step(o, networks, real, mine, step, window);
      ++step;
      ema.update(step);
      window[kSteps] += 1;
      if (step - position.step > o.timed_after) ++timed_steps;
      replica.count_step();

      if (step % o.report_every == 0 || step == last) {
        ctx.all_reduce(window, {.op = ReduceOp::kMean});
        result.d_loss = window[kDLoss] / window[kSteps];
        result.g_loss = window[kGLoss] / window[kSteps];
        if (reporter) {
          report_train(*reporter, step, last, window, images_per_s(), seconds_since(started));
        }
        std::fill(std::begin(window), std::end(window), 0.0);
      }
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step < last) checkpoint();
      if (o.sample_every > 0 && step % o.sample_every == 0 && step < last) {
        samples(o, models, mine, step, reporter);
      }
    }
    result.seconds = seconds_since(started);
    result.images_per_s = images_per_s();
    result.steps = step;
    checkpoint();
    samples(o, models, mine, step, reporter);
    result.digest = replica.finish(
        step, {.charts = [](const std::filesystem::path& metrics) {
          return train::charts_from_metrics(
              metrics, "step",
              {{"d_loss", "g_loss"}, {"d_real", "d_fake"}, {"fd"}, {"gan_test_accuracy"}}, "",
              /*skip_empty=*/true);
        }});
    return result;
  });
}

void standing_statistics_for_sampling(Generator& generator, int batches, std::int64_t global,
                                      std::int64_t begin, std::int64_t rows, std::uint64_t seed) {
  rt::standing_statistics(*generator, batches, [&](int i) {
    auto [z, y] = noise(generator->options(), seed, 0, Role::kStanding, i, global, begin, rows);
    generator(z, y);
  });
}

GanModelsImpl::GanModelsImpl(const BigGanOptions& options)
    : generator(register_module("generator", Generator(options))),
      discriminator(register_module("discriminator", Discriminator(options))),
      ema(register_module("ema", Generator(options))) {}

GanModels load_gan_checkpoint(const std::filesystem::path& checkpoint, const BigGanOptions& model,
                              rt::TrainingPosition* position) {
  GanModels models(model);
  ::torch::optim::Adam g(models->generator->parameters(), ::torch::optim::AdamOptions(1e-4));
  ::torch::optim::Adam d(models->discriminator->parameters(), ::torch::optim::AdamOptions(1e-4));
  const rt::TrainingPosition at = rt::load_checkpoint(checkpoint, *models, rt::Optimizers{&g, &d});
  rt::to_memory_format(*models, memory_format(model));
  if (position != nullptr) *position = at;
  models->eval();
  return models;
}

data::Examples sample_examples(Generator& generator, std::int64_t per_class, std::uint64_t seed,
                               std::int64_t batch) {
  const ::torch::NoGradGuard no_grad;
  const BigGanOptions& model = generator->options();
  const std::int64_t n = per_class * model.classes;
  data::Examples out{::torch::empty({n, 28, 28}, ::torch::kUInt8),
                     ::torch::arange(n, ::torch::kLong).remainder(model.classes)};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(mix(seed));
  for (std::int64_t begin = 0; begin < n; begin += batch) {
    const std::int64_t end = std::min(n, begin + batch);
    const ::torch::Tensor z = ::torch::randn({end - begin, model.z_dim()}, gen);
    out.images.slice(0, begin, end).copy_(to_pixels(generator(z, out.labels.slice(0, begin, end))));
  }
  return out;
}

}  // namespace replicator::apps
