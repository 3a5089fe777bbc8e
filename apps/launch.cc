// `replicator launch`: starts the processes of a gloo job and watches them.
//
//   replicator launch -n P [--local-replicas L] [--store URL] [--host ADDR] -- prog args...
// starts P processes on this machine. Each gets REPLICATOR_ENGINE=gloo, REPLICATOR_RANK,
// REPLICATOR_WORLD_SIZE and REPLICATOR_STORE (by default a fresh file:// folder, removed at
// the end), plus REPLICATOR_LOCAL_REPLICAS and REPLICATOR_HOST when given. With --store,
// every launch also sets a fresh REPLICATOR_JOB (unless the environment has one), so that
// runs sharing one Redis do not meet each other's keys. The first process to exit non-zero
// or die by a signal is reported in one line; the others get SIGTERM, then SIGKILL 2 s later.
//
// With --actors K the P processes are the learner of an IMPALA job and K actor processes
// (`replicator rl actor`) play for it: the learner's command gets `--remote-actors K/P
// --listen 127.0.0.1:PORT` appended (PORT..PORT+P-1 free ones, or --actor-port), and actor i
// plays for learner process i mod P. An actor that fails is restarted (--actor-restarts
// times each) while the learner runs; once every learner process exited 0, the actors are
// given time to see the learner finish and then stopped.
//
// With --nnodes, --max-restarts or --rdzv the launcher is the elastic agent of its host
// (replicator/launch/elastic.h): the job restarts after a failure, over the hosts still
// present. The command only reads the flags: what it runs is the launch layer's
// (replicator/launch/launcher.h, elastic.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/command.h"
#include "replicator/config.h"
#include "replicator/errors.h"
#include "replicator/launch/elastic.h"
#include "replicator/launch/launcher.h"
#include "replicator/launch/subprocess.h"

namespace replicator::apps {

namespace {

struct LaunchFlags {
  int processes = 0;
  std::optional<int> local_replicas;
  std::string store;
  std::string host;
  std::vector<std::string> command;
  // actors of an IMPALA learner
  int actors = 0;
  int actor_port = 0;
  int actor_restarts = 3;
  // elastic
  std::string nnodes;
  std::optional<int> max_restarts;
  std::string rdzv;
  std::string heartbeat = "1s";
  std::string heartbeat_timeout = "10s";
  std::string rdzv_timeout = "5m";
  std::string last_call = "3s";
};

std::chrono::milliseconds duration_flag(const std::string& text, const std::string& flag) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(text, flag));
  if (d.count() < 1)
    throw ConfigError("launch: " + flag + " must be at least 1ms, got '" + text + "'");
  return d;
}

}  // namespace

