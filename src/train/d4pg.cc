#include "replicator/train/d4pg.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/rl/continuous_env.h"
#include "replicator/rl/d4pg.h"
#include "replicator/rl/exploration_actor.h"
#include "replicator/rl/replay.h"
#include "replicator/train/job.h"
#include "replicator/train/plot.h"
#include "replicator/train/reporter.h"

namespace replicator::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// SplitMix64's finaliser: the seeds of each replica's environments, noise and replay, and of
// the evaluation's and the random policy's environments, as fixed functions of the job's seed.
std::uint64_t mix(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream * 0x10001ULL + index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
enum Stream : std::uint64_t { kEnvs = 1, kNoise, kReplay, kEval, kRandom };

// What a checkpoint holds and what the replicas must agree on at the end: the networks, their
// targets and the environment steps played before the checkpoint (a buffer, so that a resumed
// run's curve goes on from there).
class D4pgNetworksImpl : public ::torch::nn::Module {
 public:
  D4pgNetworksImpl(rl::DeterministicPolicy policy_net, rl::DistributionalCritic critic_net)
      : policy(register_module("policy", std::move(policy_net))),
        critic(register_module("critic", std::move(critic_net))),
        env_steps(register_buffer("env_steps", ::torch::zeros({1}, ::torch::kInt64))) {}

  // Registers the learner's target networks, so that they are checkpointed with the rest.
  void add_targets(rl::D4pgLearner& learner) {
    register_module("target_policy", learner.target_policy());
    register_module("target_critic", learner.target_critic());
  }

  rl::DeterministicPolicy policy;
  rl::DistributionalCritic critic;
  ::torch::Tensor env_steps;
};
class D4pgNetworks : public ::torch::nn::ModuleHolder<D4pgNetworksImpl> {
 public:
  using ::torch::nn::ModuleHolder<D4pgNetworksImpl>::ModuleHolder;
};

// The mean return of `episodes` episodes of `env`, one per environment, played together from
// environments seeded with `seed`; `act` fills the actions of the observations.
double play_episodes(const std::string& env, int episodes, std::uint64_t seed,
                     const std::function<void(std::span<const float>, std::vector<float>&)>& act) {
  const std::unique_ptr<rl::ContinuousEnv> e = rl::make_continuous_env(env, episodes, seed);
  std::vector<float> actions(static_cast<std::size_t>(episodes * e->action_size()));
  std::vector<std::uint8_t> ended(static_cast<std::size_t>(episodes), 0);
  rl::StepResult r = e->reset();
  double sum = 0;
  for (int left = episodes; left > 0;) {
    act(r.observations, actions);
    r = e->step(actions);
    for (std::size_t i = 0; i < ended.size(); ++i) {
      if (ended[i] == 0 && (r.terminated[i] != 0 || r.truncated[i] != 0)) {
        ended[i] = 1;
        sum += r.episode_return[i];
        --left;
      }
    }
  }
  return sum / episodes;
}

// A uniform random policy's mean return (actions from a SplitMix64 stream of `seed`).
double random_return(const std::string& env, int episodes, std::uint64_t seed) {
  const std::unique_ptr<rl::ContinuousEnv> probe = rl::make_continuous_env(env, 1, seed);
  const rl::ActionBounds bounds = probe->action_bounds();
  std::uint64_t state = seed;
  return play_episodes(env, episodes, seed, [&](std::span<const float>, std::vector<float>& a) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      state = mix(state, kRandom, i);
      const double u = static_cast<double>(state >> 11) * 0x1.0p-53;
      const std::size_t k = i % bounds.low.size();
      a[i] = static_cast<float>(bounds.low[k] + u * (bounds.high[k] - bounds.low[k]));
    }
  });
}

// The noiseless policy's mean return.
double evaluate(const D4pgJobOptions& o, rl::DeterministicPolicy& policy) {
  const int O = policy->observation_size();
  return play_episodes(o.env, o.eval_episodes, mix(o.seed, kEval, 0),
                       [&](std::span<const float> obs, std::vector<float>& a) {
                         const ::torch::NoGradGuard no_grad;
                         const auto rows = static_cast<std::int64_t>(obs.size()) / O;
                         const ::torch::Tensor x = ::torch::from_blob(
                             const_cast<float*>(obs.data()), {rows, O}, ::torch::kFloat32);
                         const ::torch::Tensor y = policy->forward(x).contiguous();
                         std::copy_n(y.data_ptr<float>(), a.size(), a.begin());
                       });
}

// What every replica of the job shares.
struct D4pgShared {
  const D4pgJobOptions& options;
  int observation_size = 0;
  rl::ActionBounds bounds;
  int per_replica = 0;  // transitions each replica samples per update
  int envs = 0;         // environments each replica's actor steps
  double random_return = kNaN;
};

