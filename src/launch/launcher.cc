#include "replicator/launch/launcher.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "replicator/launch/subprocess.h"
#include "replicator/launch/workers.h"
#include "src/base/launch_env.h"
#include "src/launch/common.h"

namespace replicator::launch {
namespace {

using Clock = std::chrono::steady_clock;

// After the last child exited, how long output of processes it left behind is still read.
constexpr auto kDrainGrace = std::chrono::seconds(1);

std::string seconds_text(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

void check(const LaunchOptions& options) {
  detail::check_job(options.processes, options.local_replicas, options.command);
  if (options.actor_restarts < 0) {
    throw ConfigError("launch: --actor-restarts must be at least 0, got " +
                      std::to_string(options.actor_restarts));
  }
  for (const auto& actor : options.actors) {
    if (actor.empty()) throw ConfigError("launch: an actor's command is empty");
  }
}

}  // namespace

int run_processes(const LaunchOptions& options) {
  check(options);
  const LaunchOptions& flags = options;
  TempFolder temp;
  std::string store = flags.store;
  std::string job;
  if (store.empty()) {
    temp.make();
    store = "file://" + temp.path.string();
  } else if (const char* given = replicator::detail::env("REPLICATOR_JOB");
             given == nullptr || *given == 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    job = "launch-" + std::string(host) + "-" + std::to_string(getpid()) + "-" +
          std::to_string(std::time(nullptr));
  }
  // Ranks 0..P-1 are the job's processes, P + i is actor i.
  const auto is_actor = [&](int rank) { return rank >= flags.processes; };
  const auto actor_name = [](int i) { return "actor " + std::to_string(i); };

  Workers workers;
  try {
    // torchrun's variables too, so that a torch.distributed program (env:// rendezvous, whose
    // TCPStore rank 0 serves at MASTER_ADDR:MASTER_PORT) runs unchanged under this launcher.
    const std::string master_port = std::to_string(free_loopback_ports());
    for (int rank = 0; rank < flags.processes; ++rank) {
      std::vector<std::pair<std::string, std::string>> ours = {
          {"REPLICATOR_ENGINE", "gloo"},
          {"REPLICATOR_RANK", std::to_string(rank)},
          {"REPLICATOR_WORLD_SIZE", std::to_string(flags.processes)},
          {"REPLICATOR_STORE", store},
          {"REPLICATOR_HOST_PROCESSES", std::to_string(flags.processes)},
          {"MASTER_ADDR", flags.host.empty() ? "127.0.0.1" : flags.host},
          {"MASTER_PORT", master_port},
          {"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(flags.processes)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(flags.processes)},
      };
      if (flags.local_replicas) {
        ours.emplace_back("REPLICATOR_LOCAL_REPLICAS", std::to_string(*flags.local_replicas));
      }
      if (!flags.host.empty()) ours.emplace_back("REPLICATOR_HOST", flags.host);
      if (!job.empty()) ours.emplace_back("REPLICATOR_JOB", job);
      workers.start(rank, flags.command, child_environment(ours));
    }
    for (std::size_t i = 0; i < flags.actors.size(); ++i) {
      workers.start(flags.processes + static_cast<int>(i), flags.actors[i], child_environment({}),
                    actor_name(static_cast<int>(i)));
    }
  } catch (const Error& e) {
    // Its message starts with "launch: " already.
    detail::write_all(STDERR_FILENO, "replicator " + std::string(e.what()) + "\n");
    return 2;  // ~Workers kills what was started
  }

  std::optional<int> failure;
  std::optional<Clock::time_point> drain_until;
  // Set once every learner process exited 0.
  Clock::time_point actors_until = Clock::time_point::max();
  int learners_running = flags.processes;
  std::vector<int> restarts(flags.actors.size(), 0);
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (!workers.any_running()) {
      if (!drain_until) drain_until = now + kDrainGrace;
      if (!workers.any_open() || now >= *drain_until) break;
    }
    if (now >= actors_until) {
      detail::say("the actors did not exit " + seconds_text(flags.actors_finish_grace) +
                  " after the learner finished; stopping them");
      workers.stop(flags.kill_grace);
      actors_until = Clock::time_point::max();
    }
    workers.pump(drain_until ? std::chrono::ceil<std::chrono::milliseconds>(*drain_until - now)
                             : std::chrono::milliseconds(1000));
    for (const Workers::Exit& exit : workers.take_exits()) {
      if (!is_actor(exit.rank)) {
        --learners_running;
        if (Workers::failed(exit.status) && !failure) {
          failure = exit.rank;
          detail::say(Workers::describe(exit));
          workers.stop(flags.kill_grace);
        }
        if (learners_running == 0 && !failure && !flags.actors.empty()) {
          actors_until = Clock::now() + flags.actors_finish_grace;
        }
        continue;
      }
      if (!Workers::failed(exit.status) || failure || learners_running == 0 ||
          workers.interrupted() != 0) {
        continue;
      }
      const auto i = static_cast<std::size_t>(exit.rank - flags.processes);
      if (restarts[i] >= flags.actor_restarts) {
        detail::say(Workers::describe(exit) + "; not restarted (--actor-restarts " +
                    std::to_string(flags.actor_restarts) + " used up)");
        continue;
      }
      ++restarts[i];
      detail::say(Workers::describe(exit) + "; restarting it (" + std::to_string(restarts[i]) +
                  " of " + std::to_string(flags.actor_restarts) + ")");
      try {
        workers.start(exit.rank, flags.actors[i], child_environment({}),
                      actor_name(static_cast<int>(i)));
      } catch (const Error& e) {
        detail::say(e.what());
      }
    }
  }
  workers.clear();
  return failure ? 1 : 0;
}

LaunchOptions with_remote_actors(LaunchOptions plan, const RemoteActors& a) {
  for (const std::string& arg : plan.command) {
    for (const char* ours : {"--remote-actors", "--listen"}) {
      if (arg == ours || arg.rfind(std::string(ours) + "=", 0) == 0) {
        throw ConfigError(std::string("launch: with --actors the launcher sets ") + ours +
                          " of the learner itself; leave it out of the command (use "
                          "--actor-port for the port)");
      }
    }
  }
  const int processes = plan.processes;
  if (a.actors % processes != 0) {
    throw ConfigError("launch: --actors (" + std::to_string(a.actors) +
                      ") must be a multiple of -n (" + std::to_string(processes) +
                      "): every learner process waits for the same number of actors");
  }
  const int port = a.port != 0 ? a.port : free_loopback_ports(processes);
  if (port < 1 || port + processes - 1 > 65535) {
    throw ConfigError("launch: --actor-port must leave " + std::to_string(processes) +
                      " ports below 65536, got " + std::to_string(port));
  }
  const std::string host = plan.host.empty() ? "127.0.0.1" : plan.host;
  plan.command.insert(plan.command.end(), {"--remote-actors", std::to_string(a.actors / processes),
                                           "--listen", host + ":" + std::to_string(port)});
  std::string learners;
  for (int p = 0; p < processes; ++p) {
    learners += (p == 0 ? "" : ",") + host + ":" + std::to_string(port + p);
  }
  for (int i = 0; i < a.actors; ++i) {
    plan.actors.push_back(
        {a.program, "rl", "actor", "--learner", learners, "--id", std::to_string(i)});
  }
  return plan;
}

}  // namespace replicator::launch
