// The elastic agent (torchrun's model, over our store), as `replicator launch --nnodes
// MIN:MAX` runs it and as a program may call it: one agent per host starts that host's
// workers, and the agents of a job agree on who takes part through the rendezvous store
// (replicator/rendezvous/store.h).
//
// The job runs in generations. Agents join generation g; it starts once MIN agents joined
// and either MAX, or every agent of generation g-1, joined or `last_call` passed. Its
// members get consecutive process ranks (agent slot x processes per host). Every worker sees
// REPLICATOR_GENERATION and REPLICATOR_RESTART_COUNT, meets the others in a key space of its
// generation (the keys of the generation before are deleted when a new one starts), and
// beats a heartbeat through the store.
//
// A generation ends for all when a worker exits non-zero or dies, a worker's heartbeat stops
// for `heartbeat_timeout` (a stopped or wedged process: it is killed), an agent's heartbeat
// stops (a lost host), an agent is interrupted (SIGINT/SIGTERM), or a new host waits to join
// while fewer than MAX take part. Every agent then stops its workers (SIGTERM, SIGKILL 2 s
// later) and joins generation g+1, with the hosts still present. A failure counts against
// `max_restarts`; a host joining does not. The job is done when every worker of a generation
// exited 0.
//
// With REPLICATOR_TRACE_DIR set for the agent, each generation's workers write their
// flight-recorder dumps to its folder generation<g>, and when a generation ends the agent
// says the verdict of the dumps on its host (replicator/launch/diagnose.h).
//
// Elastic jobs run on the gloo engine only: the agent refuses to run under mpirun or with
// REPLICATOR_ENGINE set to another engine, and a worker of an elastic job asked for another
// engine fails with ConfigError.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace replicator::launch {

struct ElasticOptions {
  int min_hosts = 1;
  int max_hosts = 1;
  int processes = 1;  // workers on this host
  std::optional<int> local_replicas;
  std::string host;  // REPLICATOR_HOST of this host's workers; empty: the library's default
  std::vector<std::string> command;
  int max_restarts = 3;
  std::string rdzv;  // file:///shared/folder/job or redis://host:port/job; empty: a fresh
                     // folder on this host (one host only)
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds heartbeat_timeout{10000};
  std::chrono::milliseconds rdzv_timeout{300000};
  std::chrono::milliseconds last_call{3000};
};

// The hosts of an elastic job from "N" (min = max = N) or "MIN:MAX" (`--nnodes`), as
// {min, max}. Never blocks. Throws ConfigError unless 1 <= MIN <= MAX (numbers of at most 6
// digits).
std::pair<int, int> parse_host_range(const std::string& text);

// Runs this host's agent until the job is done (returns 0), gives up (1: restarts used up,
// fewer than MIN hosts within `rdzv_timeout`), or is interrupted (128 + the signal). Prints
// one line per generation and per failure on stderr, and the workers' output prefixed with
// their rank. BLOCKS. Throws ConfigError for options that cannot work (an elastic job on
// mpi, a missing --rdzv with more than one host, an unusable store).
int run_elastic(const ElasticOptions& options);

}  // namespace replicator::launch
