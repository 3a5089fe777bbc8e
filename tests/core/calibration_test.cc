// The job's calibration (src/runtime/calibration.h): its file (text, key, age), where it is
// kept, and the collective that measures or reads it, over the in-memory network.
#include "src/runtime/calibration.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/collectives/fake_transport.h"
#include "tests/harness/harness.h"

namespace replicator::detail {
namespace {

using std::chrono::hours;
using std::chrono::system_clock;

TransportCosts some_costs() {
  TransportCosts c;
  for (std::size_t i = 0; i < kCostBytes.size(); ++i) {
    c.exchange_s[i] = 1e-6 * static_cast<double>(i + 1) / 3;  // not a short decimal
    c.stepped_s[i] = 1e-6 * static_cast<double>(i + 2) / 7;
    c.native_s[i] = 2e-6 * static_cast<double>(i + 1);
    c.reduce_s[i] = 1e-7 * static_cast<double>(i + 1);
  }
  return c;
}

bool same(const TransportCosts& a, const TransportCosts& b) {
  return a.exchange_s == b.exchange_s && a.stepped_s == b.stepped_s && a.native_s == b.native_s &&
         a.reduce_s == b.reduce_s;
}

// A fresh folder under the test's temporary directory.
std::filesystem::path fresh_folder(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("replicator-calibration-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CalibrationFileTest, ReadsBackWhatItWroteForItsKeyForADay) {
  const auto now = system_clock::now();
  const TransportCosts costs = some_costs();
  const std::string text = format_calibration("mpi P=2", costs, now);
  const auto read = parse_calibration(text, "mpi P=2", now + hours(1));
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(same(*read, costs));  // every double exactly
  // Another job's key, a day later, or from the future: not this job's calibration.
  EXPECT_FALSE(parse_calibration(text, "mpi P=3", now).has_value());
  EXPECT_FALSE(parse_calibration(text, "mpi P=2", now + hours(25)).has_value());
  EXPECT_FALSE(parse_calibration(text, "mpi P=2", now - hours(1)).has_value());
}

TEST(CalibrationFileTest, RefusesTextThatIsNotAWholeCalibration) {
  const auto now = system_clock::now();
  const std::string good = format_calibration("k", some_costs(), now);
  ASSERT_TRUE(parse_calibration(good, "k", now).has_value());
  const auto without = [&](const std::string& prefix) {
    std::istringstream in(good);
    std::string out;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.starts_with(prefix)) out += line + "\n";
    }
    return out;
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string out = good;
    out.replace(out.find(from), from.size(), to);
    return out;
  };
  for (const std::string& line : {"replicator", "key", "measured", "bytes", "exchange_s",
                                  "stepped_s", "native_s", "reduce_s"}) {
    EXPECT_FALSE(parse_calibration(without(line), "k", now).has_value()) << "without " << line;
  }
  EXPECT_FALSE(parse_calibration("", "k", now).has_value());
  EXPECT_FALSE(parse_calibration(replaced("bytes 64", "bytes 32"), "k", now).has_value());
  EXPECT_FALSE(parse_calibration(replaced("native_s ", "native_s -1 "), "k", now).has_value());
  EXPECT_FALSE(parse_calibration(replaced("native_s ", "native_s nan "), "k", now).has_value());
  EXPECT_FALSE(parse_calibration(replaced("reduce_s ", "reduce_s x"), "k", now).has_value());
  EXPECT_FALSE(parse_calibration(good + "native_s 1 2 3 4 5 6\n", "k", now).has_value());
  EXPECT_FALSE(parse_calibration(replaced("stepped_s ", "stepped_s inf "), "k", now).has_value());
  // A calibration of the format before stepped exchanges were measured.
  EXPECT_FALSE(parse_calibration(replaced("calibration 4", "calibration 3"), "k", now).has_value());
  EXPECT_FALSE(parse_calibration(good + "speed 1\n", "k", now).has_value());
  // A line with a time too many.
  const std::size_t at = good.find("\nreduce_s ");
  const std::size_t end = good.find('\n', at + 1);
  std::string longer = good;
  longer.insert(end, " 1");
  EXPECT_FALSE(parse_calibration(longer, "k", now).has_value());
}

TEST(CalibrationFileTest, KeptUnderTheFolderOrTheUsersCacheOrNowhere) {
  EXPECT_EQ(calibration_path("off", "k"), "");
  const std::string a = calibration_path("/tmp/x", "key a");
  EXPECT_TRUE(a.starts_with("/tmp/x/calibration-")) << a;
  EXPECT_TRUE(a.ends_with(".txt")) << a;
  EXPECT_NE(a, calibration_path("/tmp/x", "key b"));
  EXPECT_EQ(a, calibration_path("/tmp/x", "key a"));

  // The default folder follows XDG_CACHE_HOME: set for this test only, on the test thread,
  // while no other thread of the library is alive.
  // NOLINTBEGIN(concurrency-mt-unsafe)
  const char* old_cache = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_cache ? old_cache : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/cache-home", 1);
  EXPECT_TRUE(calibration_path("", "k").starts_with("/tmp/cache-home/replicator/calibration-"));
  if (old_cache) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  // NOLINTEND(concurrency-mt-unsafe)
}

// Runs calibrate() on every process of a fake job of two processes that, like OpenMPI's
// shared memory, has an all-reduce of its own; returns each process's result.
std::vector<Calibration> calibrate_job(const std::string& folder,
                                       std::shared_ptr<testing::FakeNetwork>* used = nullptr) {
  auto network = std::make_shared<testing::FakeNetwork>(2, false, true);
  if (used) *used = network;
  std::vector<Calibration> results(2);
  const auto errors = harness::run_threads(2, [&](int rank) {
    auto transport = network->endpoint(rank, 1);
    const ProcessLayout layout = make_process_layout(*transport, 1, false);
    EXPECT_TRUE(needs_calibration(layout));
    // Measured up to 64 KiB: the larger sizes take seconds under the sanitizers, and what
    // this checks is how the figures are kept and shared.
    results[static_cast<std::size_t>(rank)] =
        calibrate(layout, folder, std::chrono::seconds(30), kCostBytes[2]);
  });
  EXPECT_EQ(harness::all_errors(errors, "process"), "");
  return results;
}

TEST(CalibrateTest, MeasuresOnceKeepsItAndEveryProcessPlansWithProcessZerosFigures) {
  const auto folder = fresh_folder("keep");
  const auto first = calibrate_job(folder.string());
  ASSERT_EQ(first.size(), 2u);
  EXPECT_TRUE(first[0].measured);
  EXPECT_TRUE(first[0].costs.exchange_known());
  EXPECT_TRUE(first[0].costs.stepped_known());
  EXPECT_TRUE(first[0].costs.native_known());
  EXPECT_TRUE(first[0].costs.reduce_known());
  EXPECT_TRUE(same(first[0].costs, first[1].costs));  // process 0's figures everywhere
  // Past the largest size measured, its times scaled by bytes.
  const double scale = static_cast<double>(kCostBytes.back()) / static_cast<double>(kCostBytes[2]);
  EXPECT_DOUBLE_EQ(first[0].costs.exchange_s.back(), first[0].costs.exchange_s[2] * scale);
  EXPECT_DOUBLE_EQ(first[0].costs.native_s.back(), first[0].costs.native_s[2] * scale);
  ASSERT_FALSE(first[0].path.empty());
  EXPECT_TRUE(first[0].path.starts_with(folder.string()));
  EXPECT_TRUE(std::filesystem::exists(first[0].path));

  // The next job of that shape on this host reads them instead of measuring.
  std::shared_ptr<testing::FakeNetwork> network;
  const auto second = calibrate_job(folder.string(), &network);
  EXPECT_FALSE(second[0].measured);
  EXPECT_FALSE(second[1].measured);
  EXPECT_EQ(network->native_calls.load(), 0);
  EXPECT_TRUE(same(second[0].costs, first[0].costs));
  EXPECT_TRUE(same(second[1].costs, first[0].costs));

  // A file that is not a calibration is measured over, and replaced.
  { std::ofstream(first[0].path) << "garbage\n"; }
  const auto third = calibrate_job(folder.string());
  EXPECT_TRUE(third[0].measured);
  std::ifstream in(first[0].path);
  std::string magic;
  std::getline(in, magic);
  EXPECT_EQ(magic, "replicator calibration 4");
  std::filesystem::remove_all(folder);
}

TEST(CalibrateTest, OffMeasuresNothingAndTheChooserKeepsItsFixedLimits) {
  std::shared_ptr<testing::FakeNetwork> network;
  const auto off = calibrate_job("off", &network);
  for (const Calibration& c : off) {
    EXPECT_FALSE(c.measured);
    EXPECT_FALSE(c.costs.exchange_known());
    EXPECT_TRUE(c.path.empty());
  }
  EXPECT_EQ(network->native_calls.load(), 0);
}

TEST(CalibrateTest, NotNeededWhereNoChoiceDependsOnIt) {
  // Over a network like Gloo's (no all-reduce of its own), or three processes.
  for (const auto& [P, shorter] : {std::pair{2, false}, std::pair{3, true}}) {
    auto network = std::make_shared<testing::FakeNetwork>(P, !shorter, shorter);
    const auto errors = harness::run_threads(P, [&](int rank) {
      auto transport = network->endpoint(rank, 1);
      const ProcessLayout layout = make_process_layout(*transport, 1, false);
      EXPECT_FALSE(needs_calibration(layout));
      const Calibration c = calibrate(layout, "", std::chrono::seconds(30));
      EXPECT_FALSE(c.measured);
      EXPECT_FALSE(c.costs.exchange_known());
    });
    EXPECT_EQ(harness::all_errors(errors, "process"), "");
    EXPECT_EQ(network->native_calls.load(), 0);
  }
}

}  // namespace
}  // namespace replicator::detail
