// `replicator rl actor`: one IMPALA actor in a process of its own, fed by a learner of
// `replicator train impala --remote-actors N` over gRPC (replicator/train/impala.h). Prints what it
// did on stderr (and, with --json, one JSON object on stdout).
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "apps/command.h"
#include "apps/job_flags.h"
#include "replicator/config.h"
#include "replicator/launch/memory_mode.h"
#include "replicator/train/impala.h"
#include "replicator/train/reporter.h"

namespace replicator::apps {
namespace {

using train::RemoteActorOptions;
using train::RemoteActorResult;
using train::run_remote_actor;

struct ActorFlags {
  std::string learners;
  std::string timeout = "30s";
  RemoteActorOptions options;
  std::string memory = "keep";
  bool json = false;
  bool quiet = false;
  char** argv = nullptr;  // main's, for the memory setting's re-execution
};

int run_actor(ActorFlags& f) {
  launch::apply_memory_mode(launch::parse_memory_mode(f.memory), f.argv);
  RemoteActorOptions o = f.options;
  std::stringstream list(f.learners);
  for (std::string address; std::getline(list, address, ',');) {
    if (!address.empty()) o.learners.push_back(address);
  }
  o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      parse_duration(f.timeout, "--learner-timeout"));
  o.progress = !f.quiet;
  const RemoteActorResult r = run_remote_actor(o);
  std::fprintf(stderr,
               "actor %d: the learner at %s finished; played %lld frames, %lld episodes (mean "
               "return %.1f) in %.1f s; sent %lld unrolls, %lld acknowledged, %lld lost; %d "
               "reconnects, %lld parameter versions\n",
               r.actor, r.learner.c_str(), static_cast<long long>(r.frames),
               static_cast<long long>(r.episodes), r.mean_return, r.seconds,
               static_cast<long long>(r.sent), static_cast<long long>(r.acknowledged),
               static_cast<long long>(r.lost), r.reconnects, static_cast<long long>(r.versions));
  if (f.json) {
    train::print_json_result(
        {{"type", "rl_actor"},
         {"actor", r.actor},
         {"learner", r.learner},
         {"env", r.env},
         {"frames", r.frames},
         {"episodes", r.episodes},
         {"mean_return", std::isnan(r.mean_return) ? nlohmann::ordered_json()
                                                   : nlohmann::ordered_json(r.mean_return)},
         {"seconds", r.seconds},
         {"sent", r.sent},
         {"acknowledged", r.acknowledged},
         {"lost", r.lost},
         {"reconnects", r.reconnects},
         {"versions", r.versions}});
  }
  return 0;
}

}  // namespace

Command add_rl_actor(CLI::App& rl, char** argv) {
  auto flags = std::make_shared<ActorFlags>();
  flags->argv = argv;
  CLI::App* app = rl.add_subcommand(
      "actor",
      "An IMPALA actor in this process, playing for a learner started with `replicator train "
      "impala --remote-actors N`: it takes the environment and sizes from the learner, and "
      "exits when the learner finishes (0) or stays unreachable (1)");
  app->add_option("--learner", flags->learners,
                  "host:port of the learner process, or a comma-separated list of all of them "
                  "(the actor picks one by its id)")
      ->required();
  app->add_option("--id", flags->options.id,
                  "This actor's id: seeds its environments and picks the learner (default: "
                  "the learner gives one)")
      ->check(CLI::Range(0, 1 << 30));
  app->add_option("--learner-timeout", flags->timeout,
                  "Give up when the learner stays unreachable this long (e.g. 30s, 500ms)")
      ->capture_default_str();
  add_memory_flag(app, flags->memory);
  app->add_flag("--json", flags->json, "Print the result as one JSON object on stdout");
  app->add_flag("--no-progress", flags->quiet, "No line at the start");
  return {app, [flags] { return run_actor(*flags); }};
}

}  // namespace replicator::apps
