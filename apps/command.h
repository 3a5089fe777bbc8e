// A subcommand of the `replicator` command: its CLI11 node and what to run once the
// command line is parsed. Each subcommand's file defines an add_* function returning one;
// main.cc lists them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace replicator::apps {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// `replicator bench collectives` (bench/bench_collectives.cc).
Command add_bench_collectives(CLI::App& bench);
// `replicator bench rl-envs` (bench/bench_rl_envs.cc).
Command add_bench_rl_envs(CLI::App& bench);
// `replicator diagnose` (diagnose_command.cc): a job's verdict from its flight-recorder dumps.
Command add_diagnose(CLI::App& app);
// `replicator launch` (launch.cc).
Command add_launch(CLI::App& app);
// `replicator plot` (plot_command.cc): charts of a metrics.jsonl file.
Command add_plot(CLI::App& app);
// `replicator timeline` (timeline_command.cc): where each replica's time went, from a job's
// timeline files.
Command add_timeline(CLI::App& app);
// `replicator train classifier` (train_command.cc); built with LibTorch only. `argv` is
// main's (the memory setting may re-execute the process).
Command add_train_classifier(CLI::App& train, char** argv);
// `replicator train gan` (train_gan_command.cc); built with LibTorch only. `argv` as for
// the classifier.
Command add_train_gan(CLI::App& train, char** argv);
// `replicator train impala` (train_impala_command.cc); built with LibTorch only. `argv` as
// for the classifier.
Command add_train_impala(CLI::App& train, char** argv);
// `replicator train d4pg` (train_d4pg_command.cc); built with LibTorch only. `argv` as for
// add_train_classifier.
Command add_train_d4pg(CLI::App& train, char** argv);
// `replicator rl actor` (rl_actor_command.cc): a remote IMPALA actor; built with LibTorch
// only (it fails with a clear error without gRPC). `argv` as for the classifier.
Command add_rl_actor(CLI::App& rl, char** argv);
// `replicator bench rl-remote` (bench/bench_rl_remote.cc); built with LibTorch only (it fails
// with a clear error without gRPC).
Command add_bench_rl_remote(CLI::App& bench);
// `replicator bench env-server` (bench/bench_env_server.cc); built with LibTorch only (it
// fails with a clear error without gRPC).
Command add_bench_env_server(CLI::App& bench);
// `replicator bench rl` (bench/bench_rl.cc); built with LibTorch only.
Command add_bench_rl(CLI::App& bench, char** argv);
// `replicator bench train` and `replicator bench gan` (bench/bench_train.cc); built with
// LibTorch only.
Command add_bench_train(CLI::App& bench);
Command add_bench_gan(CLI::App& bench);
// The `replicator eval` group (eval_command.cc), for the subcommands that measure sample
// quality; built with LibTorch only.
CLI::App* add_eval_group(CLI::App& app);
// `replicator eval real` (eval_command.cc): the trivial generator's quality.
Command add_eval_real(CLI::App& eval);
// `replicator eval gan` (eval_gan_command.cc): the quality of GAN checkpoints.
Command add_eval_gan(CLI::App& eval);

}  // namespace replicator::apps
