#include "apps/train/classifier.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "examples/models/resnet.h"
#include "replicator/data/fashion_mnist.h"
#include "replicator/data/sharded_loader.h"
#include "replicator/device.h"
#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch.h"
#include "replicator/train/job.h"
#include "replicator/train/plot.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {

using examples::ResNet;
using examples::ResNetOptions;

namespace {

namespace rt = replicator::torch;
using Clock = std::chrono::steady_clock;

using train::seconds_since;

// Images per second of `steps` steps of `batch` taken since `from` (0 before any).
double images_per_s(std::int64_t steps, std::int64_t batch, Clock::time_point from) {
  return steps > 0 ? static_cast<double>(steps * batch) / seconds_since(from) : 0;
}

// Linear warm-up over the first 5% of the steps, then cosine decay to zero.
double learning_rate(const TrainOptions& o, std::int64_t step, std::int64_t total) {
  const double peak = o.lr * static_cast<double>(o.batch) / 256.0;
  const std::int64_t warm = std::max<std::int64_t>(1, total / 20);
  if (step < warm) return peak * static_cast<double>(step + 1) / static_cast<double>(warm);
  const double t = static_cast<double>(step - warm) /
                   static_cast<double>(std::max<std::int64_t>(1, total - warm));
  return 0.5 * peak * (1.0 + std::cos(M_PI * std::min(1.0, t)));
}

void set_learning_rate(::torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    static_cast<::torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
}

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// One step's training loss on this replica: a sum of per-batch means and how many.
struct StepLoss {
  double sum = 0;
  double count = 0;
};

// `batch` on `device` (the same tensors on the CPU).
data::Batch placed(const data::Batch& batch, const c10::Device& device) {
  return {.images = batch.images.to(device),
          .labels = batch.labels.to(device),
          .epoch = batch.epoch,
          .index = batch.index};
}

// A data-parallel step: the gradients of the replica's examples, reduced over the replicas
// by the replicated optimizer (from within backward on the CPU; after it on a GPU), then its
// step.
StepLoss plain_step(ResNet& model, rt::ReplicatedOptimizer& optimizer, const data::Batch& batch) {
  optimizer.zero_grad();
  const ::torch::Tensor loss =
      ::torch::nn::functional::cross_entropy(model->forward(batch.images), batch.labels);
  loss.backward();
  optimizer.step();
  return {.sum = loss.item<double>(), .count = 1};
}

// A step over this replica's logical shards (--shards): forward and backward per shard, with
// batch norm over the shard, then the gradients and running statistics combined in the
// tree over shard ids, then the optimizer's step.
StepLoss sharded_step(ResNet& model, rt::ShardGradients& grads, ::torch::optim::Optimizer& sgd,
                      const data::Batch& batch) {
  sgd.zero_grad();
  const ShardRange range = grads.range();
  const std::int64_t rows = batch.images.size(0) / range.size();
  StepLoss loss;
  {
    const rt::ShardLocalBatchNorm per_shard;
    for (int s = range.first; s < range.last; ++s) {
      grads.begin_shard(s);
      const std::int64_t at = (s - range.first) * rows;
      // Fresh allocations: the kernels see the same alignment wherever the shard lies in
      // this replica's slice.
      const ::torch::Tensor images = batch.images.narrow(0, at, rows).clone();
      const ::torch::Tensor labels = batch.labels.narrow(0, at, rows).clone();
      const ::torch::Tensor l =
          ::torch::nn::functional::cross_entropy(model->forward(images), labels);
      l.backward();
      grads.add_shard(s);
      loss.sum += l.item<double>();
      loss.count += 1;
    }
  }
  grads.synchronize();
  sgd.step();
  return loss;
}

// The training step of the job: without shards the replicated optimizer reduces the
// gradients over the replicas; with them ShardGradients does, in the tree over shard ids.
class Stepper {
 public:
  Stepper(ReplicaContext& ctx, ResNet& model, const std::shared_ptr<::torch::optim::SGD>& sgd,
          const TrainOptions& o) {
    if (o.shards == 0) {
      optimizer_.emplace(ctx, sgd,
                         rt::GradientOptions{.bucket_bytes = o.bucket_bytes, .overlap = o.overlap});
    } else {
      shards_.emplace(ctx, model->parameters(), o.shards,
                      rt::ShardGradientsOptions{.buffers = model->buffers()});
    }
  }

  StepLoss step(ResNet& model, ::torch::optim::Optimizer& sgd, const data::Batch& batch) {
    return shards_ ? sharded_step(model, *shards_, sgd, batch)
                   : plain_step(model, *optimizer_, batch);
  }

