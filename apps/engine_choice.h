// How a `replicator` subcommand picks its engine: the environment decides (mpirun/srun →
// mpi, `replicator launch` → gloo, otherwise local), and an --engine flag may only confirm it.
#pragma once

#include <string>

#include "replicator/config.h"

namespace replicator::apps {

// Config::from_env(), after checking that `engine_flag` (empty: no flag) names the engine
// the environment selects. `command` is the subcommand as typed ("bench collectives"),
// used in the hint. Throws ConfigError saying how to start the processes otherwise.
Config config_for_engine(const std::string& engine_flag, const std::string& command);

// The Config of a training job's command line: config_for_engine, then --replicas (when
// `replicas_given`, and always on the local engine) and --timeout (when not empty). Throws
// ConfigError as config_for_engine and for a bad timeout.
Config job_config(const std::string& engine_flag, const std::string& command, bool replicas_given,
                  int replicas, const std::string& timeout);

}  // namespace replicator::apps
