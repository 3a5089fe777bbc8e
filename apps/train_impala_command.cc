// `replicator train impala`: the IMPALA job (replicator/train/impala.h) from the command line.
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
#include "replicator/train/impala.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

using train::ImpalaOptions;
using train::ImpalaResult;
using train::train_impala;

struct ImpalaFlags {
  ImpalaOptions options;
  JobFlags job;
  char** argv = nullptr;  // main's, for the memory setting's re-execution
};

int run_impala(const ImpalaFlags& f) {
  launch::apply_memory_mode(launch::parse_memory_mode(f.job.memory), f.argv);
  ImpalaOptions o = f.options;
  f.job.apply("train impala", o);

  const ImpalaResult r = train_impala(o);
  if (!r.reporter) return 0;
  std::fprintf(stderr,
               "learned from %lld frames in %lld steps on %d replicas (%d processes x %d), %d "
               "actors, in %.1f s: %.0f frames/s, %.2f steps/s; mean return %.1f",
               static_cast<long long>(r.frames), static_cast<long long>(r.steps), r.replicas,
               r.processes, r.local_replicas, r.actors, r.seconds, r.frames_per_s, r.steps_per_s,
               r.mean_return);
  if (!std::isnan(r.random_return)) std::fprintf(stderr, " (random policy %.1f)", r.random_return);
  if (r.solved_frames >= 0) {
    std::fprintf(stderr, "; reached %.0f after %lld frames, %.1f s", r.target_return,
                 static_cast<long long>(r.solved_frames), r.solved_seconds);
  }
  std::fprintf(stderr, "; parameters digest %s\n", r.digest.c_str());
  if (f.job.json) {
    const auto number = [](double v) {
      return std::isnan(v) ? nlohmann::ordered_json() : nlohmann::ordered_json(v);
    };
    train::print_json_result({{"type", "impala"},
                              {"env", o.env},
                              {"engine", std::string(to_string(o.config.engine))},
                              {"replicas", r.replicas},
                              {"local_replicas", r.local_replicas},
                              {"processes", r.processes},
                              {"actors", r.actors},
                              {"envs_per_actor", o.envs_per_actor},
                              {"unroll", o.unroll},
                              {"batch", o.batch},
                              {"shards", o.shards},
                              {"steps", r.steps},
                              {"frames", r.frames},
                              {"frames_played", r.played},
                              {"episodes", r.episodes},
                              {"seconds", r.seconds},
                              {"frames_per_s", r.frames_per_s},
                              {"steps_per_s", r.steps_per_s},
                              {"mean_return", number(r.mean_return)},
                              {"random_return", number(r.random_return)},
                              {"target_return", number(r.target_return)},
                              {"solved_frames", r.solved_frames},
                              {"solved_seconds", r.solved_seconds},
                              {"remote_actors", o.remote_actors},
                              {"remote_unrolls", r.remote_unrolls},
                              {"remote_after_finish", r.remote_after_finish},
                              {"digest", r.digest}});
  }
  return 0;
}

}  // namespace

Command add_train_impala(CLI::App& train, char** argv) {
  auto flags = std::make_shared<ImpalaFlags>();
  flags->argv = argv;
  ImpalaOptions& o = flags->options;
  CLI::App* app = train.add_subcommand(
      "impala",
      "Actor-learner reinforcement learning (IMPALA, V-trace) on CartPole or a MinAtar game");
  add_job_flags(
      app, flags->job, o,
      {.out = "metrics.jsonl, checkpoint-<step>.pt and learning_curve.png",
       .checkpoint_every = "Learner steps between checkpoints (one is always written at the end)",
       .memory = true});
  app->add_option("--env", o.env,
                  "cartpole, breakout, space_invaders, freeway, asterix, seaquest, or "
                  "gym:<gymnasium id> (e.g. gym:ALE/Pong-v5) stepped in --env-servers")
      ->capture_default_str();
  app->add_option("--env-servers", o.env_servers,
                  "host:port of the env servers (python/env_server.py) for a gym: environment; "
                  "actor a uses the (a mod n)-th")
      ->delimiter(',');
  app->add_option("--actors", o.actors,
                  "Actor threads per process (default: one per core the process's learner "
                  "replicas leave, at least 1; with several processes on a host, give it); 0: "
                  "the learner's thread plays until a batch is there, then learns (a "
                  "synchronous loop, one learner replica per process)")
      ->check(CLI::Range(0, 4096));
  app->add_option("--envs-per-actor", o.envs_per_actor, "Environments each actor steps together")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app->add_option("--frames", o.frames,
                  "Frames to learn from (learner steps x batch x unroll), over all processes")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 50));
  app->add_option("--unroll", o.unroll, "Steps per unroll")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app->add_option("--batch", o.batch, "Unrolls per learner step, over all replicas")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--shards", o.shards,
                  "Logical shards of each batch (0: none): an update from the same unrolls has "
                  "the same bits for every learner replica count up to the shards "
                  "(docs/shards.md)")
      ->check(CLI::Range(0, 1 << 16));
  app->add_option("--hidden", o.hidden, "Width of the policy network")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--lr", o.learning_rate,
                  "RMSProp learning rate at the start (default: 0.004 on the MinAtar games, "
                  "else 0.002)");
  app->add_flag(
      "--no-anneal", [&o](std::int64_t) { o.anneal = false; },
      "Keep the learning rate constant (default: it falls linearly to 0 over --frames)");
  app->add_option("--entropy-cost", o.entropy_cost,
                  "Weight of the entropy bonus (default: 0.05 on the MinAtar games, else 0.01)");
  app->add_option("--baseline-cost", o.baseline_cost, "Weight of the value loss")
      ->capture_default_str();
  app->add_option("--discount", o.discount, "Discount factor")->capture_default_str();
  app->add_option("--max-grad-norm", o.max_grad_norm, "Global gradient-norm clip (0: none)")
      ->capture_default_str();
  app->add_option("--reward-clip", o.reward_clip, "Clip rewards to [-c, c] (0: none)")
      ->capture_default_str();
  app->add_option("--target-return", o.target_return,
                  "The mean return (newest 100 episodes) that counts as solved (default: "
                  "475 on cartpole)");
  app->add_flag("--stop-at-target", o.stop_at_target, "Stop once the target return is reached");
  app->add_option("--random-episodes", o.random_episodes,
                  "Episodes of a uniform random policy played at the start, for the return the "
                  "curve is drawn beside (default: 100, or 16 in env servers; 0: none)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option(
         "--queue-size", o.queue_size,
         "Unrolls each process's queue holds (default: one batch; more lets the actors run "
         "further ahead of the learner, with staler unrolls)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--remote-actors", o.remote_actors,
                  "Actor processes (`replicator rl actor --learner HOST:PORT`) each learner "
                  "process waits for before it learns; with them, --actors defaults to 0")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--listen", o.listen,
                  "host:port where each learner process serves remote actors (process r: "
                  "port + r; port 0: any free one, printed)")
      ->capture_default_str();
  app->add_option("--report-every", o.report_every,
                  "Learner steps between progress lines and metrics.jsonl records")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  return {app, [flags] { return run_impala(*flags); }};
}

}  // namespace replicator::apps
