// `replicator bench rl`: the actor-learner's speed, piece by piece and end to end, in one
// run (medians of --repeats, interleaved):
//   env      batched CartPole alone (64 environments, one thread; EnvPool beside it: `bench
//            rl-envs`);
//   learner  learner updates per second on a synthetic batch of unrolls (32 x 20 CartPole
//            steps, the job's network), R = 1 and 2 local replicas: frames learned per second;
//   job      `replicator train impala` on CartPole as its own process: the synchronous loop
//            (--actors 0: one thread plays until a batch is there, then learns), 2 actor
//            threads with R = 1, and with R = 2;
//   peer     bench/impala_peer.py: IMPALA in PyTorch with 2 actor processes (TorchBeast's
//            MonoBeast style), the same network, unroll, batch and hyperparameters.
// Frames per second are frames learned from (learner steps x batch x unroll), except for env.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "apps/command.h"
#include "apps/subprocess.h"
#include "bench/env_speed.h"
#include "bench/median.h"
#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/rl/learner.h"
#include "replicator/rl/policy.h"

namespace replicator::apps {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchRlFlags {
  int repeats = 3;
  std::int64_t frames = 400'000;  // per job and peer run
  int updates = 60;               // timed learner updates per measurement
  std::string python;
  std::string peer_script;
  bool json = false;
};

constexpr int kBatch = 32;
constexpr int kUnroll = 20;

// Frames learned per second by R local learner replicas on one synthetic batch.
double learner_frames_per_s(int R, int updates) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<rl::Unroll> batch(kBatch);
  for (rl::Unroll& u : batch) {
    u.length = kUnroll;
    u.observation_size = 4;
    u.num_actions = 2;
    for (int i = 0; i < (kUnroll + 1) * 4; ++i) u.observations.push_back(normal(rng));
    for (int t = 0; t < kUnroll; ++t) {
      u.actions.push_back(static_cast<std::int32_t>(rng() % 2));
      u.rewards.push_back(1.f);
      u.done.push_back(rng() % 20 == 0 ? 1 : 0);
      u.behaviour_logits.push_back(normal(rng));
      u.behaviour_logits.push_back(normal(rng));
    }
  }
  Config config;
  config.local_replicas = R;
  Replicator repl(config);
  std::mutex init;
  const auto seconds = repl.run([&](ReplicaContext& ctx) {
    rl::PolicyNet model{nullptr};
    {
      std::lock_guard lock(init);
      ::torch::manual_seed(1);
      model = rl::PolicyNet(std::vector<int>{4}, 2, 64);
    }
    rl::Learner learner(ctx, model, {.learning_rate = 1e-4});
    const std::size_t share = batch.size() / static_cast<std::size_t>(R);
    const auto mine =
        std::span(batch).subspan(static_cast<std::size_t>(ctx.replica_id()) * share, share);
    for (int i = 0; i < 5; ++i) learner.update(mine);
    ctx.barrier();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < updates; ++i) learner.update(mine);
    ctx.barrier();
    return std::chrono::duration<double>(Clock::now() - start).count();
  });
  return static_cast<double>(updates) * kBatch * kUnroll / seconds[0];
}

struct Row {
  std::string name;
  std::vector<double> fps;
};

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
  BenchRlFlags flags = f;
  if (flags.peer_script.empty()) flags.peer_script = find_peer_script();
  if (flags.python.empty()) {
    flags.python = std::filesystem::exists(REPLICATOR_VENV_PYTHON) ? REPLICATOR_VENV_PYTHON
                                                                   : "/usr/bin/python3";
  }
  // Checked before anything is measured.
  if (flags.peer_script.empty() || !std::filesystem::exists(flags.peer_script)) {
    throw ConfigError(
        "bench/impala_peer.py not found next to the build nor in share/replicator of the "
        "installation; pass --peer-script");
  }
  at::set_num_threads(1);
  const std::string self = quote(self_path());
  const std::string job = self + " train impala --env cartpole --no-progress --json --frames " +
                          std::to_string(flags.frames) + " --report-every 100";
  const std::vector<std::pair<std::string, std::string>> jobs = {
      {"job sync (actors 0, R=1)", job + " --actors 0"},
      {"job 2 actors, R=1", job + " --actors 2"},
      {"job 2 actors, R=2", job + " --actors 2 --replicas 2"},
      {"peer pytorch, 2 actor procs", quote(flags.python) + " " + quote(flags.peer_script) +
                                          " --actors 2 --json --frames " +
                                          std::to_string(flags.frames)}};

  std::vector<Row> rows = {{"env cartpole M=64", {}}, {"learner R=1", {}}, {"learner R=2", {}}};
  for (const auto& j : jobs) rows.push_back({j.first, {}});
  for (int r = 0; r < flags.repeats; ++r) {
    rows[0].fps.push_back(bench::env_speed("cartpole", 64, 20000).frames_per_s);
    rows[1].fps.push_back(learner_frames_per_s(1, flags.updates));
    rows[2].fps.push_back(learner_frames_per_s(2, flags.updates));
    for (std::size_t k = 0; k < jobs.size(); ++k) {
      const std::string& command = jobs[k].second + " 2>/dev/null";
      const Json result = result_with(run_capture(command), "frames_per_s", command);
      rows[3 + k].fps.push_back(result["frames_per_s"].get<double>());
    }
    if (!flags.json) std::fprintf(stderr, "  repeat %d/%d done\n", r + 1, flags.repeats);
  }
  std::map<std::string, double> med;
  for (const Row& row : rows) med[row.name] = bench::median(row.fps);
  for (const Row& row : rows) {
    const double lo = *std::min_element(row.fps.begin(), row.fps.end());
    const double hi = *std::max_element(row.fps.begin(), row.fps.end());
    if (flags.json) {
      std::printf("%s\n", Json{{"type", "rl"},
                               {"row", row.name},
                               {"frames_per_s", med[row.name]},
                               {"min", lo},
                               {"max", hi},
                               {"repeats", flags.repeats}}
                              .dump()
                              .c_str());
    } else {
      std::printf("%-30s %12.0f frames/s  [%.0f..%.0f]\n", row.name.c_str(), med[row.name], lo, hi);
    }
  }
  const double r1 = med["job 2 actors, R=1"];
  const std::vector<std::pair<std::string, double>> ratios = {
      {"learner R=2 / R=1", med["learner R=2"] / med["learner R=1"]},
      {"job 2 actors R=1 / sync loop", r1 / med["job sync (actors 0, R=1)"]},
      {"job 2 actors R=1 / pytorch peer", r1 / med["peer pytorch, 2 actor procs"]},
      {"job 2 actors R=2 / R=1", med["job 2 actors, R=2"] / r1}};
  for (const auto& [name, value] : ratios) {
    if (flags.json) {
      std::printf("%s\n",
                  Json{{"type", "rl_ratio"}, {"ratio", name}, {"value", value}}.dump().c_str());
    } else {
      std::printf("# %-34s %.2f\n", name.c_str(), value);
    }
  }
  return 0;
}

}  // namespace

Command add_bench_rl(CLI::App& bench) {
  auto flags = std::make_shared<BenchRlFlags>();
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
  app->add_flag("--json", flags->json, "One JSON object per row");
  return {app, [flags] { return run_bench_rl(*flags); }};
}

}  // namespace replicator::apps
