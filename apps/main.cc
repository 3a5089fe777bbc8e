// The `replicator` command. Each subcommand lives in its own file and registers itself
// here; this file only parses the command line and maps failures to exit codes:
//   0 success, 1 the command ran and failed (a failed --check, a collective error),
//   2 bad usage (an unknown flag, a bad value).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "apps/command.h"
#include "replicator/errors.h"
#include "replicator/launch/blas_kernels.h"

int main(int argc, char** argv) {
  // Before anything runs: it may re-execute the process.
  replicator::launch::choose_blas_kernels(argv);
  using replicator::apps::Command;
  CLI::App app{"replicator: run one replica's step on many replicas; tools and benchmarks"};
  app.require_subcommand(1);
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  std::vector<Command> commands;
  commands.push_back(replicator::apps::add_bench_collectives(*bench));
  commands.push_back(replicator::apps::add_bench_rl_envs(*bench));
  commands.push_back(replicator::apps::add_diagnose(app));
  commands.push_back(replicator::apps::add_launch(app));
  commands.push_back(replicator::apps::add_plot(app));
  commands.push_back(replicator::apps::add_timeline(app));
#ifdef REPLICATOR_HAVE_TORCH
  CLI::App* train = app.add_subcommand("train", "Training jobs");
  train->require_subcommand(1);
  commands.push_back(replicator::apps::add_train_classifier(*train, argv));
  commands.push_back(replicator::apps::add_train_impala(*train, argv));
  commands.push_back(replicator::apps::add_train_d4pg(*train, argv));
  commands.push_back(replicator::apps::add_train_gan(*train, argv));
  commands.push_back(replicator::apps::add_bench_train(*bench));
  commands.push_back(replicator::apps::add_bench_gan(*bench));
  commands.push_back(replicator::apps::add_bench_rl(*bench, argv));
  commands.push_back(replicator::apps::add_bench_rl_remote(*bench));
  commands.push_back(replicator::apps::add_bench_env_server(*bench));
  CLI::App* rl = app.add_subcommand("rl", "Reinforcement learning: remote actors");
  rl->require_subcommand(1);
  commands.push_back(replicator::apps::add_rl_actor(*rl, argv));
  CLI::App* eval = replicator::apps::add_eval_group(app);
  commands.push_back(replicator::apps::add_eval_real(*eval));
  commands.push_back(replicator::apps::add_eval_gan(*eval));
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a hint
    return code == 0 ? 0 : 2;
  }
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const replicator::ConfigError& e) {
    std::fprintf(stderr, "replicator: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replicator: error: %s\n", e.what());
    return 1;
  }
  return 2;
}
