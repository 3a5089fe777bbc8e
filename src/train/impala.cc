#include "replicator/train/impala.h"

#include <ATen/Parallel.h>
#include <sched.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/rl/actor.h"
#include "replicator/rl/actor_pool.h"
#include "replicator/rl/learner.h"
#include "replicator/rl/parameter_store.h"
#include "replicator/rl/policy.h"
#include "replicator/torch/cpu_kernels.h"
#include "replicator/train/job.h"
#include "replicator/train/plot.h"
#include "replicator/train/png.h"
#include "replicator/train/reporter.h"
#include "src/train/impala_learner.h"
#ifdef REPLICATOR_HAVE_GRPC
#include "replicator/rl/remote.h"
#endif
#include "replicator/rl/trajectory_queue.h"
#include "replicator/torch/checkpoint.h"
#include "replicator/torch/tensor_collectives.h"

namespace replicator::train {
namespace {

namespace rt = replicator::torch;
using Clock = std::chrono::steady_clock;

// The environment's own "solved" threshold, where it has one.
double default_target(const std::string& env) {
  return env == "cartpole" || env == "gym:CartPole-v1" ? 475.0
                                                       : std::numeric_limits<double>::quiet_NaN();
}

// Where the job's environments come from (rl::env_factory: an env server's for "gym:<id>",
// an empty factory for the C++ games); built without gRPC, "gym:" is a ConfigError.
using EnvSource = rl::EnvFactory;
EnvSource env_source(const std::string& env, const std::vector<std::string>& servers) {
#ifdef REPLICATOR_HAVE_GRPC
  return rl::env_factory(env, servers);
#else
  (void)servers;
  if (env.starts_with("gym:")) {
    throw ConfigError("this replicator was built without gRPC: no env servers");
  }
  return {};
#endif
}

std::unique_ptr<rl::BatchedEnv> make_job_env(const EnvSource& source, const std::string& env,
                                             int actor, int num_envs, std::uint64_t seed) {
  return rl::make_actor_env(source, env, actor, num_envs, seed);
}

using rl::random_policy_return;

// The cores this process may run on: its affinity mask (what nproc counts), else all.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

#ifdef REPLICATOR_HAVE_GRPC
using rl::listen_address;
#endif

// Unrolls per learner update and replica: the batch split over the replicas, or with shards
// the most any replica takes (its shard range's share; the job states the shards as its
// conditions). Throws InvalidArgument where they do not split.
int unrolls_per_replica(Job& job, const ImpalaOptions& o) {
  if (o.shards == 0) return static_cast<int>(job.split_batch(o.batch, "batch of unrolls"));
  const int R = job.num_replicas();
  if (o.shards < R || o.batch % o.shards != 0) {
    throw InvalidArgument("--shards " + std::to_string(o.shards) + " for a batch of " +
                          std::to_string(o.batch) + " unrolls on " + std::to_string(R) +
                          " learner replicas: the batch must be a multiple of the shards, and "
                          "each replica takes at least one shard");
  }
  job.state_shards(o.shards, o.batch, "unrolls");
  return (o.shards + R - 1) / R * (o.batch / o.shards);
}

}  // namespace

ImpalaOptions impala_defaults(const ImpalaOptions& options) {
  ImpalaOptions o = options;
  const bool minatar = rl::minatar_game(o.env);
  if (std::isnan(o.learning_rate)) o.learning_rate = minatar ? 4e-3 : 2e-3;
  if (std::isnan(o.entropy_cost)) o.entropy_cost = minatar ? 0.05 : 0.01;
  return o;
}

ImpalaResult train_impala(const ImpalaOptions& options) {
  const ImpalaOptions o = impala_defaults(options);
  if (o.actors < -1 || o.remote_actors < 0 || o.envs_per_actor < 1 || o.unroll < 1 || o.batch < 1 ||
      o.frames < 1 || o.threads < 1 || o.report_every < 1) {
    throw InvalidArgument(
        "envs-per-actor, unroll, batch, frames, threads and report-every must be at least 1, "
        "actors at least 0 (or -1: one per free core)");
  }
  // Checks the environment's name before anything starts.
  const EnvSource source = env_source(o.env, o.env_servers);
  const std::unique_ptr<rl::BatchedEnv> probe = make_job_env(source, o.env, 0, 1, o.seed);

  Job job(o);
  const int L = job.num_local_replicas();
  const int P = job.num_processes();
  const int per_replica = unrolls_per_replica(job, o);
  const int rank =
      job.replicator().run([](ReplicaContext& ctx) { return ctx.replica_id(); })[0] / L;
  // No actor threads: the learner's own thread plays until a batch is there, then learns
  // (the synchronous loop the actor-learner is measured against).
  const bool remote = o.remote_actors > 0;
  const int actor_threads = o.actors >= 0 ? o.actors : remote ? 0 : std::max(1, usable_cores() - L);
  const bool synchronous = actor_threads == 0 && !remote;
  if (synchronous && L != 1) {
    throw InvalidArgument(
        "--actors 0 (play and learn on one thread) needs 1 learner replica per "
        "process, got " +
        std::to_string(L));
  }
  const std::int64_t frames_per_step = static_cast<std::int64_t>(o.batch) * o.unroll;
  const double target = std::isnan(o.target_return) ? default_target(o.env) : o.target_return;
  const int random_episodes = o.random_episodes >= 0 ? o.random_episodes : (source ? 16 : 100);
  const double random_return = random_episodes > 0
                                   ? random_policy_return(source, o.env, random_episodes, o.seed)
                                   : std::numeric_limits<double>::quiet_NaN();

  // This process's actors and queue.
  rl::ParameterStore store;
  rl::TrajectoryQueue<rl::Unroll> queue(
      {.max_size = synchronous        ? std::int64_t{per_replica} + o.envs_per_actor
                   : o.queue_size > 0 ? o.queue_size
                                      : std::int64_t{per_replica} * L,
       .timeout = o.config.timeout});
  rl::EpisodeLog log;
  rl::ActorCounters counters;
  const rl::ActorOptions actor_options{.env = o.env,
                                       .envs = o.envs_per_actor,
                                       .unroll = o.unroll,
                                       .hidden = o.hidden,
                                       .seed = o.seed,
                                       .insert_timeout = std::nullopt,
                                       .make_env = source};
#ifdef REPLICATOR_HAVE_GRPC
  // Remote actors: this process's server feeds the same queue, log and counters.
  std::unique_ptr<rl::LearnerServer> server;
  if (remote) {
    server = serve_remote_actors(o, rank, probe->observation_size(), probe->num_actions(), store,
                                 queue, log, counters);
  }
#else
  if (remote) throw ConfigError("this replicator was built without gRPC: no remote actors");
#endif
  rl::ActorPool actors(rank * actor_threads, actor_threads, actor_options, store, queue, log,
                       counters);
  std::optional<rl::Actor> inline_actor;
  if (synchronous) inline_actor.emplace(rank, actor_options, store, queue, log, counters);
  const LearnerShared shared{
      .options = o,
      .observation_shape = probe->observation_shape(),
      .num_actions = probe->num_actions(),
      .per_replica = per_replica,
      .total_steps = (o.frames + frames_per_step - 1) / frames_per_step,
      .frames_per_step = frames_per_step,
      .actors = (synchronous ? 1 : actor_threads) * P + o.remote_actors * P,
      .target = target,
      .random_return = random_return,
      .learner = {.learning_rate = o.learning_rate,
                  .max_grad_norm = o.max_grad_norm,
                  .discount = o.discount,
                  .reward_clip = o.reward_clip,
                  .loss = {.baseline_cost = o.baseline_cost, .entropy_cost = o.entropy_cost},
                  .shards = o.shards},
      .store = store,
      .queue = queue,
      .log = log,
      .counters = counters,
      .inline_actor = inline_actor ? &*inline_actor : nullptr,
#ifdef REPLICATOR_HAVE_GRPC
      .server = server.get(),
#endif
  };
  ImpalaResult result;
  try {
    result = job.run([&](ReplicaContext& ctx) { return learn(job, ctx, shared); });
  } catch (...) {
    actors.stop();
    if (std::exception_ptr error = actors.error()) std::rethrow_exception(error);
    throw;
  }
#ifdef REPLICATOR_HAVE_GRPC
  if (server) finish_remote_actors(*server, rank, result);
#endif
  actors.stop();
  if (std::exception_ptr error = actors.error()) std::rethrow_exception(error);
  return result;
}

namespace {

// Sums over the learner steps since the last report: loss, policy lag, unrolls learned.
enum Window { kLoss, kLag, kUnrolls, kWindow };

// A report window's figures over all processes, the same on every replica.
struct WindowTotals {
  double loss = 0;         // mean over the unrolls
  double lag = 0;          // mean policy lag
  double mean_return = 0;  // of the newest 100 episodes (mean over processes; NaN: none)
  std::int64_t played = 0;
  std::int64_t episodes = 0;
};

// Every replica takes part, so that the decisions after it are the same everywhere; a
// process's actors are counted once, by its local replica 0 (`publisher`).
WindowTotals sum_window(ReplicaContext& ctx, const LearnerShared& s, bool publisher,
                        double* window) {
  std::size_t recent = 0;
  const double mean = publisher ? s.log.mean_return(100, &recent) : 0;
  double totals[7] = {window[kLoss],
                      window[kLag],
                      window[kUnrolls],
                      publisher ? static_cast<double>(s.counters.frames.load()) : 0,
                      publisher ? static_cast<double>(s.log.size()) : 0,
                      recent > 0 ? mean : 0,
                      recent > 0 ? 1.0 : 0.0};
  ctx.all_reduce(std::span<double>(totals));
  std::fill(window, window + kWindow, 0.0);
  return {.loss = totals[2] > 0 ? totals[0] / totals[2] : 0,
          .lag = totals[2] > 0 ? totals[1] / totals[2] : 0,
          .mean_return =
              totals[6] > 0 ? totals[5] / totals[6] : std::numeric_limits<double>::quiet_NaN(),
          .played = static_cast<std::int64_t>(totals[3]),
          .episodes = static_cast<std::int64_t>(totals[4])};
}

// The remote actors' part of a report: " remote k/n" on the line, their fields in the record.
nlohmann::ordered_json remote_report(const LearnerShared& s, char* line, std::size_t size) {
  nlohmann::ordered_json remote_metrics = nlohmann::ordered_json::object();
#ifdef REPLICATOR_HAVE_GRPC
  if (s.server != nullptr) {
    const rl::LearnerServerStats remote_stats = s.server->stats();
    int streaming = 0;
    nlohmann::ordered_json per_actor = nlohmann::ordered_json::array();
    for (const rl::RemoteActorStats& a : remote_stats.actors) {
      streaming += a.open_streams > 0 ? 1 : 0;
      per_actor.push_back(
          {{"actor", a.actor},
           {"frames_per_s", a.seconds > 0 ? static_cast<double>(a.frames) / a.seconds : 0},
           {"unrolls", a.unrolls},
           {"reconnects", std::max(0, a.streams - 1)},
           {"streaming", a.open_streams > 0}});
    }
    remote_metrics = {{"remote_actors", streaming},
                      {"remote_unrolls", remote_stats.unrolls},
                      {"remote", per_actor}};
    const std::size_t used = std::strlen(line);
    std::snprintf(line + used, size - used, "  remote %d/%zu", streaming,
                  remote_stats.actors.size());
  }
#else
  (void)s;
  (void)line;
  (void)size;
#endif
  return remote_metrics;
}

// The progress line and the record of a report window at `step`.
void report_learner(JobReporter& reporter, const LearnerShared& s, std::int64_t step,
                    double steps_per_s, double elapsed, const WindowTotals& t) {
  const rl::QueueStats q = s.queue.stats();
  const std::int64_t frames = step * s.frames_per_step;
  const auto frames_per_step = static_cast<double>(s.frames_per_step);
  char line[320];
  std::snprintf(line, sizeof line,
                "step %lld/%lld  frames %s/%s  %.0f frames/s  %.1f steps/s  return "
                "%.1f  lag %.1f  queue %lld/%lld  ETA %s",
                static_cast<long long>(step), static_cast<long long>(s.total_steps),
                count_text(static_cast<double>(frames)).c_str(),
                count_text(static_cast<double>(s.total_steps * s.frames_per_step)).c_str(),
                steps_per_s * frames_per_step, steps_per_s, t.mean_return, t.lag,
                static_cast<long long>(q.size), static_cast<long long>(q.max_size),
                clock_text(reporter.eta(elapsed)).c_str());
  const nlohmann::ordered_json remote_metrics = remote_report(s, line, sizeof line);
  reporter.progress(line);
  nlohmann::ordered_json m = {
      {"type", "train"},
      {"step", step},
      {"frames", frames},
      {"seconds", elapsed},
      {"frames_played", t.played},
      {"episodes", t.episodes},
      {"frames_per_s", steps_per_s * frames_per_step},
      {"steps_per_s", steps_per_s},
      {"loss", t.loss},
      {"policy_lag", t.lag},
      {"queue_fill", static_cast<double>(q.size) / static_cast<double>(q.max_size)}};
  if (!std::isnan(s.random_return)) m["random_return"] = s.random_return;
  if (!std::isnan(t.mean_return)) m["mean_return"] = t.mean_return;
  if (!std::isnan(s.target)) m["target_return"] = s.target;
  for (const auto& [key, value] : remote_metrics.items()) m[key] = value;
  reporter.metric(m);
}

// The learning curve, against frames and against wall seconds; none without both.
std::vector<Chart> learning_curves(const std::string& env, const std::filesystem::path& metrics) {
  std::vector<Chart> charts =
      charts_from_metrics(metrics, "frames", {{"mean_return", "random_return"}}, "train");
  std::vector<Chart> by_time =
      charts_from_metrics(metrics, "seconds", {{"mean_return", "random_return"}}, "train");
  charts.insert(charts.end(), by_time.begin(), by_time.end());
  if (charts.size() != 2) return {};
  charts[0].title = env + ": mean return of the last 100 episodes";
  charts[0].x_label = "frames";
  charts[1].title = env + ": mean return against wall time";
  charts[1].x_label = "seconds";
  for (Chart& c : charts) c.y_label = "return";
  return charts;
}

// The line the reporter starts with: who plays, who learns, and the random policy's return.
std::string job_note(const LearnerShared& s, const ImpalaResult& r) {
  const ImpalaOptions& o = s.options;
  return "impala on " + o.env + ": " + std::to_string(r.actors) + " actors x " +
         std::to_string(o.envs_per_actor) + " environments, learner " + std::to_string(r.replicas) +
         " replicas (" + std::to_string(r.processes) + " processes x " +
         std::to_string(r.local_replicas) + "), batch " + std::to_string(o.batch) + " x " +
         std::to_string(o.unroll) + " steps" +
         (std::isnan(s.random_return)
              ? std::string()
              : "; a uniform random policy returns " + std::to_string(s.random_return));
}

}  // namespace

ImpalaResult learn(Job& job, ReplicaContext& ctx, const LearnerShared& s) {
  const ImpalaOptions& o = s.options;
  rl::PolicyNet model = job.build_model(
      ctx, [&] { return rl::PolicyNet(s.observation_shape, s.num_actions, o.hidden); });
  rl::Learner learner(ctx, model, s.learner);
  // Unrolls per update: the replica's share, or with shards those of its shard range.
  const int mine =
      o.shards > 0 ? learner.shard_range().size() * (o.batch / o.shards) : s.per_replica;
  JobReplica replica(job, ctx, *model, {&learner.optimizer()});
  ImpalaResult result;
  replica.describe(result);
  result.actors = s.actors;
  result.random_return = s.random_return;
  result.target_return = s.target;
  std::int64_t step = replica.position().step;
  const bool publisher = ctx.local_replica_id() == 0;
  const auto publish = [&] {
    s.store.publish(std::make_shared<rl::PolicySnapshot>(
        rl::PolicySnapshot{.version = step + 1, .parameters = rl::flatten_parameters(*model)}));
  };
  if (publisher) publish();
  JobReporter* reporter = replica.report_until(s.total_steps);
  if (reporter) reporter->note(job_note(s, result));

  const Clock::time_point started = Clock::now();
  const std::int64_t first_step = step;
  double window[kWindow] = {};
  bool stopped = false;
  while (step < s.total_steps && !stopped) {
    while (s.inline_actor && s.queue.stats().size < mine) s.inline_actor->step();
    std::vector<rl::Unroll> share = s.queue.sample_batch(mine, o.config.timeout);
    if (o.anneal) {
      learner.set_learning_rate(o.learning_rate * static_cast<double>(s.total_steps - step) /
                                static_cast<double>(s.total_steps));
    }
    const rl::LearnerStats stats = learner.update(share);
    for (const rl::Unroll& u : share) {
      window[kLag] += static_cast<double>(step + 1 - u.policy_version);
    }
    window[kLoss] += stats.loss;
    window[kUnrolls] += static_cast<double>(share.size());
    ++step;
    if (publisher) publish();
    replica.count_step();
    if (step % o.report_every == 0 || step == s.total_steps) {
      const WindowTotals t = sum_window(ctx, s, publisher, window);
      const double elapsed = seconds_since(started);
      const double steps_per_s = static_cast<double>(step - first_step) / elapsed;
      result.mean_return = t.mean_return;
      result.played = t.played;
      result.episodes = t.episodes;
      const bool reached = !std::isnan(s.target) && t.mean_return >= s.target;
      if (reached && result.solved_frames < 0) {
        result.solved_frames = step * s.frames_per_step;
        result.solved_seconds = elapsed;
      }
      if (reporter) report_learner(*reporter, s, step, steps_per_s, elapsed, t);
      stopped = reached && o.stop_at_target;
    }
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0)
      replica.checkpoint({.step = step});
  }
  replica.checkpoint({.step = step});
  result.steps = step;
  result.frames = step * s.frames_per_step;
  result.seconds = seconds_since(started);
  result.steps_per_s = static_cast<double>(step - first_step) / result.seconds;
  result.frames_per_s = result.steps_per_s * static_cast<double>(s.frames_per_step);
  result.digest = replica.finish(
      step, {.name = "learning_curve", .charts = [&](const std::filesystem::path& metrics) {
               return learning_curves(o.env, metrics);
             }});
  return result;
}

