#include "replicator/config.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "replicator/device.h"
#include "replicator/errors.h"
#include "src/base/launch_env.h"
#include "src/base/text.h"

namespace replicator {
namespace {

long long parse_integer(std::string_view text, std::string_view what) {
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    throw ConfigError(std::string(what) + " must be an integer, got " + detail::quoted(text));
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
                       " must be a duration such as 500ms, 30s, 2m or 50us, got " +
                       detail::quoted(text));
  };
  if (digits == 0) throw bad();
  if (digits > 15) throw bad();  // beyond any sensible duration; also keeps n·scale in range
  const long long n = parse_integer(text.substr(0, digits), what);
  long long scale = 0;  // microseconds per unit
  if (unit.empty() || unit == "ms") scale = 1000;
  if (unit == "us") scale = 1;
  if (unit == "s") scale = 1000LL * 1000;
  if (unit == "m" || unit == "min") scale = 60LL * 1000 * 1000;
  if (scale == 0) throw bad();
  if (n > (365LL * 24 * 3600 * 1000 * 1000) / scale) {
    throw ConfigError(std::string(what) + " must be at most a year, got " + detail::quoted(text));
  }
  return std::chrono::microseconds(n * scale);
}

// A duration, or "off" (negative: the straggler watch is off).
std::chrono::milliseconds parse_straggler_after(std::string_view value, std::string_view what) {
  if (value == "off") return std::chrono::milliseconds(-1);
  return std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(value, what));
}

Engine parse_engine(std::string_view value, const std::string& what) {
  if (value == "local") return Engine::kLocal;
  if (value == "mpi") return Engine::kMpi;
  if (value == "gloo") return Engine::kGloo;
  throw ConfigError(what + " must be local, mpi or gloo, got " + detail::quoted(value));
}

