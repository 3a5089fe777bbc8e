#include "replicator/config.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "replicator/errors.h"

namespace replicator {
namespace {

long long parse_integer(std::string_view text, std::string_view what) {
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    throw ConfigError(std::string(what) + " must be an integer, got '" + std::string(text) + "'");
  }
  return value;
}

}  // namespace

std::chrono::microseconds parse_duration(std::string_view text, std::string_view what) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view unit = text.substr(digits);
  const auto bad = [&] {
    return ConfigError(std::string(what) +
                       " must be a duration such as 500ms, 30s, 2m or 50us, got '" +
                       std::string(text) + "'");
  };
  if (digits == 0) throw bad();
  if (digits > 15) throw bad();  // beyond any sensible duration; also keeps n·scale in range
  const long long n = parse_integer(text.substr(0, digits), what);
  long long scale = 0;  // microseconds per unit
  if (unit.empty() || unit == "ms") scale = 1000;
  if (unit == "us") scale = 1;
  if (unit == "s") scale = 1000 * 1000;
  if (unit == "m" || unit == "min") scale = 60LL * 1000 * 1000;
  if (scale == 0) throw bad();
  if (n > (365LL * 24 * 3600 * 1000 * 1000) / scale) {
    throw ConfigError(std::string(what) + " must be at most a year, got '" + std::string(text) +
                      "'");
  }
  return std::chrono::microseconds(n * scale);
}

void Config::set(std::string_view name, std::string_view value) {
  const std::string what = "option '" + std::string(name) + "'";
  if (name == "local-replicas") {
    const long long n = parse_integer(value, what);
    if (n < 1 || n > 4096) {
      throw ConfigError(what + " must be between 1 and 4096, got '" + std::string(value) + "'");
    }
    local_replicas = static_cast<int>(n);
  } else if (name == "timeout") {
    const auto d = parse_duration(value, what);
    if (d < std::chrono::milliseconds(1)) {
      throw ConfigError(what + " must be at least 1ms, got '" + std::string(value) + "'");
    }
    timeout = std::chrono::duration_cast<std::chrono::milliseconds>(d);
  } else if (name == "spin") {
    spin = parse_duration(value, what);
  } else {
    std::string known;
    for (const auto& [option, help] : options()) known += (known.empty() ? "" : ", ") + option;
    throw ConfigError("unknown option '" + std::string(name) + "'; known options: " + known);
  }
}

std::vector<std::pair<std::string, std::string>> Config::options() {
  return {{"local-replicas", "replicas (threads) in this process"},
          {"timeout", "deadline of every blocking call, e.g. 30s"},
          {"spin", "busy-wait before parking, e.g. 50us"}};
}

Config Config::from_env() {
  Config config;
  for (const auto& [option, help] : options()) {
    std::string var = "REPLICATOR_";
    for (const char c : option) var += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    if (const char* value = std::getenv(var.c_str())) {
      try {
        config.set(option, value);
      } catch (const ConfigError& e) {
        throw ConfigError("environment variable " + var + ": " + e.what());
      }
    }
  }
  config.validate();
  return config;
}

void Config::validate() const {
  if (local_replicas < 1) {
    throw ConfigError("local_replicas must be at least 1, got " + std::to_string(local_replicas));
  }
  if (timeout.count() <= 0) {
    throw ConfigError("timeout must be positive, got " + std::to_string(timeout.count()) + "ms");
  }
  if (spin.count() < 0) {
    throw ConfigError("spin must not be negative, got " + std::to_string(spin.count()) + "us");
  }
}

}  // namespace replicator
