// `replicator bench rl`: the actor-learner's speed, piece by piece and end to end, in one
// run (medians of --repeats, interleaved):
//   env      batched CartPole alone (64 environments, one thread; EnvPool beside it: `bench
//            rl-envs`);
//   learner  learner updates per second on batches of 32 synthetic unrolls of 20 steps that
//            a producer thread keeps in a trajectory queue, R = 1 and 2 local replicas each
//            sampling its share: frames learned per second, for the job's CartPole network
//            (an MLP) and its MinAtar network (a convolution, then fully connected layers);
//   job      `replicator train impala` on CartPole as its own process, 16 environments per
//            actor: the synchronous loop (--actors 0: one thread plays until a batch is
//            there, then learns), the job's default layout (an actor thread per core the
//            learner replicas leave) with R = 1 and with R = 2, and 2 actor threads with
//            R = 1 (on 2 cores, actors and learner then take turns);
//   peer     bench/impala_peer.py: IMPALA in PyTorch with 2 actor processes (TorchBeast's
//            MonoBeast style), the same network, unroll, batch and hyperparameters.
// Frames per second are frames learned from (learner steps x batch x unroll), except for env.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "apps/command.h"
#include "bench/bench_rows.h"
#include "bench/env_speed.h"
#include "replicator/errors.h"
#include "replicator/launch/blas_kernels.h"
#include "replicator/launch/memory_mode.h"
#include "replicator/launch/subprocess.h"
#include "replicator/replicator.h"
#include "replicator/rl/learner.h"
#include "replicator/rl/policy.h"
#include "replicator/rl/trajectory_queue.h"

namespace replicator::apps {
namespace {

using bench::result_with;
using launch::quote;
using launch::run_capture;
using launch::self_path;

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchRlFlags {
  int repeats = 3;
  std::int64_t frames = 2'000'000;  // per job and peer run (400,000 took 2 s: too noisy)
  int updates = 60;                 // timed learner updates per measurement
  std::string python;
  std::string peer_script;
  std::vector<std::string> parts = {"env", "learner", "jobs"};  // which rows to measure
  std::string memory = "keep";  // this process's learner rows, the jobs and the peer
  bool json = false;
  char** argv = nullptr;  // main's, for the memory setting's re-execution
};

constexpr int kBatch = 32;
constexpr int kUnroll = 20;
constexpr int kWarmUpUpdates = 5;  // per learner measurement, before the clock starts

// A learner row: the job's network for one kind of observation.
struct LearnerCase {
  std::string name;                    // the row's label
  std::vector<int> observation_shape;  // {4}: CartPole's MLP; {10, 10, 4}: MinAtar's conv net
  int num_actions;
};

const std::vector<LearnerCase>& learner_cases() {
  static const std::vector<LearnerCase> kCases = {{"cartpole mlp", {4}, 2},
                                                  {"minatar conv", {10, 10, 4}, 6}};
  return kCases;
}

// Frames learned per second by R local learner replicas of the job's network (--hidden 64)
// fed, as in the job, from a trajectory queue: a producer thread keeps it full with copies
// of kBatch synthetic unrolls of kUnroll steps, and each replica samples its share of every
// batch from it.
double learner_frames_per_s(const LearnerCase& c, int R, int updates) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  int size = 1;
  for (const int d : c.observation_shape) size *= d;
  std::vector<rl::Unroll> unrolls(kBatch);
  for (rl::Unroll& u : unrolls) {
    u.length = kUnroll;
    u.observation_size = size;
    u.num_actions = c.num_actions;
    for (int i = 0; i < (kUnroll + 1) * size; ++i) u.observations.push_back(normal(rng));
    for (int t = 0; t < kUnroll; ++t) {
      u.actions.push_back(static_cast<std::int32_t>(rng() % c.num_actions));
      u.rewards.push_back(1.f);
      u.done.push_back(rng() % 20 == 0 ? 1 : 0);
      for (int a = 0; a < c.num_actions; ++a) u.behaviour_logits.push_back(normal(rng));
    }
  }
  Config config;
  config.local_replicas = R;
  Replicator repl(config);
  rl::TrajectoryQueue<rl::Unroll> queue({.max_size = 2 * kBatch});
  // What ended the producer other than the close below, rethrown after the join.
  std::exception_ptr producer_error;
  std::thread producer([&] {
    try {
      for (std::size_t i = 0;; ++i) {
        rl::Unroll copy = unrolls[i % unrolls.size()];
        queue.insert(std::move(copy));
      }
    } catch (const Aborted&) {  // closed: the measurement is over
    } catch (...) {
      producer_error = std::current_exception();
      queue.close();  // the replicas waiting for items fail with Aborted
    }
  });
  std::mutex init;
  const std::int64_t share = kBatch / R;
  double seconds = 0;
  std::exception_ptr run_error;
  try {
    seconds = repl.run([&](ReplicaContext& ctx) {
      rl::PolicyNet model{nullptr};
      {
        std::lock_guard lock(init);
        ::torch::manual_seed(1);
        model = rl::PolicyNet(c.observation_shape, c.num_actions, 64);
      }
      rl::Learner learner(ctx, model, {.learning_rate = 1e-4});
      for (int i = 0; i < kWarmUpUpdates; ++i) learner.update(queue.sample_batch(share));
      ctx.barrier();
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < updates; ++i) learner.update(queue.sample_batch(share));
      ctx.barrier();
      return std::chrono::duration<double>(Clock::now() - start).count();
    })[0];
  } catch (...) {
    run_error = std::current_exception();
  }
  queue.close();
  producer.join();
  if (producer_error) std::rethrow_exception(producer_error);
  if (run_error) std::rethrow_exception(run_error);
  return static_cast<double>(updates) * static_cast<double>(share * R) * kUnroll / seconds;
}