#ifdef REPLICATOR_HAVE_GRPC
std::unique_ptr<rl::LearnerServer> serve_remote_actors(const ImpalaOptions& o, int rank,
                                                       int observation_size, int num_actions,
                                                       rl::ParameterStore& store,
                                                       rl::TrajectoryQueue<rl::Unroll>& queue,
                                                       rl::EpisodeLog& log,
                                                       rl::ActorCounters& counters) {
  // Remote actors' ids start at 10000 x (rank + 1), apart from the actor threads' and from
  // other processes'.
  auto server = std::make_unique<rl::LearnerServer>(
      rl::LearnerServerOptions{
          .address = listen_address(o.listen, rank),
          .play = {.env = o.env,
                   .envs = o.envs_per_actor,
                   .unroll = o.unroll,
                   .hidden = o.hidden,
                   .seed = o.seed,
                   .learner_rank = rank,
                   .observation_size = observation_size,
                   .num_actions = num_actions,
                   .env_servers = o.env_servers},
          .next_actor = 10000 * (rank + 1),
          .on_episode =
              [log = &log, counters = &counters](double episode_return, std::int32_t length) {
                log->add(episode_return, length, counters->frames.load());
              },
          .on_frames = [counters = &counters](std::int64_t frames) { counters->frames += frames; }},
      store, queue);
  std::fprintf(stderr, "learner process %d: serving remote actors on %s; waiting for %d\n", rank,
               server->address().c_str(), o.remote_actors);
  const int joined = server->wait_for_actors(o.remote_actors, o.config.timeout);
  if (joined < o.remote_actors) {
    throw Timeout("learner process " + std::to_string(rank) + ": " + std::to_string(joined) +
                      " of " + std::to_string(o.remote_actors) + " remote actors came to " +
                      server->address() + " within " + std::to_string(o.config.timeout.count()) +
                      " ms; start them with `replicator rl actor --learner " + server->address() +
                      "`, or raise the timeout",
                  "wait_for_actors", 0, o.config.timeout, {});
  }
  return server;
}

