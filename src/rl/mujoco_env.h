// MuJoCo's continuous-control tasks (gymnasium's, on Debian's libmujoco): built where CMake
// finds MuJoCo (REPLICATOR_HAVE_MUJOCO). The models are gymnasium's own XML files, read at
// construction from REPLICATOR_MUJOCO_ASSETS, or else from the project's .venv as found when
// the library was configured.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "replicator/rl/continuous_env.h"

namespace replicator::rl {

// The MuJoCo tasks: "half_cheetah" (HalfCheetah-v5).
const std::vector<std::string>& mujoco_env_names();

// A batch of `num_envs` copies of MuJoCo task `name`, env i seeded from (seed, i), already
// reset; null for a name that is not a MuJoCo task. Throws ConfigError where the model cannot
// be found or loaded (says where it looked), Error where MuJoCo cannot allocate.
std::unique_ptr<ContinuousEnv> make_mujoco_env(std::string_view name, int num_envs,
                                               std::uint64_t seed);

}  // namespace replicator::rl