// The peer script next to the build (<root>/build/replicator → <root>/bench) or where
// `cmake --install` puts it (share/replicator); empty if neither.
std::string find_peer_script() {
  const std::filesystem::path exe = self_path();
  for (std::filesystem::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
       dir = dir.parent_path()) {
    for (const auto* folder : {"bench", "share/replicator"}) {
      if (std::filesystem::exists(dir / folder / "impala_peer.py")) {
        return (dir / folder / "impala_peer.py").string();
      }
    }
  }
  return {};
}

int run_bench_rl(const BenchRlFlags& f) {
  const launch::MemoryMode memory = launch::parse_memory_mode(f.memory);
  launch::apply_memory_mode(memory, f.argv);
  BenchRlFlags flags = f;
  if (flags.peer_script.empty()) flags.peer_script = find_peer_script();
  if (flags.python.empty()) flags.python = REPLICATOR_VENV_PYTHON;
  const auto wants = [&](const char* part) {
    return std::find(flags.parts.begin(), flags.parts.end(), part) != flags.parts.end();
  };
  // Checked before anything is measured.
  if (wants("jobs") && (flags.peer_script.empty() || !std::filesystem::exists(flags.peer_script))) {
    throw ConfigError(
        "bench/impala_peer.py not found next to the build nor in share/replicator of the "
        "installation; pass --peer-script");
  }
  at::set_num_threads(1);
  const std::string self = quote(self_path());
  const std::string job = self + " train impala --env cartpole --no-progress --json --frames " +
                          std::to_string(flags.frames) + " --report-every 100 --memory " + f.memory;
  std::vector<std::pair<std::string, std::string>> jobs;
  if (wants("jobs")) {
    jobs = {{"job sync (actors 0, R=1)", job + " --actors 0"},
            {"job R=1, actor per free core", job},
            {"job R=1, 2 actors", job + " --actors 2"},
            {"job R=2, actor per free core", job + " --replicas 2"},
            {"peer pytorch, 2 actor procs",
             launch::memory_mode_environment(memory) + " " + quote(flags.python) + " " +
                 quote(flags.peer_script) + " --actors 2 --json --frames " +
                 std::to_string(flags.frames)}};
  }

  std::vector<bench::BenchRow> rows;
  if (wants("env")) rows.push_back({"env cartpole M=64", "frames/s"});
  const auto learner_row = [](const LearnerCase& c, int R) {
    return "learner " + c.name + " R=" + std::to_string(R);
  };
  if (wants("learner")) {
    for (const LearnerCase& c : learner_cases()) {
      for (const int R : {1, 2}) rows.push_back({learner_row(c, R), "frames/s"});
    }
  }
  const std::size_t first_job = rows.size();
  for (const auto& j : jobs) rows.push_back({j.first, "frames/s"});
  for (int r = 0; r < flags.repeats; ++r) {
    std::size_t row = 0;
    if (wants("env")) {
      rows[row++].values.push_back(bench::env_speed("cartpole", 64, 20000).frames_per_s);
    }
    if (wants("learner")) {
      for (const LearnerCase& c : learner_cases()) {
        for (const int R : {1, 2})
          rows[row++].values.push_back(learner_frames_per_s(c, R, flags.updates));
      }
    }
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      const std::string& command = jobs[k].second;
      const Json result = result_with(run_capture(command), "frames_per_s", command);
      rows[first_job + k].values.push_back(result["frames_per_s"].get<double>());
    }
    if (!flags.json) std::fprintf(stderr, "  repeat %d/%d done\n", r + 1, flags.repeats);
  }
  if (!flags.json) {
    std::printf("# %s; memory %s (%s)\n", launch::blas_description().c_str(), f.memory.c_str(),
                launch::active_allocator().c_str());
  }
  const bench::BenchPrint how{.type = "rl",
                              .value_key = "frames_per_s",
                              .json = flags.json,
                              .extra = {{"blas", launch::blas_description()},
                                        {"memory", f.memory},
                                        {"allocator", launch::active_allocator()}}};
  std::map<std::string, double> med = bench::print_bench_rows(rows, how);
  std::vector<std::pair<std::string, double>> ratios;
  if (wants("learner")) {
    for (const LearnerCase& c : learner_cases()) {
      ratios.emplace_back("learner " + c.name + " R=2 / R=1",
                          med[learner_row(c, 2)] / med[learner_row(c, 1)]);
    }
  }
  if (wants("jobs")) {
    const double r1 = med["job R=1, actor per free core"];
    ratios.insert(ratios.end(),
                  {{"job R=1 / sync loop", r1 / med["job sync (actors 0, R=1)"]},
                   {"job R=1 / pytorch peer", r1 / med["peer pytorch, 2 actor procs"]},
                   {"job R=1, 2 actors / sync loop",
                    med["job R=1, 2 actors"] / med["job sync (actors 0, R=1)"]},
                   {"job R=2 / R=1", med["job R=2, actor per free core"] / r1}});
  }
  bench::print_bench_ratios(ratios, how);
  return 0;
}

}  // namespace