void finish_remote_actors(rl::LearnerServer& server, int rank, ImpalaResult& result) {
  // Actors learn that the learner is done from their next poll and close their streams.
  server.finish(std::chrono::seconds(5));
  const rl::LearnerServerStats remote_stats = server.stats();
  result.remote_unrolls = remote_stats.unrolls;
  result.remote_after_finish = remote_stats.after_finish;
  for (const rl::RemoteActorStats& a : remote_stats.actors) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "learner process %d: remote actor %d (%s): %lld unrolls, %lld frames, %lld "
                  "episodes, %d streams (%d broken)",
                  rank, a.actor, a.peer.c_str(), static_cast<long long>(a.unrolls),
                  static_cast<long long>(a.frames), static_cast<long long>(a.episodes), a.streams,
                  a.broken_streams);
    result.remote_actor_lines.push_back(line);
    std::fprintf(stderr, "%s\n", line);
  }
  std::fprintf(stderr,
               "learner process %d: %lld unrolls from remote actors learned or queued, %lld "
               "after the end, %lld malformed\n",
               rank, static_cast<long long>(remote_stats.unrolls),
               static_cast<long long>(remote_stats.after_finish),
               static_cast<long long>(remote_stats.rejected));
}
#endif
}  // namespace replicator::train

namespace replicator::train {

RemoteActorResult run_remote_actor(const RemoteActorOptions& o) {
#ifndef REPLICATOR_HAVE_GRPC
  (void)o;
  throw ConfigError("this replicator was built without gRPC: no remote actors");
#else
  if (o.learners.empty()) throw InvalidArgument("rl actor: give the learner's host:port");
  const auto n = static_cast<int>(o.learners.size());
  const int pick = (o.id >= 0 ? o.id : static_cast<int>(::getpid())) % n;
  rl::RemoteLearner learner(
      {.address = o.learners[static_cast<std::size_t>(pick)], .actor = o.id, .timeout = o.timeout});
  const rl::ActorAssignment& a = learner.assignment();
  RemoteActorResult result;
  result.actor = a.actor;
  result.learner = o.learners[static_cast<std::size_t>(pick)];
  result.env = a.env;
  if (o.progress) {
    std::fprintf(stderr,
                 "actor %d: playing %s (%d environments, unrolls of %d steps) for learner "
                 "process %d at %s\n",
                 a.actor, a.env.c_str(), a.envs, a.unroll, a.learner_rank, result.learner.c_str());
  }
  at::set_num_threads(1);
  rt::prepare_cpu_kernels();  // before the actor's threads
  rl::ParameterStore store;
  // Two unrolls per environment: the actor plays on while the last ones are sent.
  rl::TrajectoryQueue<rl::Unroll> queue({.max_size = 2 * std::int64_t{a.envs}});
  rl::EpisodeLog log;
  rl::ActorCounters counters;
  rl::ActorPool actor(a.actor, 1,
                      {.env = a.env,
                       .envs = a.envs,
                       .unroll = a.unroll,
                       .hidden = a.hidden,
                       .seed = a.seed,
                       .make_env = rl::env_factory(a.env, a.env_servers)},
                      store, queue, log, counters);
  std::size_t reported_episodes = 0;
  std::int64_t reported_frames = 0;
  const auto report = [&] {
    rl::RemoteLearner::Report r;
    for (const rl::EpisodeLog::Episode& e : log.since(reported_episodes, &reported_episodes)) {
      r.episodes.emplace_back(e.episode_return, e.length);
    }
    const std::int64_t frames = counters.frames.load();
    r.frames = frames - reported_frames;
    reported_frames = frames;
    return r;
  };
  const Clock::time_point started = Clock::now();
  const std::atomic<bool> stop{false};
  try {
    learner.pump(store, queue, report, stop);
  } catch (...) {
    // An actor that failed closed the queue, which ended the pump: its error is the cause.
    actor.stop();
    if (std::exception_ptr error = actor.error()) std::rethrow_exception(error);
    throw;
  }
  actor.stop();
  if (std::exception_ptr error = actor.error()) std::rethrow_exception(error);
  const rl::RemoteActorCounts c = learner.counts();
  result.frames = counters.frames.load();
  result.episodes = static_cast<std::int64_t>(log.size());
  std::size_t recent = 0;
  result.mean_return = log.mean_return(100, &recent);
  result.seconds = seconds_since(started);
  result.sent = c.sent;
  result.acknowledged = c.acknowledged;
  result.lost = c.lost;
  result.reconnects = c.reconnects;
  result.versions = c.versions;
  return result;
#endif
}

}  // namespace replicator::train
