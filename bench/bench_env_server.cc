// `replicator bench env-server`: what an env server (python/env_server.py) costs. One batch of
// M gymnasium environments, uniformly random actions, interleaved per repeat:
//   python in-process      the batch stepped in one Python process, as a Python program
//                          would without a server (env_server.py --bench);
//   python + reply         the same with each step's reply encoded as the server sends it;
//   env server via gRPC    the batch in an env server on loopback, stepped from here through
//                          make_remote_env (include/replicator/rl/remote.h), observations
//                          turned into floats as actors get them.
// Environment steps per second (all M counted). The overhead is what the server path loses
// against the in-process one.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/command.h"
#include "bench/bench_rows.h"
#include "replicator/errors.h"
#include "replicator/launch/subprocess.h"
#include "replicator/rl/env.h"
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

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string env = "ALE/Breakout-v5";
  int envs = 16;
  double seconds = 5;
  int repeats = 3;
  std::string python = REPLICATOR_VENV_PYTHON;
  std::string server_script = REPLICATOR_SOURCE_DIR "/python/env_server.py";
  bool json = false;
};

#ifdef REPLICATOR_HAVE_GRPC
// Steps/s of `env` stepped with uniformly random actions for about `seconds`.
double steps_per_s(rl::BatchedEnv& env, double seconds, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> pick(0, env.num_actions() - 1);
  std::vector<std::int32_t> actions(static_cast<std::size_t>(env.num_envs()));
  std::int64_t steps = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (std::int32_t& a : actions) a = pick(rng);
    env.step(actions);
    steps += env.num_envs();
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(steps) / elapsed;
}
#endif

int run(const Flags& f) {
#ifndef REPLICATOR_HAVE_GRPC
  (void)f;
  throw ConfigError("this replicator was built without gRPC: no env servers to measure");
#else
  // Checked before anything is measured.
  for (const std::string& path : {f.python, f.server_script}) {
    if (!std::filesystem::exists(path)) {
      throw ConfigError("bench env-server: " + path +
                        " not found (scripts/install_deps.sh makes the .venv; --python and "
                        "--server-script name others)");
    }
  }
  const std::string in_process = quote(f.python) + " " + quote(f.server_script) + " --bench " +
                                 quote(f.env) + " --envs " + std::to_string(f.envs) +
                                 " --seconds " + std::to_string(f.seconds);
  const int port = free_loopback_ports();
  const BackgroundChild server({f.python, f.server_script, "--port", std::to_string(port)});
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::unique_ptr<rl::BatchedEnv> remote =
      rl::make_remote_env(address, f.env, f.envs, 0, std::chrono::milliseconds(120'000));
  std::mt19937 rng(0);
  steps_per_s(*remote, std::min(f.seconds, 1.0), rng);  // warm-up: the first steps, connections

  std::vector<bench::BenchRow> rows = {{"python in-process", "steps/s"},
                                       {"python in-process + reply", "steps/s"},
                                       {"env server via gRPC", "steps/s"}};
  for (int r = 0; r < f.repeats; ++r) {
    const nlohmann::ordered_json py =
        result_with(run_capture(in_process), "steps_per_s", in_process);
    rows[0].values.push_back(py["steps_per_s"].get<double>());
    rows[1].values.push_back(py["with_reply_steps_per_s"].get<double>());
    rows[2].values.push_back(steps_per_s(*remote, f.seconds, rng));
    if (!f.json) std::fprintf(stderr, "  repeat %d/%d done\n", r + 1, f.repeats);
  }
  const bench::BenchPrint how{
      .type = "env_server", .json = f.json, .extra = {{"env", f.env}, {"envs", f.envs}}};
  if (!f.json) std::printf("# %s, %d environments, random actions\n", f.env.c_str(), f.envs);
  std::map<std::string, double> med = bench::print_bench_rows(rows, how);
  const double server_rate = med["env server via gRPC"];
  const double python_rate = med["python in-process"];
  // Per call of M steps: what the server path adds, in microseconds.
  const double added_us = 1e6 * f.envs * (1 / server_rate - 1 / python_rate);
  bench::print_bench_ratios(
      {{"env server / python in-process", server_rate / python_rate},
       {"env server / python in-process + reply", server_rate / med["python in-process + reply"]},
       {"added per call of M steps, microseconds", added_us}},
      how);
  return 0;
#endif
}

}  // namespace

Command add_bench_env_server(CLI::App& bench) {
  auto flags = std::make_shared<Flags>();
  CLI::App* app = bench.add_subcommand(
      "env-server",
      "What an env server costs: a batch of gymnasium environments stepped in one Python "
      "process beside the same batch stepped over gRPC through python/env_server.py");
  app->add_option("--env", flags->env, "gymnasium id (Atari ids get the standard preprocessing)")
      ->capture_default_str();
  app->add_option("--envs", flags->envs, "Environments in the batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app->add_option("--seconds", flags->seconds, "About how long each measurement takes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app->add_option("--repeats", flags->repeats, "Measurements per row; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app->add_option("--python", flags->python, "Python with gymnasium, ale-py and grpcio")
      ->capture_default_str();
  app->add_option("--server-script", flags->server_script, "Path of python/env_server.py")
      ->capture_default_str();
  app->add_flag("--json", flags->json, "One JSON object per row");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace replicator::apps
