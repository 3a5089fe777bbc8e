#include "apps/engine_choice.h"

#include <cstdlib>
#include <string>

#include "replicator/errors.h"

namespace replicator::apps {
namespace {

// Why the environment selects `engine`, for the error about a contradicting --engine.
std::string engine_source(Engine engine) {
  if (const char* value = std::getenv("REPLICATOR_ENGINE")) {
    return "REPLICATOR_ENGINE=" + std::string(value) +
           (engine == Engine::kGloo ? ", as `replicator launch` sets it" : "");
  }
  if (engine == Engine::kMpi) return "this process was started by mpirun or srun";
  return "this process was started by neither mpirun nor `replicator launch`";
}

std::string engine_howto(const std::string& engine, const std::string& command) {
  if (engine == "mpi") {
    return "start the processes with mpirun, e.g. `mpirun -np 2 replicator " + command + " ...`";
  }
  if (engine == "gloo") {
    return "start the processes with the launcher, e.g. `replicator launch -n 2 -- replicator " +
           command + " ...`";
  }
  return "run the command directly, without mpirun or `replicator launch`";
}

}  // namespace

Config config_for_engine(const std::string& engine_flag, const std::string& command) {
  Config config = Config::from_env();
  const std::string picked(to_string(config.engine));
  if (!engine_flag.empty() && engine_flag != picked) {
    throw ConfigError("--engine " + engine_flag +
                      " contradicts the environment, which selects the " + picked + " engine (" +
                      engine_source(config.engine) + "); for " + engine_flag + ", " +
                      engine_howto(engine_flag, command) + "; or leave out --engine");
  }
  return config;
}

Config job_config(const std::string& engine_flag, const std::string& command, bool replicas_given,
                  int replicas, const std::string& timeout) {
  Config config = config_for_engine(engine_flag, command);
  if (replicas_given || config.engine == Engine::kLocal) {
    config.set("local-replicas", std::to_string(replicas));
  }
  if (!timeout.empty()) config.set("timeout", timeout);
  return config;
}

}  // namespace replicator::apps