 private:
  std::optional<rt::ReplicatedOptimizer> optimizer_;
  std::optional<rt::ShardGradients> shards_;
};

// Where the replicas train: the host, or CUDA (LibTorch's CUDA library loaded before anything
// asks LibTorch about CUDA). Throws InvalidArgument for fake devices, and for shards off the
// host; Error when LibTorch has no GPU.
void check_devices(const TrainOptions& o) {
  const DeviceSet devices = parse_devices(o.config.devices);
  if (devices.kind == MemoryKind::kHost) return;
  if (devices.kind == MemoryKind::kFake) {
    throw InvalidArgument("the classifier trains on the host or on CUDA devices, not on " +
                          o.config.devices);
  }
  if (o.shards > 0) {
    throw InvalidArgument("--shards runs on the host only (devices " + o.config.devices + ")");
  }
  (void)rt::torch_device_of(Device{MemoryKind::kCuda, 0});
}

// Checks the global batch against the replicas (and shards): each replica's rows.
void check_batch(const train::Job& job, const TrainOptions& o) {
  if (o.shards == 0) {
    job.split_batch(o.batch);
    return;
  }
  if (o.shards < 0 || o.batch % o.shards != 0) {
    throw InvalidArgument("the global batch (" + std::to_string(o.batch) +
                          ") must be a multiple of the shards (" + std::to_string(o.shards) + ")");
  }
  if (job.num_replicas() > o.shards) {
    throw InvalidArgument(std::to_string(job.num_replicas()) + " replicas for " +
                          std::to_string(o.shards) +
                          " shards: each replica takes at least one shard");
  }
}

// Each replica evaluates its shard of the test set (eval-mode batch norm: no collectives
// per batch); one all_reduce sums [correct, count, loss].
Evaluation evaluate(ReplicaContext& ctx, ResNet& model, data::ShardedLoader& loader,
                    const c10::Device& device) {
  const ::torch::NoGradGuard no_grad;
  model->eval();
  double sums[3] = {0, 0, 0};
  loader.start_epoch(0);
  while (std::optional<data::Batch> next = loader.next()) {
    if (next->images.size(0) == 0) continue;
    const data::Batch batch = placed(*next, device);
    const ::torch::Tensor logits = model->forward(batch.images);
    sums[0] += logits.argmax(1).eq(batch.labels).sum().item<double>();
    sums[1] += static_cast<double>(batch.labels.size(0));
    sums[2] += ::torch::nn::functional::cross_entropy(
                   logits, batch.labels,
                   ::torch::nn::functional::CrossEntropyFuncOptions().reduction(::torch::kSum))
                   .item<double>();
  }
  ctx.all_reduce(sums);
  model->train();
  return {sums[0] / sums[1], sums[2] / sums[1]};
}

// The classifier's lines and records, through the job's reporter.
void report_train(train::JobReporter& reporter, const TrainOptions& o, std::int64_t epoch,
                  std::int64_t step, std::int64_t total_steps, double loss, double lr,
                  double images_per_s, double elapsed) {
  char line[200];
  std::snprintf(line, sizeof line,
                "epoch %lld/%d  step %lld/%lld  loss %.4f  %.0f images/s  ETA %s",
                static_cast<long long>(epoch) + 1, o.epochs, static_cast<long long>(step),
                static_cast<long long>(total_steps), loss, images_per_s,
                train::clock_text(reporter.eta(elapsed)).c_str());
  reporter.progress(line);
  reporter.metric({{"type", "train"},
                   {"epoch", epoch},
                   {"step", step},
                   {"loss", loss},
                   {"lr", lr},
                   {"images_per_s", images_per_s},
                   {"elapsed_s", elapsed}});
}

void report_evaluation(train::JobReporter& reporter, std::int64_t epoch, std::int64_t step,
                       const Evaluation& e) {
  char line[120];
  std::snprintf(line, sizeof line, "epoch %lld: test accuracy %.4f, test loss %.4f",
                static_cast<long long>(epoch) + 1, e.accuracy, e.loss);
  reporter.note(line);
  reporter.metric({{"type", "eval"},
                   {"epoch", epoch},
                   {"step", step},
                   {"test_accuracy", e.accuracy},
                   {"test_loss", e.loss}});
}

}  // namespace

