// Running a benchmark's peer: its stdout comes back, its stderr is kept aside and shown
// (its end) only when it fails.
#include "replicator/launch/subprocess.h"

#include <gtest/gtest.h>

#include <string>

#include "replicator/errors.h"

namespace replicator::launch {
namespace {

TEST(RunCapture, ReturnsStdoutAndLeavesStderrOut) {
  EXPECT_EQ(run_capture("echo out; echo noise >&2; echo more"), "out\nmore\n");
}

TEST(RunCapture, AFailureNamesTheCommandItsStatusAndTheEndOfItsStderr) {
  const std::string command =
      "echo fine; for i in $(seq 1 2000); do echo line $i >&2; done; "
      "echo 'Traceback: the cause' >&2; exit 3";
  try {
    run_capture(command);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("exit status 3"), std::string::npos) << what;
    EXPECT_NE(what.find(command), std::string::npos) << what;
    EXPECT_NE(what.find("Traceback: the cause"), std::string::npos) << what;
    EXPECT_NE(what.find("line 2000\n"), std::string::npos) << what;
    EXPECT_EQ(what.find("line 1\n"), std::string::npos) << "the whole stderr, not its end";
    EXPECT_LT(what.size(), 4000U + command.size());
  }
}

TEST(RunCapture, AFailureWithNothingOnStderrSaysOnlyTheStatus) {
  try {
    run_capture("exit 5");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("exit status 5"), std::string::npos) << what;
    EXPECT_EQ(what.find("stderr"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace replicator::launch
