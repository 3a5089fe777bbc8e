// `replicator bench train` and `replicator bench gan`: training throughput of the classifier
// job and of the GAN job in several layouts, each run as its own process(es) so that every
// configuration starts from a clean heap:
//   local 1 replica x 1 thread, 1 replica x 2 threads, 2 replicas x 1 thread;
//   mpi 2 processes x 1 replica (mpirun), gloo 2 processes x 1 replica (`replicator launch`);
//   the peer a user would otherwise pick: PyTorch DDP over gloo, 2 processes x 1 thread
//   (bench/ddp_train.py, bench/ddp_gan.py: the same networks with per-process batch norm,
//   as DDP on CPU has no synchronized batch norm), same batch and memory setting. Our jobs
//   lay their networks out channels last (--memory-format); the peer runs twice, with
//   PyTorch's default layout (ddp-gloo-2x1) and channels last (ddp-gloo-2x1-cl). The
//   classifier also runs on logical shards (local-2x1-shards: --shards, docs/shards.md),
//   beside the plain local-2x1.
// Each configuration runs --repeats times, interleaved (repeat r of every configuration,
// then repeat r+1), with and without the memory setting; rows give the median and range
// of images/s over the timed steps, and the ratios the targets are about, from medians
// of the same invocation.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/command.h"
#include "bench/bench_rows.h"
#include "bench/median.h"
#include "replicator/errors.h"
#include "replicator/launch/blas_kernels.h"
#include "replicator/launch/memory_mode.h"
#include "replicator/launch/subprocess.h"

