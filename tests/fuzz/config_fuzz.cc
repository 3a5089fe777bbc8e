// The Config parser (Config::set, parse_duration, Config::validate) on any text: what
// environment variables and the replicator command's flags hand it.
//
// Input: lines. "name=value" sets an option, as REPLICATOR_<NAME>=value or --name value do;
// a line without '=' is parsed as a duration. The options set are then validated.
// Promises: ConfigError naming the option (control bytes escaped), or a value in range: a
// duration from 0 to a year, a timeout of at least 1 ms, counts and ranks within their
// bounds, text options without control bytes; a failed set changes nothing.
#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>

#include "replicator/config.h"
#include "replicator/errors.h"
#include "src/base/text.h"
#include "tests/fuzz/fuzz.h"

namespace rd = replicator::detail;
using replicator::fuzz::require;

namespace {

constexpr std::chrono::microseconds kYear = std::chrono::hours(24 * 365);

bool fields_equal(const replicator::Config& a, const replicator::Config& b) {
  return a.local_replicas == b.local_replicas && a.engine == b.engine &&
         a.gloo.rank == b.gloo.rank && a.gloo.world_size == b.gloo.world_size &&
         a.gloo.store == b.gloo.store && a.gloo.host == b.gloo.host && a.gloo.job == b.gloo.job &&
         a.timeout == b.timeout && a.spin == b.spin && a.host_processes == b.host_processes;
}

void check_ranges(const replicator::Config& c) {
  require(c.local_replicas >= 1 && c.local_replicas <= 4096, "local-replicas in 1..4096");
  require(c.timeout >= std::chrono::milliseconds(1) && c.timeout <= kYear,
          "timeout in 1ms..a year");
  require(c.spin >= std::chrono::microseconds(0) && c.spin <= kYear, "spin in 0..a year");
  require(c.gloo.rank >= 0 && c.gloo.world_size >= 1 && c.host_processes >= 1,
          "counts and ranks >= 0");
  require(!c.gloo.host.empty() && !c.gloo.job.empty(), "host and job are not empty");
  require(!rd::has_control(c.gloo.host) && !rd::has_control(c.gloo.job) &&
              !rd::has_control(c.gloo.store),
          "host, job and store hold no control byte");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  replicator::Config config;
  while (!input.empty()) {
    const std::size_t end = std::min(input.find('\n'), input.size());
    const std::string_view line = input.substr(0, end);
    input.remove_prefix(std::min(end + 1, input.size()));
    const std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      try {
        const auto d = replicator::parse_duration(line, "fuzz");
        require(d >= std::chrono::microseconds(0) && d <= kYear, "a duration in 0..a year");
      } catch (const replicator::ConfigError& e) {
        require(std::string_view(e.what()).find("fuzz") != std::string_view::npos,
                "a duration's error names what was parsed");
      }
      continue;
    }
    const replicator::Config before = config;
    const std::string_view name = line.substr(0, equals);
    try {
      config.set(name, line.substr(equals + 1));
    } catch (const replicator::ConfigError& e) {
      require(std::string_view(e.what()).find(rd::quoted(name)) != std::string_view::npos,
              "an option's error names the option, control bytes escaped");
      require(fields_equal(before, config), "a failed set changes nothing");
    }
    check_ranges(config);
  }
  try {
    config.validate();
  } catch (const replicator::ConfigError&) {
  }
  return 0;
}
