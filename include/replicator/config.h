// Configuration of a Replicator: a plain struct with defaults. Environment variables and
// command-line flags are parsed in exactly one place, `Config::set`, which both
// `from_env` and the `replicator` command's flags call.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace replicator {

struct Config {
  // Number of replicas (threads) in this process.
  int local_replicas = 1;
  // Default deadline of every blocking call; a call's own `timeout` option overrides it.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // How long a replica waiting for its peers spins before it parks on a futex. When
  // there are more replicas than cores, waiting replicas yield instead of spinning.
  std::chrono::microseconds spin{50};

  // Defaults overridden by REPLICATOR_LOCAL_REPLICAS, REPLICATOR_TIMEOUT (e.g. "30s",
  // "500ms", "2m") and REPLICATOR_SPIN ("50us"). Throws ConfigError naming the variable
  // and the bad value.
  static Config from_env();

  // Sets one option by name ("local-replicas", "timeout", "spin") from its text form.
  // Throws ConfigError for an unknown name or an invalid value.
  void set(std::string_view name, std::string_view value);

  // The option names `set` accepts, with a one-line description each.
  static std::vector<std::pair<std::string, std::string>> options();

  // Throws ConfigError if a field is out of range (local_replicas < 1, timeout <= 0, ...).
  void validate() const;
};

// Parses a duration such as "250ms", "30s", "2m", "10us"; a bare number is milliseconds.
// Throws ConfigError mentioning `what` on bad input.
std::chrono::microseconds parse_duration(std::string_view text, std::string_view what);

}  // namespace replicator