TrainResult train_classifier(const TrainOptions& o) {
  if (o.epochs < 1)
    throw InvalidArgument("epochs must be at least 1, got " + std::to_string(o.epochs));
  if (o.batch < 1)
    throw InvalidArgument("batch must be at least 1, got " + std::to_string(o.batch));
  check_devices(o);
  const std::filesystem::path dir =
      o.data_dir.empty() ? data::default_fashion_mnist_dir() : o.data_dir;
  const auto read = [&dir](data::Split split) {
    return std::make_shared<const data::Examples>(data::read_fashion_mnist(dir, split));
  };
  const std::shared_ptr<const data::Examples> train_set =
      o.train_examples ? o.train_examples : read(data::Split::kTrain);
  const std::shared_ptr<const data::Examples> test_set =
      o.test_examples ? o.test_examples : read(data::Split::kTest);

  train::Job job(o);
  const int R = job.num_replicas();
  check_batch(job, o);
  if (o.shards > 0) job.state_shards(o.shards, o.batch);
  return job.run([&](ReplicaContext& ctx) {
    const c10::Device device = rt::torch_device_of(ctx.device());
    ResNet model = job.build_model(ctx, [&] {
      ResNet m(ResNetOptions{.channels_last = o.channels_last});
      m->to(device);
      rt::to_memory_format(*m, memory_format(m->options()));
      return m;
    });
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(),
                                                     ::torch::optim::SGDOptions(o.lr)
                                                         .momentum(o.momentum)
                                                         .nesterov(o.momentum > 0)
                                                         .weight_decay(o.weight_decay));
    Stepper stepper(ctx, model, sgd, o);
    data::ShardedLoader loader(train_set, {.global_batch = o.batch,
                                           .replica = ctx.replica_id(),
                                           .num_replicas = R,
                                           .shards = o.shards,
                                           .seed = o.seed,
                                           .augment = o.augment});
    const std::int64_t eval_batch = std::int64_t{(1000 + R - 1) / R} * R;
    data::ShardedLoader test_loader(test_set, {.global_batch = eval_batch,
                                               .replica = ctx.replica_id(),
                                               .num_replicas = R,
                                               .shuffle = false,
                                               .drop_last = false});
    const std::int64_t per_epoch = loader.batches_per_epoch();
    const std::int64_t total = per_epoch * o.epochs;

    train::JobReplica replica(job, ctx, *model, {sgd.get()});
    const rt::TrainingPosition position = replica.position();
    // A checkpoint brings the layout it was saved in; the run's own wins.
    rt::to_memory_format(*model, memory_format(model->options()));
    const std::int64_t last = o.max_steps > 0 ? std::min(total, o.max_steps) : total;
    train::JobReporter* reporter = replica.report_until(last);
    TrainResult result;
    replica.describe(result);

    const std::int64_t log_every = std::max<std::int64_t>(1, per_epoch / 20);
    double window[2] = {0, 0};  // loss sum, steps since the last report
    std::int64_t step = position.step;
    std::int64_t timed_steps = 0;
    const Clock::time_point started = Clock::now();
    Clock::time_point timed_from = started;
    bool stopped = false;
    for (std::int64_t epoch = position.epoch; epoch < o.epochs && !stopped; ++epoch) {
      loader.start_epoch(epoch, epoch == position.epoch ? position.batch : 0);
      while (std::optional<data::Batch> batch = loader.next()) {
        if (step >= last) {
          stopped = true;
          replica.checkpoint({.step = step, .epoch = epoch, .batch = batch->index});
          break;
        }
        if (step - position.step == o.timed_after) timed_from = Clock::now();
        const double lr = learning_rate(o, step, total);
        set_learning_rate(*sgd, lr);
        const StepLoss loss = stepper.step(model, *sgd, placed(*batch, device));
        ++step;
        if (step - position.step > o.timed_after) ++timed_steps;
        window[0] += loss.sum;
        window[1] += loss.count;
        replica.count_step();
        if (step % log_every == 0 || batch->index + 1 == per_epoch) {
          ctx.all_reduce(window);
          if (reporter) {
            const double rate = images_per_s(timed_steps, o.batch, timed_from);
            report_train(*reporter, o, epoch, step, total, window[0] / window[1], lr, rate,
                         seconds_since(started));
          }
          window[0] = window[1] = 0;
        }
        if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) {
          replica.checkpoint({.step = step, .epoch = epoch, .batch = batch->index + 1});
        }
      }
      if (stopped) break;
      if (o.evaluate) {
        const Evaluation e = evaluate(ctx, model, test_loader, device);
        result.test_accuracy = e.accuracy;
        if (reporter) report_evaluation(*reporter, epoch, step, e);
      }
      replica.checkpoint({.step = step, .epoch = epoch + 1, .batch = 0});
      if (step >= last) stopped = true;
    }
    result.seconds = seconds_since(started);
    result.images_per_s = images_per_s(timed_steps, o.batch, timed_from);
    result.steps = step;
    // The loss (a run too short to log one says "no data"), and the test accuracy if evaluated.
    result.digest = replica.finish(step, {.charts = [](const std::filesystem::path& metrics) {
                                     std::vector<train::Chart> charts = train::charts_from_metrics(
                                         metrics, "step", {{"loss"}, {"test_accuracy"}});
                                     if (charts[1].series[0].x.empty()) charts.pop_back();
                                     return charts;
                                   }});
    return result;
  });
}

}  // namespace replicator::apps