// Sums over the updates since the last report.
struct Window {
  double critic_loss = 0;
  double policy_loss = 0;
  double updates = 0;
};

// A report window's figures over all replicas, the same on every replica.
struct WindowTotals {
  double critic_loss = 0;
  double policy_loss = 0;
  double actor_return = kNaN;  // mean over replicas of their actors' newest 100 episodes
  double eval_return = kNaN;   // replica 0's evaluation, when it evaluated in this window
  std::int64_t episodes = 0;
};

double newest_mean(const std::vector<float>& returns, std::size_t n) {
  const std::size_t k = std::min(n, returns.size());
  double sum = 0;
  for (std::size_t i = returns.size() - k; i < returns.size(); ++i) sum += returns[i];
  return k > 0 ? sum / static_cast<double>(k) : kNaN;
}

WindowTotals sum_window(ReplicaContext& ctx, Window& w, const rl::ExplorationActor& actor,
                        double eval) {
  const double mean = newest_mean(actor.episode_returns(), 100);
  const bool evaluated = !std::isnan(eval);
  double totals[8] = {w.critic_loss,
                      w.policy_loss,
                      w.updates,
                      std::isnan(mean) ? 0 : mean,
                      std::isnan(mean) ? 0.0 : 1.0,
                      evaluated ? eval : 0,
                      static_cast<double>(actor.episode_returns().size()),
                      evaluated ? 1.0 : 0.0};
  ctx.all_reduce(std::span<double>(totals));
  w = {};
  return {.critic_loss = totals[2] > 0 ? totals[0] / totals[2] : 0,
          .policy_loss = totals[2] > 0 ? totals[1] / totals[2] : 0,
          .actor_return = totals[4] > 0 ? totals[3] / totals[4] : kNaN,
          .eval_return = totals[7] > 0 ? totals[5] : kNaN,
          .episodes = static_cast<std::int64_t>(totals[6])};
}

void report(JobReporter& reporter, const D4pgShared& s, std::int64_t step, std::int64_t env_steps,
            double updates_per_s, double elapsed, const WindowTotals& t) {
  const D4pgJobOptions& o = s.options;
  char eval_text[32] = "-";  // the noiseless policy's return, where it was evaluated
  if (!std::isnan(t.eval_return)) std::snprintf(eval_text, sizeof eval_text, "%.1f", t.eval_return);
  const std::string eval = eval_text;
  char line[320];
  std::snprintf(line, sizeof line,
                "step %lld/%lld  env steps %s  %.1f updates/s  %s samples/s  eval %s  actors "
                "%.1f  critic %.3f  policy %.2f  ETA %s",
                static_cast<long long>(step), static_cast<long long>(o.steps),
                count_text(static_cast<double>(env_steps)).c_str(), updates_per_s,
                count_text(updates_per_s * o.batch).c_str(), eval.c_str(), t.actor_return,
                t.critic_loss, t.policy_loss, clock_text(reporter.eta(elapsed)).c_str());
  reporter.progress(line);
  nlohmann::ordered_json m = {{"type", "train"},
                              {"step", step},
                              {"frames", env_steps},
                              {"seconds", elapsed},
                              {"episodes", t.episodes},
                              {"updates_per_s", updates_per_s},
                              {"samples_per_s", updates_per_s * o.batch},
                              {"critic_loss", t.critic_loss},
                              {"policy_loss", t.policy_loss}};
  if (!std::isnan(s.random_return)) m["random_return"] = s.random_return;
  if (!std::isnan(t.actor_return)) m["actor_return"] = t.actor_return;
  if (!std::isnan(t.eval_return)) m["mean_return"] = t.eval_return;
  reporter.metric(m);
}

// The learning curves: the noiseless policy's and the actors' returns against environment
// steps and against wall seconds; none without both.
std::vector<Chart> learning_curves(const std::string& env, const std::filesystem::path& metrics) {
  const std::vector<std::string> series = {"mean_return", "actor_return", "random_return"};
  std::vector<Chart> charts = charts_from_metrics(metrics, "frames", {series}, "train");
  std::vector<Chart> by_time = charts_from_metrics(metrics, "seconds", {series}, "train");
  charts.insert(charts.end(), by_time.begin(), by_time.end());
  if (charts.size() != 2) return {};
  charts[0].title = env + ": return of the noiseless policy (mean_return) and of the actors";
  charts[0].x_label = "environment steps";
  charts[1].title = env + ": return against wall time";
  charts[1].x_label = "seconds";
  for (Chart& c : charts) c.y_label = "return";
  return charts;
}

