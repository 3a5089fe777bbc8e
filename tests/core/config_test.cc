// Tests of Config: the one place where options are parsed (set, from_env, parse_duration)
// and checked (validate). Every bad value must give a ConfigError whose message names the
// option and the value.
#include "replicator/config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "replicator/replicator.h"

// Checks that `haystack` contains `needle` (gtest's own substring predicate, no gmock).
#define EXPECT_HAS_SUBSTR(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

namespace replicator {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// The message of the ConfigError that `fn` throws; fails the test if it throws nothing or
// something else.
template <typename Fn>
std::string config_error_message(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return {};
}

// Sets (or unsets) one environment variable for the lifetime of the object and restores its
// previous state afterwards. Only this file's from_env tests use it: they test the
// environment parser itself, on the test thread, while no Replicator (no other thread) is
// alive, so the process-wide environment is not raced.
// NOLINTBEGIN(concurrency-mt-unsafe)
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      setenv(name_.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};
// NOLINTEND(concurrency-mt-unsafe)

// Clears every REPLICATOR_ variable that from_env reads, so a test sees only what it sets.
struct CleanEnv {
  ScopedEnv local{"REPLICATOR_LOCAL_REPLICAS", std::nullopt};
  ScopedEnv timeout{"REPLICATOR_TIMEOUT", std::nullopt};
  ScopedEnv spin{"REPLICATOR_SPIN", std::nullopt};
  ScopedEnv recorder{"REPLICATOR_FLIGHT_RECORDER_SIZE", std::nullopt};
  ScopedEnv trace_dir{"REPLICATOR_TRACE_DIR", std::nullopt};
  ScopedEnv timeline{"REPLICATOR_TIMELINE", std::nullopt};
  ScopedEnv trace_signal{"REPLICATOR_TRACE_SIGNAL", std::nullopt};
  ScopedEnv shared_memory{"REPLICATOR_SHARED_MEMORY", std::nullopt};
};

// ---- defaults and options() -------------------------------------------------------------

TEST(ConfigTest, DefaultsAreValid) {
  const Config config;
  EXPECT_EQ(config.local_replicas, 1);
  EXPECT_EQ(config.timeout, std::chrono::minutes(5));
  EXPECT_EQ(config.spin, microseconds(50));
  EXPECT_NO_THROW(config.validate());
}

TEST(ConfigTest, OptionsListsEveryNameSetAccepts) {
  std::vector<std::string> names;
  for (const auto& [name, help] : Config::options()) {
    names.push_back(name);
    EXPECT_FALSE(help.empty()) << name;
  }
  const std::vector<std::string> expected = {"local-replicas",
                                             "timeout",
                                             "spin",
                                             "host-processes",
                                             "engine",
                                             "devices",
                                             "rank",
                                             "world-size",
                                             "store",
                                             "host",
                                             "job",
                                             "shared-memory",
                                             "calibration",
                                             "generation",
                                             "restart-count",
                                             "heartbeat",
                                             "heartbeat-store",
                                             "flight-recorder-size",
                                             "trace-dir",
                                             "timeline",
                                             "trace-signal",
                                             "straggler-after"};
  EXPECT_EQ(names, expected);
}

TEST(ConfigTest, StragglerAfterIsADurationOrOff) {
  Config config;
  config.set("straggler-after", "1500ms");
  EXPECT_EQ(config.trace.straggler_after, std::chrono::milliseconds(1500));
  config.set("straggler-after", "off");
  EXPECT_EQ(config.straggler_limit(), std::chrono::milliseconds(0));
  EXPECT_THROW(config.set("straggler-after", "soon"), ConfigError);
}

TEST(ConfigTest, CalibrationIsAFolderOrOff) {
  Config config;
  EXPECT_EQ(config.transport.calibration, "");  // the user's cache folder
  config.set("calibration", "off");
  EXPECT_EQ(config.transport.calibration, "off");
  config.set("calibration", "/tmp/costs");
  EXPECT_EQ(config.transport.calibration, "/tmp/costs");
  EXPECT_HAS_SUBSTR(config_error_message([&] { config.set("calibration", "a\nb"); }),
                    "option 'calibration' must not hold control characters");
}

TEST(ConfigTest, ElasticJobsRunOnGlooOnly) {
  Config config;
  config.set("generation", "2");
  config.set("restart-count", "1");
  EXPECT_EQ(config.elastic.generation, 2);
  EXPECT_EQ(config.elastic.restart_count, 1);
  for (const char* engine : {"local", "mpi"}) {
    config.set("engine", engine);
    const std::string message = config_error_message([&] { config.validate(); });
    EXPECT_HAS_SUBSTR(message, "generation 2 of an elastic job");
    EXPECT_HAS_SUBSTR(message, "gloo engine only, not on " + std::string(engine));
  }
  config.set("engine", "gloo");
  config.set("store", "file:///tmp/rendezvous");
#if defined(REPLICATOR_HAVE_GLOO)
  EXPECT_NO_THROW(config.validate());
#else
  EXPECT_HAS_SUBSTR(config_error_message([&] { config.validate(); }), "not part of this build");
#endif
  config.set("generation", "-1");  // not elastic: any engine
  config.set("engine", "local");
  EXPECT_NO_THROW(config.validate());
  EXPECT_THROW(config.set("generation", "-2"), ConfigError);
  EXPECT_THROW(config.set("restart-count", "-1"), ConfigError);
}

TEST(ConfigTest, HeartbeatNeedsItsStore) {
  Config config;
  config.set("heartbeat", "250ms");
  EXPECT_EQ(config.elastic.heartbeat, milliseconds(250));
  EXPECT_HAS_SUBSTR(config_error_message([&] { config.validate(); }), "REPLICATOR_HEARTBEAT_STORE");
  config.set("heartbeat-store", "file:///tmp/job/gen0");
  EXPECT_NO_THROW(config.validate());
  EXPECT_HAS_SUBSTR(config_error_message([&] { config.set("heartbeat-store", "/tmp/x"); }),
                    "redis://host:port/job");
  EXPECT_THROW(config.set("heartbeat", "soon"), ConfigError);
}

TEST(ConfigTest, EngineOptions) {
  Config config;
  config.set("engine", "gloo");
  EXPECT_EQ(config.engine, Engine::kGloo);
  EXPECT_THROW(config.validate(), ConfigError);  // gloo needs a store
  config.set("store", "file:///tmp/rendezvous");
  config.set("world-size", "2");
  config.set("rank", "1");
  EXPECT_EQ(config.gloo.rank, 1);
  EXPECT_EQ(config.gloo.world_size, 2);
  config.set("rank", "2");
  EXPECT_THROW(config.validate(), ConfigError);  // rank must be below world-size
  EXPECT_THROW(config.set("engine", "nccl"), ConfigError);
  EXPECT_THROW(config.set("store", "tcp://host:1"), ConfigError);
  EXPECT_THROW(config.set("world-size", "0"), ConfigError);
  try {
    config.set("store", "/tmp/x");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("redis://host:port"), std::string::npos) << e.what();
  }
}

