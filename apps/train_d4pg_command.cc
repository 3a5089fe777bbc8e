// `replicator train d4pg`: the D4PG job (replicator/train/d4pg.h) from the command line.
// Prints the result on stderr (and, with --json, one JSON object on stdout).
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/command.h"
#include "apps/job_flags.h"
#include "replicator/errors.h"
#include "replicator/launch/memory_mode.h"
#include "replicator/train/d4pg.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

using train::D4pgJobOptions;
using train::D4pgJobResult;

struct D4pgFlags {
  D4pgJobOptions options;
  JobFlags job;
  char** argv = nullptr;  // main's, for the memory setting's re-execution
};

nlohmann::ordered_json number(double v) {
  return std::isnan(v) ? nlohmann::ordered_json() : nlohmann::ordered_json(v);
}

int run_d4pg(const D4pgFlags& f) {
  launch::apply_memory_mode(launch::parse_memory_mode(f.job.memory), f.argv);
  D4pgJobOptions o = train::d4pg_defaults(f.options);
  f.job.apply("train d4pg", o);

  const D4pgJobResult r = train::train_d4pg(o);
  if (!r.reporter) return 0;
  std::fprintf(stderr,
               "learned %lld updates from %lld environment steps on %d replicas (%d processes x "
               "%d) in %.1f s: %.1f updates/s, %.0f samples/s; the noiseless policy returns "
               "%.1f",
               static_cast<long long>(r.steps), static_cast<long long>(r.env_steps), r.replicas,
               r.processes, r.local_replicas, r.seconds, r.updates_per_s, r.samples_per_s,
               r.eval_return);
  if (!std::isnan(r.random_return)) std::fprintf(stderr, " (random policy %.1f)", r.random_return);
  std::fprintf(stderr, "; parameters digest %s\n", r.digest.c_str());
  if (f.job.json) {
    train::print_json_result({{"type", "d4pg"},
                              {"env", o.env},
                              {"engine", std::string(to_string(o.config.engine))},
                              {"replicas", r.replicas},
                              {"local_replicas", r.local_replicas},
                              {"processes", r.processes},
                              {"batch", o.batch},
                              {"env_steps_per_update", o.env_steps_per_update},
                              {"steps", r.steps},
                              {"frames", r.env_steps},
                              {"episodes", r.episodes},
                              {"seconds", r.seconds},
                              {"updates_per_s", r.updates_per_s},
                              {"samples_per_s", r.samples_per_s},
                              {"mean_return", number(r.eval_return)},
                              {"actor_return", number(r.actor_return)},
                              {"random_return", number(r.random_return)},
                              {"critic_loss", r.critic_loss},
                              {"policy_loss", r.policy_loss},
                              {"digest", r.digest}});
  }
  return 0;
}

}  // namespace

Command add_train_d4pg(CLI::App& train, char** argv) {
  auto flags = std::make_shared<D4pgFlags>();
  flags->argv = argv;
  D4pgJobOptions& o = flags->options;
  CLI::App* app = train.add_subcommand(
      "d4pg",
      "Distributional deterministic policy gradients (D4PG) on continuous control: HalfCheetah "
      "(MuJoCo) or the point mass");
  add_job_flags(app, flags->job, o,
                {.out = "metrics.jsonl, checkpoint-<step>.pt and learning_curve.png",
                 .checkpoint_every = "Updates between checkpoints (one is always written at the "
                                     "end)",
                 .memory = true});
  app->add_option("--env", o.env, "half_cheetah or point_mass")->capture_default_str();
  app->add_option("--steps", o.steps, "Learner updates")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 50));
  app->add_option("--batch", o.batch, "Transitions per update, over all replicas")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--env-steps-per-update", o.env_steps_per_update,
                  "Environment steps the actors play per update, over all replicas (samples per "
                  "insert: batch / this)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--n-step", o.n_step, "Steps of the n-step return")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app->add_option("--discount", o.discount, "Discount factor")->capture_default_str();
  app->add_option("--noise-std", o.noise_std,
                  "Exploration noise, a fraction of each action's half-range")
      ->capture_default_str();
  app->add_option("--policy-hidden", o.policy_hidden, "Widths of the policy's hidden layers")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--critic-hidden", o.critic_hidden, "Widths of the critic's hidden layers")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--atoms", o.atoms, "Atoms of the critic's categorical support")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 16));
  app->add_option("--v-min", o.v_min,
                  "Lowest value of the support (default: -250 on half_cheetah, -100 on "
                  "point_mass)");
  app->add_option("--v-max", o.v_max,
                  "Highest value of the support (default: 1250 on half_cheetah, 10 on "
                  "point_mass)");
  app->add_option("--policy-lr", o.policy_learning_rate, "The policy's Adam learning rate")
      ->capture_default_str();
  app->add_option("--critic-lr", o.critic_learning_rate, "The critic's Adam learning rate")
      ->capture_default_str();
  app->add_option("--target-update-period", o.target_update_period,
                  "Updates between copies into the target networks")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app->add_option("--replay-size", o.replay_size, "Transitions each replica's replay keeps")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app->add_option("--min-replay", o.min_replay,
                  "Transitions each replica's replay holds before the first update")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app->add_option("--eval-every", o.eval_every,
                  "Updates between evaluations of the noiseless policy (0: at the end only)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--eval-episodes", o.eval_episodes, "Episodes of each evaluation")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--random-episodes", o.random_episodes,
                  "Episodes of a uniform random policy at the start, for the curve (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  app->add_option("--report-every", o.report_every,
                  "Updates between progress lines and metrics.jsonl records")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  return {app, [flags] { return run_d4pg(*flags); }};
}

}  // namespace replicator::apps
