// The job reporter (replicator/train/reporter.h): metrics.jsonl kept up to a resumed run's
// step, the plain and terminal progress lines, the clock text and the ETA.
#include "replicator/train/reporter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "tests/harness/temp_dir.h"

namespace replicator::train {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Where a reporter's stderr lines go when the test does not read them.
std::FILE* sink() {
  static const std::unique_ptr<std::FILE, int (*)(std::FILE*)> kFile(::tmpfile(), &std::fclose);
  return kFile.get();
}

TEST(JobReporter, DropsMetricsPastTheResumeStepAndAppends) {
  TempDir dir;
  const fs::path metrics = dir.path() / "run" / "metrics.jsonl";
  {
    JobReporter reporter({.out = dir.path() / "run", .progress = false, .err = sink()});
    for (int step = 1; step <= 5; ++step) reporter.metric({{"type", "train"}, {"step", step}});
    reporter.metric({{"type", "note"}});  // no step: always kept
  }
  {
    // Resumed from step 3: the lines of steps 4 and 5 go, the others stay, new ones append.
    JobReporter reporter({.out = dir.path() / "run", .resume_step = 3, .err = sink()});
    EXPECT_EQ(read_text(metrics),
              "{\"type\":\"train\",\"step\":1}\n{\"type\":\"train\",\"step\":2}\n"
              "{\"type\":\"train\",\"step\":3}\n{\"type\":\"note\"}\n");
    reporter.metric({{"type", "train"}, {"step", 4}});
  }
  EXPECT_EQ(read_text(metrics).substr(read_text(metrics).rfind('{')),
            "{\"type\":\"train\",\"step\":4}\n");
  for (const auto& entry : fs::directory_iterator(dir.path() / "run")) {
    EXPECT_EQ(entry.path().filename().string(), "metrics.jsonl") << "left behind";
  }
  // Without a folder nothing is written.
  JobReporter quiet({.err = sink()});
  quiet.metric({{"step", 1}});
  EXPECT_TRUE(quiet.metrics_path().empty());
}

TEST(JobReporter, PlainProgressLinesEveryTenthOfTheRun) {
  std::FILE* err = ::tmpfile();
  {
    JobReporter reporter({.progress = true, .steps_to_run = 100, .err = err, .terminal = false});
    for (int step = 1; step <= 100; ++step) {
      reporter.count_step();
      reporter.progress("step " + std::to_string(step));
    }
    reporter.note("done");
  }
  std::rewind(err);
  std::string text;
  for (int ch; (ch = std::fgetc(err)) != EOF;) text += static_cast<char>(ch);
  std::fclose(err);
  EXPECT_EQ(text,
            "step 1\nstep 11\nstep 21\nstep 31\nstep 41\nstep 51\nstep 61\nstep 71\nstep 81\n"
            "step 91\ndone\n");
}

TEST(JobReporter, TerminalLineIsRewrittenInPlace) {
  std::FILE* err = ::tmpfile();
  {
    JobReporter reporter({.steps_to_run = 3, .err = err, .terminal = true});
    reporter.count_step();
    reporter.progress("a");
    reporter.note("eval");
    reporter.progress("b");
  }
  std::rewind(err);
  std::string text;
  for (int ch; (ch = std::fgetc(err)) != EOF;) text += static_cast<char>(ch);
  std::fclose(err);
  // The line padded to clear what was there (90 columns); the note on a line of its own.
  const std::string pad(89, ' ');
  EXPECT_EQ(text, std::string("\ra") + pad + "\neval\n\rb" + pad + "\n");
}

TEST(Job, ClockTextAndEta) {
  EXPECT_EQ(clock_text(0), "0:00:00");
  EXPECT_EQ(clock_text(3725.9), "1:02:05");
  EXPECT_EQ(clock_text(-5), "0:00:00");
  EXPECT_EQ(clock_text(NAN), "0:00:00");
  EXPECT_DOUBLE_EQ(eta_seconds(10, 10, 30), 20);
  EXPECT_DOUBLE_EQ(eta_seconds(10, 0, 30), 0);
  EXPECT_DOUBLE_EQ(eta_seconds(10, 30, 30), 0);
}

TEST(Job, CountText) {
  EXPECT_EQ(count_text(0), "0");
  EXPECT_EQ(count_text(950), "950");
  EXPECT_EQ(count_text(12'500), "12.5k");
  EXPECT_EQ(count_text(3'204'000), "3.20M");
}

}  // namespace
}  // namespace replicator::train