void Config::set(std::string_view name, std::string_view value) {
  const std::string what = "option " + detail::quoted(name);
  if (name == "local-replicas") {
    const long long n = parse_integer(value, what);
    if (n < 1 || n > 4096) {
      throw ConfigError(what + " must be between 1 and 4096, got " + detail::quoted(value));
    }
    local_replicas = static_cast<int>(n);
  } else if (name == "timeout") {
    const auto d = parse_duration(value, what);
    if (d < std::chrono::milliseconds(1)) {
      throw ConfigError(what + " must be at least 1ms, got " + detail::quoted(value));
    }
    timeout = std::chrono::duration_cast<std::chrono::milliseconds>(d);
  } else if (name == "spin") {
    spin = parse_duration(value, what);
  } else if (name == "host-processes") {
    const long long n = parse_integer(value, what);
    if (n < 1 || n > 1'000'000) {
      throw ConfigError(what + " must be a process count >= 1, got " + detail::quoted(value));
    }
    host_processes = static_cast<int>(n);
  } else if (name == "devices") {
    try {
      parse_devices(value);
    } catch (const ConfigError&) {
      throw ConfigError(what + " must be host, cuda, cuda:N or fake:N (N devices, 1 to 64), got " +
                        detail::quoted(value));
    }
    devices = std::string(value);
  } else if (name == "engine") {
    engine = parse_engine(value, what);
  } else if (name == "rank") {
    const long long n = parse_integer(value, what);
    if (n < 0 || n > 1'000'000) {
      throw ConfigError(what + " must be a process rank >= 0, got " + detail::quoted(value));
    }
    gloo.rank = static_cast<int>(n);
  } else if (name == "world-size") {
    const long long n = parse_integer(value, what);
    if (n < 1 || n > 1'000'000) {
      throw ConfigError(what + " must be a process count >= 1, got " + detail::quoted(value));
    }
    gloo.world_size = static_cast<int>(n);
  } else if (name == "store") {
    if (!value.starts_with("file://") && !value.starts_with("redis://")) {
      throw ConfigError(what + " must be file:///shared/dir or redis://host:port, got " +
                        detail::quoted(value));
    }
    if (detail::has_control(value)) {
      throw ConfigError(what + " must not hold control characters, got " + detail::quoted(value));
    }
    gloo.store = value;
  } else if (name == "host" || name == "job") {
    // Handed on as C strings (an address to connect to, key names in the store): a NUL would
    // cut them short, other control bytes make names no one can type.
    if (value.empty()) throw ConfigError(what + " must not be empty");
    if (detail::has_control(value)) {
      throw ConfigError(what + " must not hold control characters, got " + detail::quoted(value));
    }
    (name == "host" ? gloo.host : gloo.job) = value;
  } else if (name == "generation") {
    const long long n = parse_integer(value, what);
    if (n < -1 || n > 1'000'000'000) {
      throw ConfigError(what + " must be a generation >= 0 (or -1), got " + detail::quoted(value));
    }
    elastic.generation = static_cast<int>(n);
  } else if (name == "restart-count") {
    const long long n = parse_integer(value, what);
    if (n < 0 || n > 1'000'000'000) {
      throw ConfigError(what + " must be a count >= 0, got " + detail::quoted(value));
    }
    elastic.restart_count = static_cast<int>(n);
  } else if (name == "heartbeat") {
    elastic.heartbeat =
        std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(value, what));
  } else if (name == "heartbeat-store") {
    if (!value.starts_with("file://") && !value.starts_with("redis://")) {
      throw ConfigError(what + " must be file:///shared/dir/job or redis://host:port/job, got " +
                        detail::quoted(value));
    }
    if (detail::has_control(value)) {
      throw ConfigError(what + " must not hold control characters, got " + detail::quoted(value));
    }
    elastic.heartbeat_store = value;
  } else if (name == "straggler-after") {
    trace.straggler_after = parse_straggler_after(value, what);
  } else if (name == "flight-recorder-size") {
    const long long n = parse_integer(value, what);
    if (n < 0 || n > (1 << 20)) {
      throw ConfigError(what + " must be between 0 (off) and 1048576 collectives, got " +
                        detail::quoted(value));
    }
    trace.flight_recorder_size = static_cast<int>(n);
  } else if (name == "calibration") {
    if (detail::has_control(value)) {
      throw ConfigError(what + " must not hold control characters, got " + detail::quoted(value));
    }
    transport.calibration = value;
  } else if (name == "trace-dir" || name == "timeline") {
    // Paths, handed on as C strings: a NUL would cut them short.
    if (value.empty()) throw ConfigError(what + " must not be empty");
    if (detail::has_control(value)) {
      throw ConfigError(what + " must not hold control characters, got " + detail::quoted(value));
    }
    (name == "trace-dir" ? trace.dir : trace.timeline) = value;
  } else if (name == "trace-signal" || name == "shared-memory") {
    bool on = false;
    if (value == "on" || value == "1" || value == "true") {
      on = true;
    } else if (value != "off" && value != "0" && value != "false") {
      throw ConfigError(what + " must be on or off, got " + detail::quoted(value));
    }
    (name == "trace-signal" ? trace.signal : transport.shared_memory) = on;
  } else {
    std::string known;
    for (const auto& [option, help] : options()) known += (known.empty() ? "" : ", ") + option;
    throw ConfigError("unknown option " + detail::quoted(name) + "; known options: " + known);
  }
}

std::vector<std::pair<std::string, std::string>> Config::options() {
  return {
      {"local-replicas", "replicas (threads) in this process"},
      {"timeout", "deadline of every blocking call, e.g. 30s"},
      {"spin", "busy-wait before parking, e.g. 50us"},
      {"host-processes", "processes of this job on this host"},
      {"engine", "local, mpi or gloo"},
      {"devices", "where replicas run: host, fake:N, cuda or cuda:N (replica r: device r mod N)"},
      {"rank", "gloo: this process's rank"},
      {"world-size", "gloo: number of processes"},
      {"store", "gloo: rendezvous, file:///shared/dir or redis://host:port"},
      {"host", "gloo: address the other processes reach this one at"},
      {"job", "gloo: job name, keeps jobs sharing a store apart"},
      {"shared-memory", "on or off: processes on one host talk through shared memory"},
      {"calibration", "folder that keeps the transport's measured costs, or off"},
      {"generation", "elastic jobs: the generation of this process (set by the agent)"},
      {"restart-count", "elastic jobs: restarts before this generation (set by the agent)"},
      {"heartbeat", "elastic jobs: interval of the heartbeat the agent watches, e.g. 1s"},
      {"heartbeat-store", "elastic jobs: where the heartbeat goes (set by the agent)"},
      {"flight-recorder-size", "collectives each replica's flight recorder keeps, 0: off"},
      {"trace-dir", "folder for flight-recorder dumps (JSON)"},
      {"timeline", "Chrome trace-event JSON file of every step and collective"},
      {"trace-signal", "on or off: SIGUSR1 dumps the flight recorder"},
      {"straggler-after", "wait that names the missing replicas, e.g. 5s, or off"}};
}