std::string job_note(const D4pgShared& s, const D4pgJobResult& r) {
  const D4pgJobOptions& o = s.options;
  char text[400];
  std::snprintf(
      text, sizeof text,
      "d4pg on %s: learner %d replicas (%d processes x %d), each with an actor of %d "
      "environments and a replay of %lld; batch %d, %d environment steps per update "
      "(%.1f samples per insert), %d-step returns, support [%g, %g] in %d atoms%s",
      o.env.c_str(), r.replicas, r.processes, r.local_replicas, s.envs,
      static_cast<long long>(o.replay_size), o.batch, o.env_steps_per_update,
      static_cast<double>(o.batch) / o.env_steps_per_update, o.n_step, o.v_min, o.v_max, o.atoms,
      std::isnan(s.random_return)
          ? ""
          : ("; a uniform random policy returns " + std::to_string(s.random_return)).c_str());
  return text;
}

void check_options(const D4pgJobOptions& o) {
  if (o.steps < 1 || o.batch < 1 || o.env_steps_per_update < 1 || o.n_step < 1 || o.atoms < 2 ||
      o.target_update_period < 1 || o.replay_size < 1 || o.min_replay < 1 || o.eval_every < 0 ||
      o.eval_episodes < 1 || o.random_episodes < 0 || o.report_every < 1 || o.threads < 1) {
    throw InvalidArgument(
        "d4pg: steps, batch, env-steps-per-update, n-step, target-update-period, replay-size, "
        "min-replay, eval-episodes, report-every and threads must be at least 1, atoms at "
        "least 2, eval-every and random-episodes at least 0");
  }
  if (!(o.v_min < o.v_max) || !std::isfinite(o.v_min) || !std::isfinite(o.v_max)) {
    throw InvalidArgument("d4pg: the support needs finite v_min < v_max, got [" +
                          std::to_string(o.v_min) + ", " + std::to_string(o.v_max) + "]");
  }
  if (!(o.noise_std >= 0) || !(o.discount >= 0 && o.discount <= 1) ||
      !(o.policy_learning_rate > 0) || !(o.critic_learning_rate > 0)) {
    throw InvalidArgument(
        "d4pg: noise-std must be >= 0, the discount in [0, 1] and the learning rates > 0");
  }
  if (o.min_replay > o.replay_size) {
    throw InvalidArgument("d4pg: min-replay (" + std::to_string(o.min_replay) +
                          ") exceeds replay-size (" + std::to_string(o.replay_size) + ")");
  }
}

D4pgJobResult learn(Job& job, ReplicaContext& ctx, const D4pgShared& s);

}  // namespace

D4pgJobOptions d4pg_defaults(const D4pgJobOptions& options) {
  D4pgJobOptions o = options;
  const bool cheetah = o.env == "half_cheetah";
  if (std::isnan(o.v_min)) o.v_min = cheetah ? -250 : -100;
  if (std::isnan(o.v_max)) o.v_max = cheetah ? 1250 : 10;
  return o;
}

D4pgJobResult train_d4pg(const D4pgJobOptions& options) {
  const D4pgJobOptions o = d4pg_defaults(options);
  check_options(o);
  // Checks the task before anything starts.
  const std::unique_ptr<rl::ContinuousEnv> probe = rl::make_continuous_env(o.env, 1, o.seed);
  Job job(o);
  const auto R = job.num_replicas();
  D4pgShared shared{
      .options = o,
      .observation_size = probe->observation_size(),
      .bounds = probe->action_bounds(),
      .per_replica = static_cast<int>(job.split_batch(o.batch, "batch")),
      .envs = static_cast<int>(job.split_batch(o.env_steps_per_update, "env-steps-per-update")),
      .random_return = o.random_episodes > 0
                           ? random_return(o.env, o.random_episodes, mix(o.seed, kRandom, 0))
                           : kNaN};
  if (o.replay_size < shared.per_replica) {
    throw InvalidArgument("d4pg: replay-size (" + std::to_string(o.replay_size) +
                          ") below each replica's share of the batch (" +
                          std::to_string(shared.per_replica) + " of " + std::to_string(o.batch) +
                          " on " + std::to_string(R) + " replicas)");
  }
  return job.run([&](ReplicaContext& ctx) { return learn(job, ctx, shared); });
}