// A value is shown with its control bytes escaped: a NUL would end what() early. Text that
// is handed on (store, host, job) holds none.
TEST(ConfigTest, ControlBytesAreEscapedInErrorsAndRefusedInText) {
  Config config;
  try {
    config.set(std::string_view("time\0out", 8), "1s");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option 'time\\x00out'"), std::string::npos)
        << e.what();
  }
  for (const char* name : {"store", "host", "job"}) {
    const std::string value =
        std::string(name == std::string("store") ? "file:///tmp/a" : "a") + "\nb";
    try {
      config.set(name, value);
      ADD_FAILURE() << name << " took a newline";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("must not hold control characters"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("\\x0ab'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(config.gloo.host, Config{}.gloo.host);
  EXPECT_EQ(config.gloo.job, Config{}.gloo.job);
  EXPECT_TRUE(config.gloo.store.empty());
}

// ---- parse_duration ---------------------------------------------------------------------

TEST(ParseDurationTest, AcceptsEveryUnit) {
  EXPECT_EQ(parse_duration("10us", "x"), microseconds(10));
  EXPECT_EQ(parse_duration("250ms", "x"), milliseconds(250));
  EXPECT_EQ(parse_duration("30s", "x"), std::chrono::seconds(30));
  EXPECT_EQ(parse_duration("2m", "x"), std::chrono::minutes(2));
  EXPECT_EQ(parse_duration("2min", "x"), std::chrono::minutes(2));
  EXPECT_EQ(parse_duration("0s", "x"), microseconds(0));
}

TEST(ParseDurationTest, BareNumberIsMilliseconds) {
  EXPECT_EQ(parse_duration("7", "x"), milliseconds(7));
  EXPECT_EQ(parse_duration("0", "x"), microseconds(0));
}

TEST(ParseDurationTest, RejectsMalformedTextNamingWhatAndValue) {
  for (const std::string bad : {"", "ms", "-1", "-5s", "1x", "5h", " 1s", "1 s", "1.5s", "1e3",
                                "s10", "+3s", "10sec", "0x10"}) {
    const std::string message =
        config_error_message([&] { parse_duration(bad, "option 'what-it-is'"); });
    EXPECT_HAS_SUBSTR(message, "option 'what-it-is'") << "input '" << bad << "'";
    EXPECT_HAS_SUBSTR(message, "'" + bad + "'") << "input '" << bad << "'";
  }
}

TEST(ParseDurationTest, RejectsNumberTooLargeForAnInteger) {
  const std::string message =
      config_error_message([] { parse_duration("99999999999999999999ms", "option 'timeout'"); });
  EXPECT_HAS_SUBSTR(message, "option 'timeout'");
  EXPECT_HAS_SUBSTR(message, "99999999999999999999");
}

// A count that fits in 64 bits but whose conversion to microseconds does not must be
// rejected, not wrapped around: 2^63-1 ms is 2^63-1 * 1000 us, beyond any int64.
TEST(ParseDurationTest, RejectsDurationThatOverflowsMicroseconds) {
  for (const std::string bad : {"9223372036854775807ms", "20000000000000s", "200000000000000m"}) {
    const std::string message = config_error_message([&] { parse_duration(bad, "option 'spin'"); });
    EXPECT_HAS_SUBSTR(message, "option 'spin'") << bad;
    EXPECT_HAS_SUBSTR(message, bad) << bad;
  }
}

// ---- Config::set ------------------------------------------------------------------------

TEST(ConfigSetTest, SetsLocalReplicas) {
  Config config;
  config.set("local-replicas", "8");
  EXPECT_EQ(config.local_replicas, 8);
  config.set("local-replicas", "1");
  EXPECT_EQ(config.local_replicas, 1);
  config.set("local-replicas", "4096");
  EXPECT_EQ(config.local_replicas, 4096);
}

TEST(ConfigSetTest, SetsTimeoutInAnyUnit) {
  Config config;
  config.set("timeout", "30s");
  EXPECT_EQ(config.timeout, milliseconds(30000));
  config.set("timeout", "500ms");
  EXPECT_EQ(config.timeout, milliseconds(500));
  config.set("timeout", "2m");
  EXPECT_EQ(config.timeout, milliseconds(120000));
  config.set("timeout", "250");
  EXPECT_EQ(config.timeout, milliseconds(250));
  config.set("timeout", "1000us");
  EXPECT_EQ(config.timeout, milliseconds(1));
}

TEST(ConfigSetTest, SetsSpin) {
  Config config;
  config.set("spin", "50us");
  EXPECT_EQ(config.spin, microseconds(50));
  config.set("spin", "0us");
  EXPECT_EQ(config.spin, microseconds(0));
  config.set("spin", "2ms");
  EXPECT_EQ(config.spin, microseconds(2000));
}

TEST(ConfigSetTest, BadLocalReplicasNamesOptionAndValue) {
  for (const std::string bad : {"0", "-1", "4097", "abc", "", "3.5", "8 ", " 8", "1e2"}) {
    Config config;
    const std::string message = config_error_message([&] { config.set("local-replicas", bad); });
    EXPECT_HAS_SUBSTR(message, "local-replicas") << "value '" << bad << "'";
    EXPECT_HAS_SUBSTR(message, bad) << "value '" << bad << "'";
    EXPECT_EQ(config.local_replicas, 1) << "a rejected value must leave the field unchanged";
  }
}

TEST(ConfigSetTest, BadTimeoutNamesOptionAndValue) {
  for (const std::string bad : {"0", "0s", "999us", "soon", "", "-3s", "5h", "1.5s"}) {
    Config config;
    const std::string message = config_error_message([&] { config.set("timeout", bad); });
    EXPECT_HAS_SUBSTR(message, "timeout") << "value '" << bad << "'";
    EXPECT_HAS_SUBSTR(message, "'" + bad + "'") << "value '" << bad << "'";
    EXPECT_EQ(config.timeout, std::chrono::minutes(5));
  }
}

TEST(ConfigSetTest, BadSpinNamesOptionAndValue) {
  for (const std::string bad : {"fast", "-1us", "", "1.5us"}) {
    Config config;
    const std::string message = config_error_message([&] { config.set("spin", bad); });
    EXPECT_HAS_SUBSTR(message, "spin") << "value '" << bad << "'";
    EXPECT_HAS_SUBSTR(message, "'" + bad + "'") << "value '" << bad << "'";
    EXPECT_EQ(config.spin, microseconds(50));
  }
}

TEST(ConfigSetTest, UnknownOptionIsNamedAndKnownOnesListed) {
  Config config;
  const std::string message = config_error_message([&] { config.set("replicas", "4"); });
  EXPECT_HAS_SUBSTR(message, "'replicas'");
  EXPECT_HAS_SUBSTR(message, "local-replicas");
  EXPECT_HAS_SUBSTR(message, "timeout");
  EXPECT_HAS_SUBSTR(message, "spin");
}

TEST(ConfigSetTest, OptionNamesAreExact) {
  Config config;
  EXPECT_THROW(config.set("Timeout", "1s"), ConfigError);
  EXPECT_THROW(config.set("local_replicas", "2"), ConfigError);
  EXPECT_THROW(config.set("", "2"), ConfigError);
}

// ---- validate ---------------------------------------------------------------------------

TEST(ConfigValidateTest, RejectsNonPositiveLocalReplicas) {
  for (const int bad : {0, -1}) {
    Config config;
    config.local_replicas = bad;
    const std::string message = config_error_message([&] { config.validate(); });
    EXPECT_HAS_SUBSTR(message, "local_replicas");
    EXPECT_HAS_SUBSTR(message, std::to_string(bad));
  }
}

TEST(ConfigValidateTest, RejectsNonPositiveTimeout) {
  for (const int bad : {0, -5}) {
    Config config;
    config.timeout = milliseconds(bad);
    const std::string message = config_error_message([&] { config.validate(); });
    EXPECT_HAS_SUBSTR(message, "timeout");
    EXPECT_HAS_SUBSTR(message, std::to_string(bad) + "ms");
  }
}

TEST(ConfigValidateTest, RejectsNegativeSpin) {
  Config config;
  config.spin = microseconds(-1);
  const std::string message = config_error_message([&] { config.validate(); });
  EXPECT_HAS_SUBSTR(message, "spin");
  EXPECT_HAS_SUBSTR(message, "-1us");
}

TEST(ConfigValidateTest, AcceptsZeroSpinAndOneMillisecondTimeout) {
  Config config;
  config.spin = microseconds(0);
  config.timeout = milliseconds(1);
  EXPECT_NO_THROW(config.validate());
}

TEST(ConfigValidateTest, ReplicatorConstructorRejectsBadConfig) {
  Config config;
  config.local_replicas = 0;
  EXPECT_THROW(Replicator{config}, ConfigError);
  config.local_replicas = 2;
  config.timeout = milliseconds(0);
  EXPECT_THROW(Replicator{config}, ConfigError);
}

// ---- from_env ---------------------------------------------------------------------------

TEST(ConfigFromEnvTest, NoVariablesGiveDefaults) {
  const CleanEnv clean;
  const Config config = Config::from_env();
  EXPECT_EQ(config.local_replicas, Config{}.local_replicas);
  EXPECT_EQ(config.timeout, Config{}.timeout);
  EXPECT_EQ(config.spin, Config{}.spin);
}

TEST(ConfigFromEnvTest, ReadsEveryVariable) {
  const CleanEnv clean;
  const ScopedEnv local("REPLICATOR_LOCAL_REPLICAS", "3");
  const ScopedEnv timeout("REPLICATOR_TIMEOUT", "750ms");
  const ScopedEnv spin("REPLICATOR_SPIN", "0us");
  const ScopedEnv recorder("REPLICATOR_FLIGHT_RECORDER_SIZE", "64");
  const ScopedEnv trace_dir("REPLICATOR_TRACE_DIR", "/tmp/dumps");
  const ScopedEnv timeline("REPLICATOR_TIMELINE", "run.json");
  const ScopedEnv trace_signal("REPLICATOR_TRACE_SIGNAL", "off");
  const ScopedEnv shared_memory("REPLICATOR_SHARED_MEMORY", "off");
  const Config config = Config::from_env();
  EXPECT_EQ(config.local_replicas, 3);
  EXPECT_EQ(config.timeout, milliseconds(750));
  EXPECT_EQ(config.spin, microseconds(0));
  EXPECT_EQ(config.trace.flight_recorder_size, 64);
  EXPECT_EQ(config.trace.dir, "/tmp/dumps");
  EXPECT_EQ(config.trace.timeline, "run.json");
  EXPECT_FALSE(config.trace.signal);
  EXPECT_FALSE(config.transport.shared_memory);
}

TEST(ConfigFromEnvTest, BadValueNamesVariableAndValue) {
  const struct {
    const char* variable;
    const char* value;
  } cases[] = {{"REPLICATOR_LOCAL_REPLICAS", "many"},
               {"REPLICATOR_LOCAL_REPLICAS", "0"},
               {"REPLICATOR_TIMEOUT", "soon"},
               {"REPLICATOR_TIMEOUT", "0ms"},
               {"REPLICATOR_SPIN", "forever"},
               {"REPLICATOR_TIMEOUT", ""},
               {"REPLICATOR_FLIGHT_RECORDER_SIZE", "-1"},
               {"REPLICATOR_FLIGHT_RECORDER_SIZE", "lots"},
               {"REPLICATOR_TRACE_SIGNAL", "sometimes"}};
  for (const auto& c : cases) {
    const CleanEnv clean;
    const ScopedEnv bad(c.variable, c.value);
    const std::string message = config_error_message([] { Config::from_env(); });
    EXPECT_HAS_SUBSTR(message, c.variable) << c.variable << "=" << c.value;
    // The value appears quoted ('soon') or as the last word of the message ("got 0").
    const std::string value = c.value;
    const bool quoted = message.find("'" + value + "'") != std::string::npos;
    const bool last_word =
        message.size() > value.size() &&
        message.compare(message.size() - value.size() - 1, std::string::npos, " " + value) == 0;
    EXPECT_TRUE(quoted || last_word) << c.variable << "=" << c.value << ": " << message;
  }
}

}  // namespace
}  // namespace replicator