std::chrono::milliseconds Config::straggler_limit() const {
  using std::chrono::milliseconds;
  if (trace.straggler_after.count() < 0) return milliseconds(0);
  if (trace.straggler_after.count() > 0) return trace.straggler_after;
  return std::min<milliseconds>(timeout / 4, std::chrono::seconds(5));
}

Config Config::from_env() {
  Config config;
  // A process started by an MPI launcher runs on the mpi engine unless told otherwise.
  if (detail::launched_by_mpi()) config.engine = Engine::kMpi;
  // ... and tells how many of its processes share this host.
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = detail::env(var)) config.set("host-processes", value);
  }
  for (const auto& [option, help] : options()) {
    std::string var = "REPLICATOR_";
    for (const char c : option) var += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    if (const char* value = detail::env(var.c_str())) {
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
  if (trace.flight_recorder_size < 0) {
    throw ConfigError("flight_recorder_size must not be negative, got " +
                      std::to_string(trace.flight_recorder_size));
  }
  parse_devices(devices);
  if (spin.count() < 0) {
    throw ConfigError("spin must not be negative, got " + std::to_string(spin.count()) + "us");
  }
  if (engine == Engine::kGloo) {
    if (gloo.store.empty()) {
      throw ConfigError(
          "the gloo engine needs a rendezvous store: set REPLICATOR_STORE (or "
          "--store) to file:///shared/dir or redis://host:port, or start the "
          "processes with `replicator launch`");
    }
    if (gloo.rank >= gloo.world_size) {
      throw ConfigError("rank " + std::to_string(gloo.rank) + " is not below world-size " +
                        std::to_string(gloo.world_size));
    }
  }
  if (elastic.generation >= 0 && engine != Engine::kGloo) {
    throw ConfigError(
        "this process belongs to generation " + std::to_string(elastic.generation) +
        " of an elastic job (`replicator launch --nnodes` or --max-restarts), which runs on the "
        "gloo engine only, not on " +
        std::string(to_string(engine)) +
        ": mpirun cannot replace a lost process; leave out the engine choice, or start a job "
        "that is not elastic");
  }
  if (elastic.heartbeat.count() > 0 && elastic.heartbeat_store.empty()) {
    throw ConfigError(
        "a heartbeat needs its store: set REPLICATOR_HEARTBEAT_STORE (the agent "
        "of an elastic job sets both)");
  }
  if (elastic.heartbeat.count() < 0) throw ConfigError("heartbeat must not be negative");
#if !defined(REPLICATOR_HAVE_MPI)
  if (engine == Engine::kMpi) {
    throw ConfigError(
        "the mpi engine is not part of this build (OpenMPI was not found when "
        "it was built); use engine gloo or local");
  }
#endif
#if !defined(REPLICATOR_HAVE_GLOO)
  if (engine == Engine::kGloo) {
    throw ConfigError(
        "the gloo engine is not part of this build (Gloo was not found when it "
        "was built); use engine mpi or local");
  }
#endif
}

std::string_view to_string(Engine engine) {
  switch (engine) {
    case Engine::kLocal:
      return "local";
    case Engine::kMpi:
      return "mpi";
    case Engine::kGloo:
      return "gloo";
  }
  return "?";
}

}  // namespace replicator
