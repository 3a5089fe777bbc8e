// `replicator bench rl-remote`: the remote actors' path (include/replicator/rl/remote.h)
// beside the in-process one, in one run (medians of --repeats, interleaved):
//   transport  unrolls/s and MB/s of synthetic CartPole and Breakout unrolls going from a
//              producer thread to a consumer that samples batches of 32: through a
//              TrajectoryQueue in this process, and through the learner's gRPC service on
//              loopback (the producer fills each RemoteLearner's local queue, the server
//              inserts into its own), with 1 and 2 streams;
//   job        `replicator train impala` on CartPole with 1 learner replica: 2 actor threads,
//              and 2 actor processes (`replicator rl actor`) on loopback: frames learned per
//              second.
// MB/s counts the unroll's arrays (observations, actions, rewards, done, logits).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "apps/command.h"
#include "bench/bench_rows.h"
#include "replicator/errors.h"
#include "replicator/launch/subprocess.h"
#include "replicator/rl/env.h"
#include "replicator/rl/trajectory_queue.h"
#include "replicator/rl/unroll.h"
#ifdef REPLICATOR_HAVE_GRPC
#include "replicator/rl/remote.h"
#endif

namespace replicator::apps {
namespace {

using bench::result_with;
using launch::BackgroundChild;
using launch::free_loopback_ports;
using launch::quote;
using launch::run_capture;
using launch::self_path;

using Clock = std::chrono::steady_clock;

struct Flags {
  int repeats = 3;
  std::int64_t frames = 2'000'000;  // per job run
  double seconds = 1.0;             // per transport measurement, about
  bool json = false;
};

constexpr int kUnroll = 20;
constexpr int kBatch = 32;

rl::Unroll synthetic(const std::string& env) {
  const std::unique_ptr<rl::BatchedEnv> e = rl::make_env(env, 1, 0);
  rl::Unroll u;
  u.length = kUnroll;
  u.observation_size = e->observation_size();
  u.num_actions = e->num_actions();
  u.observations.assign(static_cast<std::size_t>((kUnroll + 1) * u.observation_size), 0.25f);
  u.actions.assign(kUnroll, 1);
  u.rewards.assign(kUnroll, 1.0f);
  u.done.assign(kUnroll, 0);
  u.behaviour_logits.assign(static_cast<std::size_t>(kUnroll * u.num_actions), 0.5f);
  return u;
}

double bytes_of(const rl::Unroll& u) {
  return static_cast<double>(u.observations.size() * 4 + u.actions.size() * 4 +
                             u.rewards.size() * 4 + u.done.size() + u.behaviour_logits.size() * 4);
}

// Unrolls per second from `produce` (which inserts n copies of `u`, spread as it likes) to a
// consumer sampling batches of kBatch from `learner_queue`.
template <typename Produce>
double rate(rl::TrajectoryQueue<rl::Unroll>& learner_queue, std::int64_t n, Produce&& produce) {
  const Clock::time_point start = Clock::now();
  std::thread producer([&] { produce(n); });
  for (std::int64_t taken = 0; taken < n; taken += kBatch) {
    learner_queue.sample_batch(std::min<std::int64_t>(kBatch, n - taken));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  producer.join();
  return static_cast<double>(n) / seconds;
}

double in_process(const rl::Unroll& u, std::int64_t n) {
  rl::TrajectoryQueue<rl::Unroll> queue({.max_size = 2 * kBatch});
  return rate(queue, n, [&](std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) queue.insert(rl::Unroll(u));
  });
}

#ifdef REPLICATOR_HAVE_GRPC
double over_grpc(const rl::Unroll& u, std::int64_t n, int streams) {
  rl::ParameterStore store;
  store.publish(std::make_shared<rl::PolicySnapshot>(rl::PolicySnapshot{.version = 1}));
  rl::TrajectoryQueue<rl::Unroll> queue({.max_size = 2 * kBatch});
  rl::LearnerServer server({.address = "127.0.0.1:0",
                            .play = {.env = "bench",
                                     .envs = 16,
                                     .unroll = kUnroll,
                                     .hidden = 1,
                                     .observation_size = u.observation_size,
                                     .num_actions = u.num_actions}},
                           store, queue);
  struct Stream {
    std::unique_ptr<rl::RemoteLearner> learner;
    std::unique_ptr<rl::TrajectoryQueue<rl::Unroll>> local;
    rl::ParameterStore local_store;
    std::thread pump;
  };
  std::vector<std::unique_ptr<Stream>> s;
  std::atomic<bool> stop{false};
  for (int k = 0; k < streams; ++k) {
    auto one = std::make_unique<Stream>();
    one->learner = std::make_unique<rl::RemoteLearner>(
        rl::RemoteLearnerOptions{.address = server.address(), .actor = k});
    one->local =
        std::make_unique<rl::TrajectoryQueue<rl::Unroll>>(rl::QueueOptions{.max_size = 2 * kBatch});
    Stream* raw = one.get();
    one->pump = std::thread([raw, &stop] {
      raw->learner->pump(
          raw->local_store, *raw->local,
          [] { return rl::RemoteLearner::Report{.frames = kUnroll}; }, stop);
    });
    s.push_back(std::move(one));
  }
  const double r = rate(queue, n, [&](std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) {
      s[static_cast<std::size_t>(i % streams)]->local->insert(rl::Unroll(u));
    }
  });
  stop = true;
  for (auto& one : s) one->pump.join();
  server.finish(std::chrono::milliseconds(1000));
  return r;
}

#endif

// `measure(n)` (unrolls/s over n unrolls) with n chosen from a short probe so that it takes
// about `seconds`.
template <typename Measure>
double sized(double seconds, Measure&& measure) {
  const double probe = measure(500);
  return measure(std::max<std::int64_t>(500, static_cast<std::int64_t>(probe * seconds)));
}

int run(const Flags& f) {
#ifndef REPLICATOR_HAVE_GRPC
  (void)f;
  throw ConfigError("this replicator was built without gRPC: no remote actors to measure");
#else
  const std::string exe = self_path();
  const std::string job = quote(exe) +
                          " train impala --env cartpole --no-progress --json --frames " +
                          std::to_string(f.frames) + " --report-every 100";
  std::vector<bench::BenchRow> rows;
  const std::vector<std::string> envs = {"cartpole", "breakout"};
  std::map<std::string, rl::Unroll> unrolls;
  for (const std::string& env : envs) {
    unrolls[env] = synthetic(env);
    const double bytes = bytes_of(unrolls[env]);
    rows.push_back({"queue in-process, " + env, "unrolls/s", bytes});
    rows.push_back({"gRPC loopback 1 stream, " + env, "unrolls/s", bytes});
    rows.push_back({"gRPC loopback 2 streams, " + env, "unrolls/s", bytes});
  }
  rows.push_back({"job R=1, 2 actor threads", "frames/s"});
  rows.push_back({"job R=1, 2 actor processes", "frames/s"});
  for (int r = 0; r < f.repeats; ++r) {
    std::size_t row = 0;
    for (const std::string& env : envs) {
      const rl::Unroll& u = unrolls[env];
      rows[row++].values.push_back(
          sized(f.seconds, [&](std::int64_t n) { return in_process(u, n); }));
      for (const int streams : {1, 2}) {
        rows[row++].values.push_back(
            sized(f.seconds, [&](std::int64_t n) { return over_grpc(u, n, streams); }));
      }
    }
    const std::string threads = job + " --actors 2";
    rows[row++].values.push_back(
        result_with(run_capture(threads), "frames_per_s", threads)["frames_per_s"].get<double>());
    const std::string address = "127.0.0.1:" + std::to_string(free_loopback_ports());
    {
      // The actors retry until the learner listens, and exit when it has finished.
      const std::vector<std::string> actor = {exe,         "rl",   "actor", "--no-progress",
                                              "--learner", address};
      const BackgroundChild first(actor, std::chrono::seconds(10));
      const BackgroundChild second(actor, std::chrono::seconds(10));
      const std::string processes = job + " --remote-actors 2 --listen " + address;
      rows[row++].values.push_back(
          result_with(run_capture(processes), "frames_per_s", processes)["frames_per_s"]
              .get<double>());
    }
    if (!f.json) std::fprintf(stderr, "  repeat %d/%d done\n", r + 1, f.repeats);
  }
  const bench::BenchPrint how{.type = "rl_remote", .json = f.json};
  std::map<std::string, double> med = bench::print_bench_rows(rows, how);
  // What the learner of the threads' job took per second, in unrolls: the service's
  // capacity over it says whether the service can be the bottleneck.
  const double needed = med["job R=1, 2 actor threads"] / kUnroll;
  const std::vector<std::pair<std::string, double>> ratios = {
      {"gRPC 1 stream / in-process, cartpole",
       med["gRPC loopback 1 stream, cartpole"] / med["queue in-process, cartpole"]},
      {"gRPC 1 stream / in-process, breakout",
       med["gRPC loopback 1 stream, breakout"] / med["queue in-process, breakout"]},
      {"gRPC 2 streams / what the job learns, cartpole",
       med["gRPC loopback 2 streams, cartpole"] / needed},
      {"job: actor processes / actor threads",
       med["job R=1, 2 actor processes"] / med["job R=1, 2 actor threads"]}};
  bench::print_bench_ratios(ratios, how);
  return 0;
#endif
}

}  // namespace

Command add_bench_rl_remote(CLI::App& bench) {
  auto flags = std::make_shared<Flags>();
  CLI::App* app = bench.add_subcommand(
      "rl-remote",
      "Remote actors' speed: unrolls/s and MB/s through the gRPC service beside the "
      "in-process queue, and the IMPALA job with actor processes beside actor threads");
  app->add_option("--repeats", flags->repeats, "Measurements per row; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app->add_option("--frames", flags->frames, "Frames learned per job run")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1000}, std::int64_t{1} << 40));
  app->add_option("--seconds", flags->seconds, "About how long each transport measurement takes")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 600.0));
  app->add_flag("--json", flags->json, "One JSON object per row");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace replicator::apps