Command add_launch(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "Start the processes of a gloo job: replicator launch -n P -- prog args...; with --nnodes "
      "or --max-restarts, an elastic job that restarts after failures");
  CLI::Option* processes =
      sub->add_option("-n,--processes,--nproc-per-node", flags->processes,
                      "Processes on this host (required; with --actors, 1 by default)");
  sub->add_option("--local-replicas", flags->local_replicas,
                  "Replicas (threads) per process; sets REPLICATOR_LOCAL_REPLICAS");
  sub->add_option("--store", flags->store,
                  "Rendezvous store of a job that is not elastic, file:///dir or "
                  "redis://host:port (default: a fresh temporary folder, removed at the end)");
  sub->add_option("--host", flags->host,
                  "Address the other processes reach this host's processes at; sets "
                  "REPLICATOR_HOST");
  sub->add_option("--nnodes", flags->nnodes,
                  "Elastic: hosts in the job, N or MIN:MAX (one agent per host; the job runs "
                  "while at least MIN are present)");
  sub->add_option("--max-restarts", flags->max_restarts,
                  "Elastic: restarts after failures before giving up (default 3)");
  sub->add_option("--rdzv", flags->rdzv,
                  "Elastic: where the agents meet, file:///shared/folder/job or "
                  "redis://host:port/job (one host: a fresh temporary folder by default)");
  sub->add_option("--heartbeat", flags->heartbeat,
                  "Elastic: how often agents and workers show they are alive")
      ->capture_default_str();
  sub->add_option("--heartbeat-timeout", flags->heartbeat_timeout,
                  "Elastic: a worker or agent silent this long has failed")
      ->capture_default_str();
  sub->add_option("--rdzv-timeout", flags->rdzv_timeout,
                  "Elastic: how long to wait for MIN hosts to join")
      ->capture_default_str();
  sub->add_option("--last-call", flags->last_call,
                  "Elastic: once MIN hosts joined, how long more may join before the "
                  "generation starts (it starts at once when MAX, or every host of the "
                  "generation before, joined)")
      ->capture_default_str();
  sub->add_option("--actors", flags->actors,
                  "IMPALA: also start this many actor processes (replicator rl actor) for the "
                  "learner the -n processes run; appends --remote-actors and --listen to its "
                  "command")
      ->check(CLI::Range(0, 1 << 16));
  sub->add_option("--actor-port", flags->actor_port,
                  "IMPALA: the port learner process 0 serves actors on (process r: port + r; "
                  "default: free ones)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--actor-restarts", flags->actor_restarts,
                  "IMPALA: how often each actor that fails is restarted while the learner runs")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("command", flags->command,
                  "The program and its arguments, after --: every process runs it");
  sub->footer(
      "Each line a process prints is shown prefixed with [rank i]. Without the elastic flags, "
      "if a process exits non-zero or dies by a signal, the others are stopped (SIGTERM, then "
      "SIGKILL after 2 s) and the launcher exits 1; with --actors, an actor that fails is "
      "restarted instead. Elastic jobs run on the gloo engine only; "
      "see docs/launching.md (Elastic jobs) for what a restart guarantees.");
  return {
      sub, [flags, processes]() -> int {
        if (processes->count() == 0) {
          if (flags->actors == 0) {
            throw ConfigError("launch: -n P is required: the processes to start on this host");
          }
          flags->processes = 1;
        }
        const bool elastic = !flags->nnodes.empty() || flags->max_restarts || !flags->rdzv.empty();
        if (!elastic) {
          launch::LaunchOptions options;
          options.processes = flags->processes;
          options.local_replicas = flags->local_replicas;
          options.store = flags->store;
          options.host = flags->host;
          options.command = flags->command;
          options.actor_restarts = flags->actor_restarts;
          // (run_processes refuses fewer than 1 process.)
          if (flags->actors > 0 && flags->processes > 0) {
            options =
                launch::with_remote_actors(std::move(options), {.actors = flags->actors,
                                                                .port = flags->actor_port,
                                                                .program = launch::self_path()});
          }
          return launch::run_processes(options);
        }
        if (flags->actors > 0) {
          throw ConfigError("launch: --actors is for jobs that are not elastic");
        }
        if (!flags->store.empty()) {
          throw ConfigError(
              "launch: --store is for jobs that are not elastic; an elastic job meets "
              "through --rdzv file:///shared/folder/job or redis://host:port/job");
        }
        launch::ElasticOptions options;
        std::tie(options.min_hosts, options.max_hosts) =
            launch::parse_host_range(flags->nnodes.empty() ? "1" : flags->nnodes);
        options.processes = flags->processes;
        options.local_replicas = flags->local_replicas;
        options.host = flags->host;
        options.command = flags->command;
        options.max_restarts = flags->max_restarts.value_or(3);
        options.rdzv = flags->rdzv;
        options.heartbeat = duration_flag(flags->heartbeat, "--heartbeat");
        options.heartbeat_timeout = duration_flag(flags->heartbeat_timeout, "--heartbeat-timeout");
        options.rdzv_timeout = duration_flag(flags->rdzv_timeout, "--rdzv-timeout");
        options.last_call = duration_flag(flags->last_call, "--last-call");
#if defined(REPLICATOR_HAVE_GLOO)
        return launch::run_elastic(options);
#else
            throw ConfigError("launch: elastic jobs need the gloo engine, which is not part of "
                              "this build");
#endif
      }};
}

}  // namespace replicator::apps
