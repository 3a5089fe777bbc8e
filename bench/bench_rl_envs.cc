// `replicator bench rl-envs`: frames per second of the batched environments alone (CartPole
// and the five MinAtar games, one thread) and, in the same run, EnvPool's CartPole-v1 in
// sync mode with the same number of envs (bench/envpool_cartpole.py in the project's virtual
// environment; its default thread count and one thread). Each measurement runs --repeats
// times; rows give the median and range, and the ratio of our CartPole to EnvPool's.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/command.h"
#include "bench/env_speed.h"
#include "bench/median.h"
#include "replicator/rl/env.h"

namespace replicator::apps {
namespace {

using Json = nlohmann::ordered_json;

struct Flags {
  int num_envs = 64;
  int steps = 20000;
  int repeats = 3;
  std::vector<std::string> envs;
  std::string python = REPLICATOR_VENV_PYTHON;
  std::string envpool_script = REPLICATOR_SOURCE_DIR "/bench/envpool_cartpole.py";
  bool json = false;
};

struct Row {
  std::string impl, env;
  int threads = 1;
  std::vector<double> fps;
};

// EnvPool's rows, or none (with a note on stderr) where Python or EnvPool is missing.
std::vector<double> envpool_fps(const Flags& f, int threads) {
  if (!std::filesystem::exists(f.python)) {
    std::fprintf(stderr,
                 "bench rl-envs: no %s (scripts/install_deps.sh makes it); "
                 "EnvPool left out\n",
                 f.python.c_str());
    return {};
  }
  const std::string command = f.python + " " + f.envpool_script + " --num-envs " +
                              std::to_string(f.num_envs) + " --steps " +
                              std::to_string(std::max(f.steps / 4, 100)) + " --repeats " +
                              std::to_string(f.repeats) + " --threads " + std::to_string(threads);
  std::vector<double> fps;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return fps;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    const Json j = Json::parse(buffer, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("frames_per_s")) fps.push_back(j["frames_per_s"]);
  }
  if (::pclose(pipe) != 0 || fps.empty()) {
    std::fprintf(stderr, "bench rl-envs: %s failed; EnvPool left out\n", command.c_str());
    fps.clear();
  }
  return fps;
}

int run(const Flags& f) {
  std::vector<std::string> envs = f.envs.empty() ? rl::env_names() : f.envs;
  std::vector<Row> rows;
  for (const std::string& name : envs) {
    Row row{.impl = "replicator", .env = name};
    // MinAtar steps cost ~50x CartPole's: fewer of them keep each game near a second.
    const int steps = name == "cartpole" ? f.steps : std::max(f.steps / 20, 50);
    for (int r = 0; r < f.repeats; ++r) {
      row.fps.push_back(bench::env_speed(name, f.num_envs, steps).frames_per_s);
    }
    rows.push_back(row);
  }
  for (int threads : {0, 1}) {
    Row row{.impl = "envpool", .env = "cartpole", .threads = threads};
    row.fps = envpool_fps(f, threads);
    if (!row.fps.empty()) rows.push_back(row);
  }
  const double ours = rows.front().env == "cartpole" ? bench::median(rows.front().fps) : 0.0;
  for (const Row& row : rows) {
    const double med = bench::median(row.fps);
    const auto [lo, hi] = std::minmax_element(row.fps.begin(), row.fps.end());
    Json j = {{"bench", "rl-envs"},     {"impl", row.impl},        {"env", row.env},
              {"num_envs", f.num_envs}, {"threads", row.threads},  {"repeats", row.fps.size()},
              {"frames_per_s", med},    {"frames_per_s_min", *lo}, {"frames_per_s_max", *hi}};
    if (row.impl == "envpool" && ours > 0) j["replicator_over_envpool"] = ours / med;
    if (f.json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-10s %-15s M=%-5d threads=%-2s %12.0f frames/s (%.0f..%.0f)%s\n",
                  row.impl.c_str(), row.env.c_str(), f.num_envs,
                  row.threads == 0 ? "def" : std::to_string(row.threads).c_str(), med, *lo, *hi,
                  j.contains("replicator_over_envpool")
                      ? ("  ours/envpool " + std::to_string(ours / med)).c_str()
                      : "");
    }
  }
  return 0;
}

}  // namespace

Command add_bench_rl_envs(CLI::App& bench) {
  auto flags = std::make_shared<Flags>();
  CLI::App* app = bench.add_subcommand(
      "rl-envs", "Frames per second of the batched environments, beside EnvPool's CartPole");
  app->add_option("--num-envs", flags->num_envs, "Envs per batch (M)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--steps", flags->steps, "Timed batched CartPole steps (MinAtar: 1/20)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app->add_option("--repeats", flags->repeats, "Measurements per row; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app->add_option("--envs", flags->envs, "Environments (default: all)")
      ->check(CLI::IsMember(rl::env_names()));
  app->add_option("--python", flags->python, "Python with EnvPool (the project's .venv)")
      ->capture_default_str();
  app->add_option("--envpool-script", flags->envpool_script, "bench/envpool_cartpole.py")
      ->capture_default_str();
  app->add_flag("--json", flags->json, "One JSON object per row");
  return {app, [flags] { return run(*flags); }};
}

}  // namespace replicator::apps
