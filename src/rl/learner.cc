#include "replicator/rl/learner.h"

#include <torch/nn/utils/clip_grad.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "replicator/errors.h"

namespace replicator::rl {

UnrollBatch stack_unrolls(std::span<const Unroll> unrolls, const LearnerOptions& options) {
  if (unrolls.empty()) throw InvalidArgument("stack_unrolls: no unrolls");
  const Unroll& first = unrolls.front();
  const int T = first.length;
  const int size = first.observation_size;
  const int A = first.num_actions;
  const auto B = static_cast<std::int64_t>(unrolls.size());
  for (const Unroll& u : unrolls) {
    if (!u.consistent() || u.length != T || u.observation_size != size || u.num_actions != A) {
      throw InvalidArgument("stack_unrolls: unroll " + std::to_string(u.sequence) + " of actor " +
                            std::to_string(u.actor) +
                            " does not match the batch's length, observation size and actions, "
                            "or its vectors do not match its counts");
    }
  }
  UnrollBatch batch{.observations = ::torch::empty({T + 1, B, size}, ::torch::kFloat32),
                    .actions = ::torch::empty({T, B}, ::torch::kInt64),
                    .rewards = ::torch::empty({T, B}, ::torch::kFloat32),
                    .discounts = ::torch::empty({T, B}, ::torch::kFloat32),
                    .behaviour_logits = ::torch::empty({T, B, A}, ::torch::kFloat32)};
  float* obs = batch.observations.data_ptr<float>();
  auto* act = batch.actions.data_ptr<std::int64_t>();
  float* rew = batch.rewards.data_ptr<float>();
  float* dis = batch.discounts.data_ptr<float>();
  float* log = batch.behaviour_logits.data_ptr<float>();
  const auto clip = static_cast<float>(options.reward_clip);
  const auto gamma = static_cast<float>(options.discount);
  for (std::int64_t b = 0; b < B; ++b) {
    const Unroll& u = unrolls[static_cast<std::size_t>(b)];
    for (int t = 0; t <= T; ++t) {
      std::memcpy(obs + (t * B + b) * size, u.observations.data() + t * size,
                  static_cast<std::size_t>(size) * sizeof(float));
    }
    for (int t = 0; t < T; ++t) {
      const auto k = static_cast<std::size_t>(t);
      act[t * B + b] = u.actions[k];
      float r = u.rewards[k];
      if (clip > 0) r = std::clamp(r, -clip, clip);
      rew[t * B + b] = r;
      dis[t * B + b] = u.done[k] ? 0.f : gamma;
      std::memcpy(log + (t * B + b) * A,
                  u.behaviour_logits.data() + k * static_cast<std::size_t>(A),
                  static_cast<std::size_t>(A) * sizeof(float));
    }
  }
  return batch;
}

Learner::Learner(ReplicaContext& ctx, PolicyNet model, const LearnerOptions& options)
    : model_(std::move(model)),
      options_(options),
      optimizer_(std::make_shared<::torch::optim::RMSprop>(
          model_->parameters(), ::torch::optim::RMSpropOptions(options.learning_rate)
                                    .alpha(options.rmsprop_alpha)
                                    .eps(options.rmsprop_eps)
                                    .momentum(options.rmsprop_momentum))),
      replicated_(ctx, optimizer_, {.overlap = false, .op = ReduceOp::kSum}) {
  if (options.shards > 0) {
    shards_.emplace(
        ctx, model_->parameters(), options.shards,
        torch::ShardGradientsOptions{.op = ReduceOp::kSum, .buffers = model_->buffers()});
  }
}

void Learner::set_learning_rate(double learning_rate) {
  if (!(learning_rate >= 0)) {
    throw InvalidArgument("Learner: the learning rate must be >= 0, got " +
                          std::to_string(learning_rate));
  }
  for (auto& group : optimizer_->param_groups()) {
    static_cast<::torch::optim::RMSpropOptions&>(group.options()).lr(learning_rate);
  }
}

namespace {

ImpalaLoss loss_of(PolicyNet& model, std::span<const Unroll> unrolls,
                   const LearnerOptions& options) {
  const UnrollBatch batch = stack_unrolls(unrolls, options);
  const std::int64_t T = batch.actions.size(0);
  const std::int64_t B = batch.actions.size(1);
  const PolicyOutput out = model->forward(batch.observations.reshape({(T + 1) * B, -1}));
  const ::torch::Tensor logits = out.logits.reshape({T + 1, B, -1});
  const ::torch::Tensor values = out.value.reshape({T + 1, B});
  return impala_loss({.behaviour_logits = batch.behaviour_logits,
                      .target_logits = logits.slice(0, 0, T),
                      .actions = batch.actions,
                      .discounts = batch.discounts,
                      .rewards = batch.rewards,
                      .values = values.slice(0, 0, T),
                      .bootstrap_value = values[T].detach()},
                     options.loss);
}

void add_loss(LearnerStats& stats, const ImpalaLoss& loss) {
  stats.loss += loss.total.item<double>();
  stats.policy_gradient += loss.policy_gradient.item<double>();
  stats.baseline += loss.baseline.item<double>();
  stats.entropy += loss.entropy.item<double>();
}

}  // namespace

LearnerStats Learner::update(std::span<const Unroll> share) {
  replicated_.zero_grad();
  LearnerStats stats;
  if (!shards_) {
    const ImpalaLoss loss = loss_of(model_, share, options_);
    loss.total.backward();
    replicated_.reducer().synchronize();
    add_loss(stats, loss);
  } else {
    // Per shard of this replica's range, summed over the shard tree.
    const ShardRange range = shards_->range();
    const auto shards = static_cast<std::size_t>(range.size());
    if (share.empty() || share.size() % shards != 0) {
      throw InvalidArgument("Learner::update: " + std::to_string(share.size()) +
                            " unrolls for the " + std::to_string(shards) +
                            " shards of this replica; each shard takes as many");
    }
    const std::size_t per_shard = share.size() / shards;
    for (int s = range.first; s < range.last; ++s) {
      shards_->begin_shard(s);
      const ImpalaLoss loss = loss_of(
          model_, share.subspan(static_cast<std::size_t>(s - range.first) * per_shard, per_shard),
          options_);
      loss.total.backward();
      shards_->add_shard(s);
      add_loss(stats, loss);
    }
    shards_->synchronize();
  }
  const double inf = std::numeric_limits<double>::infinity();
  stats.grad_norm = ::torch::nn::utils::clip_grad_norm_(
      model_->parameters(), options_.max_grad_norm > 0 ? options_.max_grad_norm : inf);
  optimizer_->step();
  ++updates_;
  return stats;
}

}  // namespace replicator::rl