namespace {

D4pgJobResult learn(Job& job, ReplicaContext& ctx, const D4pgShared& s) {
  const D4pgJobOptions& o = s.options;
  const int A = static_cast<int>(s.bounds.low.size());
  D4pgNetworks nets = job.build_model(ctx, [&] {
    return D4pgNetworks(rl::DeterministicPolicy(s.observation_size, s.bounds, o.policy_hidden),
                        rl::DistributionalCritic(s.observation_size, A, o.atoms, o.critic_hidden));
  });
  rl::D4pgLearner learner(ctx, nets->policy, nets->critic,
                          {.policy_learning_rate = o.policy_learning_rate,
                           .critic_learning_rate = o.critic_learning_rate,
                           .support = {.v_min = o.v_min, .v_max = o.v_max, .num_atoms = o.atoms},
                           .target_update_period = o.target_update_period});
  nets->add_targets(learner);
  JobReplica replica(job, ctx, *nets, {&learner.policy_optimizer(), &learner.critic_optimizer()});
  std::int64_t step = replica.position().step;
  learner.resume_at(step);
  D4pgJobResult result;
  replica.describe(result);
  result.random_return = s.random_return;

  // This replica's actor and replay: seeded from (seed, replica), and on a resumed run from
  // the step too, so that it does not replay the first run's episodes.
  const auto id =
      static_cast<std::uint64_t>(ctx.replica_id()) + (static_cast<std::uint64_t>(step) << 20);
  const std::unique_ptr<rl::ContinuousEnv> env =
      rl::make_continuous_env(o.env, s.envs, mix(o.seed, kEnvs, id));
  rl::ExplorationActor actor(*env, nets->policy,
                             {.noise_std = o.noise_std,
                              .n_step = o.n_step,
                              .discount = o.discount,
                              .seed = mix(o.seed, kNoise, id)});
  const auto replay_min =
      static_cast<std::size_t>(std::max<std::int64_t>(o.min_replay, s.per_replica));
  rl::ReplayBuffer replay({.capacity = static_cast<std::size_t>(o.replay_size),
                           .min_size = replay_min,
                           .seed = mix(o.seed, kReplay, id)});
  std::vector<rl::Transition> fresh;
  std::int64_t played = 0;  // this replica's environment steps in this run
  const auto play = [&] {
    actor.step(fresh);
    for (rl::Transition& t : fresh) replay.insert(std::move(t));
    fresh.clear();
    played += s.envs;
  };
  while (replay.size() < replay_min) play();
  // Environment steps over all replicas before this run's first update (the checkpoint's
  // count, and every replica's fill), the same on every replica.
  double before[1] = {static_cast<double>(played)};
  ctx.all_reduce(std::span<double>(before));
  const std::int64_t env_steps_at_start =
      nets->env_steps.item<std::int64_t>() + static_cast<std::int64_t>(before[0]);
  const auto env_steps_at = [&](std::int64_t at) {
    return env_steps_at_start + (at - replica.position().step) * o.env_steps_per_update;
  };
  const auto checkpoint = [&](std::int64_t at) {
    nets->env_steps.fill_(env_steps_at(at));
    replica.checkpoint({.step = at});
  };

  JobReporter* reporter = replica.report_until(o.steps);
  if (reporter) reporter->note(job_note(s, result));
  const Clock::time_point started = Clock::now();
  const std::int64_t first_step = step;
  std::int64_t last_eval = step;
  Window window;
  WindowTotals totals;
  while (step < o.steps) {
    play();
    const rl::D4pgStats stats =
        learner.update(replay.sample(static_cast<std::size_t>(s.per_replica)));
    window.critic_loss += stats.critic_loss;
    window.policy_loss += stats.policy_loss;
    window.updates += 1;
    ++step;
    replica.count_step();
    if (step % o.report_every == 0 || step == o.steps) {
      const bool eval_due =
          step == o.steps || (o.eval_every > 0 && step / o.eval_every > last_eval / o.eval_every);
      double eval = kNaN;
      if (eval_due) {
        last_eval = step;
        if (ctx.replica_id() == 0) eval = evaluate(o, nets->policy);
      }
      totals = sum_window(ctx, window, actor, eval);
      const double elapsed = seconds_since(started);
      if (reporter) {
        report(*reporter, s, step, env_steps_at(step),
               static_cast<double>(step - first_step) / elapsed, elapsed, totals);
      }
      if (!std::isnan(totals.eval_return)) result.eval_return = totals.eval_return;
    }
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) checkpoint(step);
  }
  checkpoint(step);
  result.steps = step;
  result.seconds = seconds_since(started);
  result.env_steps = env_steps_at(step);
  result.episodes = totals.episodes;
  result.actor_return = totals.actor_return;
  result.critic_loss = totals.critic_loss;
  result.policy_loss = totals.policy_loss;
  result.updates_per_s = static_cast<double>(step - first_step) / result.seconds;
  result.samples_per_s = result.updates_per_s * o.batch;
  result.digest = replica.finish(
      step, {.name = "learning_curve", .charts = [&](const std::filesystem::path& metrics) {
               return learning_curves(o.env, metrics);
             }});
  return result;
}

}  // namespace
}  // namespace replicator::train
