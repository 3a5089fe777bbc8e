// The plain launcher, as `replicator launch -n P -- prog args...` runs it and as a program
// may call it: starts the P processes of a gloo job on this host and watches them.
//
// Each process gets REPLICATOR_ENGINE=gloo, REPLICATOR_RANK, REPLICATOR_WORLD_SIZE,
// REPLICATOR_HOST_PROCESSES and REPLICATOR_STORE (by default a fresh file:// folder, removed
// at the end), plus REPLICATOR_LOCAL_REPLICAS and REPLICATOR_HOST when given. With a store of
// the caller's, every launch also sets a fresh REPLICATOR_JOB (unless the environment has
// one), so that runs sharing one Redis do not meet each other's keys. torchrun's variables
// come too (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and MASTER_ADDR, the host or
// 127.0.0.1, with a MASTER_PORT free when the launch began), so that a torch.distributed
// program with env:// rendezvous runs unchanged under it. Each line a process
// prints is shown behind "[rank i] " (workers.h). The first process to exit non-zero or die
// by a signal is reported in one line on stderr; the others get SIGTERM, then SIGKILL
// `kill_grace` later.
//
// Actors: processes that serve the job (IMPALA's actors, `replicator rl actor`) run beside
// it. An actor that fails is restarted (`actor_restarts` times each) while the job runs; once
// every process of the job exited 0, the actors are given `actors_finish_grace` to see it
// finish, and then stopped.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace replicator::launch {

struct LaunchOptions {
  int processes = 1;                  // the job's processes on this host
  std::optional<int> local_replicas;  // REPLICATOR_LOCAL_REPLICAS of each; none: unset
  std::string store;  // file:///dir or redis://host:port; empty: a fresh folder of its own
  std::string host;   // REPLICATOR_HOST of each; empty: unset
  std::vector<std::string> command;  // what every process runs (command[0] looked up in PATH)
  std::vector<std::vector<std::string>> actors;  // actor i runs actors[i], shown as "actor i"
  int actor_restarts = 3;
  std::chrono::milliseconds kill_grace{2000};
  std::chrono::milliseconds actors_finish_grace{10000};
};

// The actor processes of an IMPALA learner (`replicator launch --actors K`): the learner is the
// job's P processes, each waiting for K/P actors (`replicator rl actor`).
struct RemoteActors {
  int actors = 0;       // K: a multiple of the job's processes
  int port = 0;         // where learner process 0 serves them (process r: port + r); 0: free ones
  std::string program;  // the `replicator` program the actors run
};

// `plan` with the learner's command given `--remote-actors K/P --listen HOST:PORT` (HOST:
// plan.host, or 127.0.0.1) and K actors, actor i running `program rl actor --learner
// HOST:PORT,...,HOST:PORT+P-1 --id i` (it plays for learner process i mod P). Never blocks.
// Throws ConfigError when the command already sets --remote-actors or --listen, when K is
// not a multiple of P, or when the ports would pass 65535; Error when no free ports are found.
LaunchOptions with_remote_actors(LaunchOptions plan, const RemoteActors& actors);

// Starts the processes and the actors and returns when every process of the job has exited
// (and the actors were stopped): 0 when all exited 0, 1 when one failed (or the launcher was
// interrupted: SIGINT and SIGTERM are forwarded to every child), 2 when one could not be
// started (the others are killed). BLOCKS. Throws ConfigError for options that cannot work
// (no command, fewer than 1 process, a local replica count below 1, negative restarts) and
// Error when the store's folder cannot be made.
int run_processes(const LaunchOptions& options);

}  // namespace replicator::launch
