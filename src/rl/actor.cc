#include "replicator/rl/actor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/activation.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "replicator/errors.h"

namespace replicator::rl {

EpisodeLog::EpisodeLog() : start_(std::chrono::steady_clock::now()) {}

void EpisodeLog::add(double episode_return, std::int32_t length, std::int64_t frames) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard lock(mu_);
  episodes_.push_back(
      {.episode_return = episode_return, .length = length, .frames = frames, .seconds = seconds});
}

std::vector<EpisodeLog::Episode> EpisodeLog::since(std::size_t first, std::size_t* end) const {
  std::lock_guard lock(mu_);
  if (end) *end = episodes_.size();
  if (first >= episodes_.size()) return {};
  return {episodes_.begin() + static_cast<std::ptrdiff_t>(first), episodes_.end()};
}

double EpisodeLog::mean_return(std::size_t n, std::size_t* count) const {
  std::lock_guard lock(mu_);
  const std::size_t k = std::min(n, episodes_.size());
  if (count) *count = k;
  if (k == 0) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (std::size_t i = episodes_.size() - k; i < episodes_.size(); ++i) {
    sum += episodes_[i].episode_return;
  }
  return sum / static_cast<double>(k);
}

std::size_t EpisodeLog::size() const {
  std::lock_guard lock(mu_);
  return episodes_.size();
}

Actor::Actor(int id, const ActorOptions& options, const ParameterStore& store,
             TrajectoryQueue<Unroll>& queue, EpisodeLog& log, ActorCounters& counters)
    : id_(id),
      options_(options),
      store_(store),
      queue_(queue),
      log_(log),
      counters_(counters),
      generator_(at::detail::createCPUGenerator(options.seed * 1000003ULL +
                                                static_cast<std::uint64_t>(id) + 1)) {
  if (options.envs < 1 || options.unroll < 1) {
    throw InvalidArgument("Actor: envs and unroll must be at least 1, got " +
                          std::to_string(options.envs) + " and " + std::to_string(options.unroll));
  }
  const std::uint64_t env_seed = options.seed * 7919ULL + static_cast<std::uint64_t>(id);
  env_ = make_actor_env(options.make_env, options.env, id, options.envs, env_seed,
                        options.env_options);
  model_ = PolicyNet(env_->observation_shape(), env_->num_actions(), options.hidden);
  pending_.resize(static_cast<std::size_t>(options.envs));
  resetting_.assign(static_cast<std::size_t>(options.envs), 0);
}

void Actor::refresh() {
  if (store_.version() == version_) return;
  const std::shared_ptr<const PolicySnapshot> snapshot = store_.latest();
  if (!snapshot || snapshot->version == version_) return;
  load_parameters(*model_, snapshot->parameters);
  version_ = snapshot->version;
}

void Actor::start_unroll(int i, const float* observation) {
  Pending& p = pending_[static_cast<std::size_t>(i)];
  const int T = options_.unroll;
  const int size = env_->observation_size();
  const int A = env_->num_actions();
  p.steps = 0;
  Unroll& u = p.unroll;
  u.length = T;
  u.observation_size = size;
  u.num_actions = A;
  u.observations.assign(static_cast<std::size_t>(T + 1) * static_cast<std::size_t>(size), 0.f);
  u.actions.assign(static_cast<std::size_t>(T), 0);
  u.rewards.assign(static_cast<std::size_t>(T), 0.f);
  u.done.assign(static_cast<std::size_t>(T), 0);
  u.behaviour_logits.assign(static_cast<std::size_t>(T) * static_cast<std::size_t>(A), 0.f);
  u.actor = id_;
  std::memcpy(u.observations.data(), observation, static_cast<std::size_t>(size) * sizeof(float));
}

void Actor::begin() {
  const int size = env_->observation_size();
  last_ = env_->last();
  for (int i = 0; i < options_.envs; ++i) start_unroll(i, last_.observations.data() + i * size);
  actions_.assign(static_cast<std::size_t>(options_.envs), 0);
  begun_ = true;
}

void Actor::run(const std::atomic<bool>& stop) {
  while (store_.version() == 0) {
    if (stop.load(std::memory_order_relaxed)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  try {
    while (!stop.load(std::memory_order_relaxed)) step();
  } catch (const Aborted&) {
    if (!queue_.stats().closed) throw;  // closed: the job is over
  }
}

void Actor::step() {
  ::torch::NoGradGuard no_grad;
  if (!begun_) begin();
  const int M = options_.envs;
  const int T = options_.unroll;
  const int size = env_->observation_size();
  const int A = env_->num_actions();
  refresh();
  const ::torch::Tensor observations = ::torch::from_blob(
      const_cast<float*>(last_.observations.data()), {M, size}, ::torch::kFloat32);
  const PolicyOutput out = model_->forward(observations);
  const ::torch::Tensor logits = out.logits.contiguous();
  const ::torch::Tensor sampled =
      ::torch::multinomial(::torch::softmax(logits, 1), 1, false, generator_)
          .to(::torch::kInt32)
          .contiguous();
  counters_.forwards.fetch_add(1, std::memory_order_relaxed);
  const float* logit = logits.data_ptr<float>();
  const std::int32_t* chosen = sampled.data_ptr<std::int32_t>();
  for (int i = 0; i < M; ++i) {
    const auto k = static_cast<std::size_t>(i);
    actions_[k] = resetting_[k] ? 0 : chosen[i];
    if (resetting_[k]) continue;
    Pending& p = pending_[k];
    const auto t = static_cast<std::size_t>(p.steps);
    if (p.steps == 0) p.unroll.policy_version = version_;
    p.unroll.actions[t] = actions_[k];
    std::memcpy(p.unroll.behaviour_logits.data() + t * static_cast<std::size_t>(A), logit + i * A,
                static_cast<std::size_t>(A) * sizeof(float));
  }
  last_ = env_->step(actions_);
  std::int64_t stepped = 0;
  for (int i = 0; i < M; ++i) {
    const auto k = static_cast<std::size_t>(i);
    Pending& p = pending_[k];
    const float* next = last_.observations.data() + i * size;
    float* slot = p.unroll.observations.data() +
                  static_cast<std::size_t>(p.steps) * static_cast<std::size_t>(size);
    if (resetting_[k]) {
      // The reset step: its observation starts the new episode where the old one's last
      // observation stood.
      std::memcpy(slot, next, static_cast<std::size_t>(size) * sizeof(float));
      resetting_[k] = 0;
      continue;
    }
    ++stepped;
    const auto t = static_cast<std::size_t>(p.steps);
    const bool done = last_.terminated[k] != 0 || last_.truncated[k] != 0;
    p.unroll.rewards[t] = last_.rewards[k];
    p.unroll.done[t] = done ? 1 : 0;
    ++p.steps;
    std::memcpy(slot + size, next, static_cast<std::size_t>(size) * sizeof(float));
    if (done) {
      resetting_[k] = 1;
      log_.add(last_.episode_return[k], last_.episode_length[k],
               counters_.frames.load(std::memory_order_relaxed) + stepped);
    }
    if (p.steps == T) {
      Unroll full = std::move(p.unroll);
      full.sequence = sequence_++;
      const float* bootstrap =
          full.observations.data() + static_cast<std::size_t>(T) * static_cast<std::size_t>(size);
      start_unroll(i, bootstrap);
      queue_.insert(std::move(full), options_.insert_timeout);
      counters_.unrolls.fetch_add(1, std::memory_order_relaxed);
    }
  }
  counters_.frames.fetch_add(stepped, std::memory_order_relaxed);
}

}  // namespace replicator::rl