Command add_bench_rl(CLI::App& bench, char** argv) {
  auto flags = std::make_shared<BenchRlFlags>();
  flags->argv = argv;
  CLI::App* app = bench.add_subcommand(
      "rl",
      "Actor-learner speed: environments, learner (R = 1, 2), the job's layouts beside a "
      "synchronous loop and a PyTorch IMPALA");
  app->add_option("--repeats", flags->repeats, "Measurements per row; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app->add_option("--frames", flags->frames, "Frames learned per job and peer run")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1000}, std::int64_t{1} << 40));
  app->add_option("--updates", flags->updates, "Timed learner updates per measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app->add_option("--python", flags->python,
                  "Python with torch and gymnasium for the peer (default: the project's .venv)");
  app->add_option("--peer-script", flags->peer_script, "Path of bench/impala_peer.py");
  app->add_option("--parts", flags->parts,
                  "Rows to measure: env (the batched environments), learner (R = 1, 2), jobs "
                  "(the job's layouts, the synchronous loop and the peer)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"env", "learner", "jobs"}));
  app->add_option("--memory", flags->memory,
                  "keep (default): this process, the jobs and the peer run on jemalloc with "
                  "purging off; system: glibc's defaults")
      ->capture_default_str()
      ->check(CLI::IsMember({"keep", "system"}));
  app->add_flag("--json", flags->json, "One JSON object per row");
  return {app, [flags] { return run_bench_rl(*flags); }};
}

}  // namespace replicator::apps