namespace replicator::apps {
namespace {

using bench::result_with;
using launch::blas_description;
using launch::MemoryMode;
using launch::quote;
using launch::run_capture;
using launch::self_path;

using Json = nlohmann::ordered_json;
using bench::median;

// What differs between the jobs measured.
struct BenchJob {
  std::string name;          // "train", "gan"
  std::string peer_script;   // in bench/
  int steps, warmup, batch;  // defaults
};

struct BenchTrainFlags {
  BenchJob job;
  int steps = 40;
  int warmup = 10;
  int repeats = 3;
  int batch = 256;
  int width = 32;                               // gan
  int d_steps = 1;                              // gan
  int shards = 8;                               // train: local-2x1-shards
  std::string memory_format = "channels-last";  // ours
  std::string memory = "both";
  std::vector<std::string> configs;
  std::string python = REPLICATOR_VENV_PYTHON;  // the venv's torch: the LibTorch we link
  std::string ddp_script;
  bool json = false;
};

struct Configuration {
  std::string name;    // e.g. "local-2x1"
  std::string engine;  // local, mpi, gloo, ddp-gloo
  int processes = 1;
  int replicas = 1;            // in all
  int threads = 1;             // intra-op threads per process
  bool channels_last = false;  // ddp-gloo: the peer's networks laid out channels last
  bool sharded = false;        // ours, on --shards logical shards (the classifier only)
};

// The peer runs with PyTorch's default layout, as a user would, and with its networks
// channels last, as ours: the same layout on both sides.
const std::vector<Configuration>& all_configurations() {
  static const std::vector<Configuration> kAll = {
      {"local-1x1", "local", 1, 1, 1},
      {"local-1x2t", "local", 1, 1, 2},
      {"local-2x1", "local", 1, 2, 1},
      {"mpi-2x1", "mpi", 2, 2, 1},
      {"gloo-2x1", "gloo", 2, 2, 1},
      {"ddp-gloo-2x1", "ddp-gloo", 2, 2, 1},
      {"ddp-gloo-2x1-cl", "ddp-gloo", 2, 2, 1, true},
      {"local-2x1-shards", "local", 1, 2, 1, false, true}};
  return kAll;
}

// images/s from the JSON object the run printed (possibly behind a "[rank] " prefix).
double images_per_s_of(const std::string& output, const std::string& command) {
  return result_with(output, "images_per_s", command)["images_per_s"].get<double>();
}

std::string command_for(const BenchTrainFlags& f, const Configuration& c, MemoryMode memory) {
  const std::string self = quote(self_path());
  const std::string mode(to_string(memory));
  const bool gan = f.job.name == "gan";
  const std::string model =
      gan ? " --width " + std::to_string(f.width) + " --d-steps " + std::to_string(f.d_steps) : "";
  const std::string ours = " --memory-format " + f.memory_format;
  const std::string job = (gan ? " train gan --sample-every 0 --standing-batches 1 --global-batch "
                               : " train classifier --no-eval --no-augment --batch ") +
                          std::to_string(f.batch) + model + ours +
                          " --no-progress --json --steps " + std::to_string(f.steps + f.warmup) +
                          " --timed-after " + std::to_string(f.warmup) + " --threads " +
                          std::to_string(c.threads) + " --memory " + mode +
                          (c.sharded ? " --shards " + std::to_string(f.shards) : "");
  if (c.engine == "local") {
    return self + job + " --replicas " + std::to_string(c.replicas);
  }
  if (c.engine == "mpi") {
    return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np " +
           std::to_string(c.processes) + " --oversubscribe --bind-to none " + self + job +
           " --replicas 1";
  }
  if (c.engine == "gloo") {
    return self + " launch -n " + std::to_string(c.processes) + " -- " + self + job +
           " --replicas 1";
  }
  // ddp-gloo: the same memory setting through glibc's environment variables.
  return launch::memory_mode_environment(memory) + " " + quote(f.python) + " " +
         quote(f.ddp_script) + " --processes " + std::to_string(c.processes) + " --threads " +
         std::to_string(c.threads) + " --batch " + std::to_string(f.batch) + " --steps " +
         std::to_string(f.steps) + " --warmup " + std::to_string(f.warmup) + model +
         (gan ? " --json" : "") + (c.channels_last ? " --channels-last" : "");
}

int run_bench_train(const BenchTrainFlags& f) {
  std::vector<MemoryMode> memories;
  if (f.memory == "both" || f.memory == "keep") memories.push_back(MemoryMode::kKeep);
  if (f.memory == "both" || f.memory == "system") memories.push_back(MemoryMode::kSystem);
  std::vector<Configuration> configs;
  for (const Configuration& c : all_configurations()) {
    if (c.sharded && f.job.name != "train") continue;
    if (f.configs.empty() ||
        std::find(f.configs.begin(), f.configs.end(), c.name) != f.configs.end()) {
      configs.push_back(c);
    }
  }
  BenchTrainFlags flags = f;
  if (flags.ddp_script.empty()) {
    // In the source tree (<root>/build/replicator → <root>/bench) or where `cmake --install`
    // puts it (<prefix>/bin/replicator → <prefix>/share/replicator).
    const std::filesystem::path exe = self_path();
    for (std::filesystem::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      for (const auto* folder : {"bench", "share/replicator"}) {
        const std::filesystem::path script = dir / folder / f.job.peer_script;
        if (flags.ddp_script.empty() && std::filesystem::exists(script)) {
          flags.ddp_script = script.string();
        }
      }
      if (!flags.ddp_script.empty()) break;
    }
  }
  // Checked before a minute is spent measuring.
  for (const Configuration& c : configs) {
    if (c.engine == "ddp-gloo" && flags.ddp_script.empty()) {
      throw ConfigError("bench/" + f.job.peer_script +
                        " not found next to the build nor in share/replicator of the "
                        "installation; pass --ddp-script");
    }
  }

  // images/s per (configuration, memory), repeats interleaved.
  std::map<std::pair<std::string, int>, std::vector<double>> rates;
  for (int r = 0; r < f.repeats; ++r) {
    for (const MemoryMode memory : memories) {
      for (const Configuration& c : configs) {
        const std::string command = command_for(flags, c, memory);
        const double rate = images_per_s_of(run_capture(command), command);
        rates[{c.name, static_cast<int>(memory)}].push_back(rate);
        if (!f.json) {
          std::fprintf(stderr, "  repeat %d/%d %-13s memory=%-6s %8.0f images/s\n", r + 1,
                       f.repeats, c.name.c_str(), to_string(memory), rate);
        }
      }
    }
  }

  const auto med = [&](const std::string& name, MemoryMode m) {
    const auto it = rates.find({name, static_cast<int>(m)});
    return it == rates.end() ? 0.0 : median(it->second);
  };
  if (!f.json) {
    std::printf(
        "# %s throughput: batch %d, %d timed steps after %d, median [min..max] of %d runs; %s\n",
        f.job.name.c_str(), f.batch, f.steps, f.warmup, f.repeats, blas_description().c_str());
    std::printf("%-17s %-9s %9s %8s %7s %-7s %10s %21s %9s\n", "config", "engine", "processes",
                "replicas", "threads", "memory", "images/s", "[min..max]", "vs 1x1");
  }
  for (const MemoryMode memory : memories) {
    const double base = med("local-1x1", memory);
    for (const Configuration& c : configs) {
      const std::vector<double>& v = rates[{c.name, static_cast<int>(memory)}];
      const double m = median(v);
      const char* mode = to_string(memory);
      if (f.json) {
        Json j;
        j["type"] = f.job.name;
        j["config"] = c.name;
        j["engine"] = c.engine;
        j["processes"] = c.processes;
        j["replicas"] = c.replicas;
        j["threads"] = c.threads;
        j["memory"] = mode;
        j["batch"] = f.batch;
        j["shards"] = c.sharded ? f.shards : 0;
        const bool peer = c.engine == "ddp-gloo";
        j["memory_format"] =
            peer ? (c.channels_last ? "channels-last" : "contiguous") : f.memory_format;
        j["images_per_s"] = m;
        j["runs"] = v;
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%-17s %-9s %9d %8d %7d %-7s %10.0f   [%7.0f..%7.0f] %9s\n", c.name.c_str(),
                    c.engine.c_str(), c.processes, c.replicas, c.threads, mode, m,
                    *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                    base > 0 ? (std::to_string(m / base).substr(0, 4) + "x").c_str() : "-");
      }
    }
  }
  if (!f.json) {
    const MemoryMode k = MemoryMode::kKeep;
    const double two = med("local-2x1", k);
    const auto ratio = [&](const char* label, double num, double den) {
      if (num > 0 && den > 0) std::printf("# %-48s %.2f\n", label, num / den);
    };
    ratio("local 2x1 / local 1x1 (memory keep)", two, med("local-1x1", k));
    ratio("mpi 2x1 / local 1x1 (keep)", med("mpi-2x1", k), med("local-1x1", k));
    ratio("gloo 2x1 / local 1x1 (keep)", med("gloo-2x1", k), med("local-1x1", k));
    ratio("local 2x1 / local 1 replica x 2 threads (keep)", two, med("local-1x2t", k));
    ratio("local 2x1 / DDP gloo 2x1 (keep)", two, med("ddp-gloo-2x1", k));
    ratio("mpi 2x1 / DDP gloo 2x1 (keep)", med("mpi-2x1", k), med("ddp-gloo-2x1", k));
    ratio("local 2x1 / mpi 2x1 (keep)", two, med("mpi-2x1", k));
    ratio("gloo 2x1 / mpi 2x1 (keep)", med("gloo-2x1", k), med("mpi-2x1", k));
    ratio("gloo 2x1 / DDP gloo 2x1 (keep)", med("gloo-2x1", k), med("ddp-gloo-2x1", k));
    ratio("local 2x1 / DDP gloo 2x1 channels last (keep)", two, med("ddp-gloo-2x1-cl", k));
    ratio("gloo 2x1 / DDP gloo 2x1 channels last (keep)", med("gloo-2x1", k),
          med("ddp-gloo-2x1-cl", k));
    ratio("local 2x1 on shards / local 2x1 (keep)", med("local-2x1-shards", k), two);
    ratio("memory keep / system, local 1x1", med("local-1x1", k),
          med("local-1x1", MemoryMode::kSystem));
    ratio("memory keep / system, local 2x1", two, med("local-2x1", MemoryMode::kSystem));
  }
  return 0;
}

Command add_bench_job(CLI::App& bench, const BenchJob& job, const std::string& help) {
  auto flags = std::make_shared<BenchTrainFlags>();
  flags->job = job;
  flags->steps = job.steps;
  flags->warmup = job.warmup;
  flags->batch = job.batch;
  CLI::App* app = bench.add_subcommand(job.name, help);
  app->add_option("--steps", flags->steps, "Timed steps per run")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app->add_option("--warmup", flags->warmup, "Untimed steps before them")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app->add_option("--repeats", flags->repeats, "Runs per configuration (median reported)")
      ->check(CLI::Range(1, 100));
  app->add_option("--batch", flags->batch, "Global batch")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  if (job.name == "gan") {
    app->add_option("--width", flags->width, "Width of G and D")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app->add_option("--d-steps", flags->d_steps, "D steps per G step")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
  }
  if (job.name == "train") {
    app->add_option("--shards", flags->shards, "Logical shards of local-2x1-shards")
        ->capture_default_str()
        ->check(CLI::Range(2, 1 << 16));
  }
  app->add_option("--memory-format", flags->memory_format,
                  "Layout of our networks (channels-last or contiguous); the peer runs "
                  "PyTorch's default (ddp-gloo-2x1) and channels last (ddp-gloo-2x1-cl)")
      ->capture_default_str()
      ->check(CLI::IsMember({"channels-last", "contiguous"}));
  app->add_option("--memory", flags->memory, "keep, system or both")
      ->check(CLI::IsMember({"keep", "system", "both"}));
  std::vector<std::string> names;
  for (const Configuration& c : all_configurations()) {
    names.push_back(c.name);
  }
  std::string listed;
  for (const std::string& name : names) listed += " " + name;
  app->add_option("--configs", flags->configs, "Subset of:" + listed)->check(CLI::IsMember(names));
  app->add_option("--python", flags->python,
                  "Python with torch, for the DDP run (default: the project's .venv, whose torch "
                  "is the LibTorch replicator links)");
  app->add_option("--ddp-script", flags->ddp_script, "Path of bench/" + job.peer_script);
  app->add_flag("--json", flags->json, "One JSON object per configuration and memory setting");
  return {app, [flags] { return run_bench_train(*flags); }};
}

}  // namespace

Command add_bench_train(CLI::App& bench) {
  return add_bench_job(
      bench,
      {.name = "train", .peer_script = "ddp_train.py", .steps = 40, .warmup = 10, .batch = 256},
      "Training throughput (images/s) of the classifier job in several layouts, and PyTorch DDP");
}

Command add_bench_gan(CLI::App& bench) {
  return add_bench_job(
      bench, {.name = "gan", .peer_script = "ddp_gan.py", .steps = 40, .warmup = 3, .batch = 64},
      "Training throughput (images/s, one D and one G step per step) of the GAN job in several "
      "layouts, and PyTorch DDP");
}

}  // namespace replicator::apps
