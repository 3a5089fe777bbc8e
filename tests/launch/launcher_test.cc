// `replicator launch` (src/launch/launcher.cc) on small shell programs: its prefixes and
// environment, a child's exit status or signal, SIGTERM then SIGKILL for a child that ignores
// it, SIGTERM forwarded, bad usage.
//
//   launcher_test PATH_TO_REPLICATOR
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/harness/harness.h"
#include "tests/harness/run_capture.h"

namespace replicator {
namespace {

using harness::exit_code;
using harness::Ran;
using harness::run_capture;
using std::chrono::milliseconds;

std::string g_launcher;  // the `replicator` program

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Launcher, PrefixesEveryLineAndSetsTheEnvironment) {
  const Ran ran =
      run_capture({g_launcher, "launch", "-n", "3", "--local-replicas", "4", "--host", "127.0.0.1",
                   "--", "sh", "-c",
                   "echo out $REPLICATOR_RANK $REPLICATOR_WORLD_SIZE $REPLICATOR_ENGINE "
                   "$REPLICATOR_LOCAL_REPLICAS $REPLICATOR_HOST; echo err $REPLICATOR_RANK >&2; "
                   "echo store $REPLICATOR_STORE; printf 'no newline'"});
  EXPECT_EQ(exit_code(ran.status), 0) << ran.err;
  for (int r = 0; r < 3; ++r) {
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    EXPECT_TRUE(contains(ran.out, prefix + "out " + std::to_string(r) + " 3 gloo 4 127.0.0.1\n"))
        << ran.out;
    EXPECT_TRUE(contains(ran.err, prefix + "err " + std::to_string(r) + "\n")) << ran.err;
    EXPECT_TRUE(contains(ran.out, prefix + "no newline\n")) << ran.out;
    EXPECT_FALSE(contains(ran.out, prefix + "err")) << "stderr line on stdout";
  }
  // The default store is a fresh folder, gone after the run.
  const auto at = ran.out.find("store file://");
  ASSERT_NE(at, std::string::npos) << ran.out;
  const std::string dir = ran.out.substr(at + 13, ran.out.find('\n', at) - at - 13);
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(Launcher, ReportsAChildThatExitsNonZeroAndStopsTheOthers) {
  const Ran ran = run_capture({g_launcher, "launch", "-n", "2", "--", "sh", "-c",
                               "if [ \"$REPLICATOR_RANK\" = 1 ]; then exit 3; fi; sleep 30"});
  EXPECT_EQ(exit_code(ran.status), 1);
  EXPECT_TRUE(contains(ran.err, "replicator launch: rank 1 exited with status 3\n")) << ran.err;
  EXPECT_LT(ran.ms, 10000.0);
}

TEST(Launcher, ReportsAChildKilledByASignal) {
  const Ran ran = run_capture({g_launcher, "launch", "-n", "2", "--", "sh", "-c",
                               "if [ \"$REPLICATOR_RANK\" = 1 ]; then kill -9 $$; fi; sleep 30"});
  EXPECT_EQ(exit_code(ran.status), 1);
  EXPECT_TRUE(contains(ran.err, "replicator launch: rank 1 was killed by signal 9 (Killed)\n"))
      << ran.err;
  EXPECT_LT(ran.ms, 10000.0);
}

TEST(Launcher, KillsAChildThatIgnoresSigterm) {
  const Ran ran = run_capture(
      {g_launcher, "launch", "-n", "2", "--", "sh", "-c",
       // Rank 0 fails once rank 1 ignores SIGTERM (it marks that in the launcher's store
       // folder, which every rank shares).
       "trap '' TERM; ready=\"${REPLICATOR_STORE#file://}/rank1-ignores-term\"; "
       "if [ \"$REPLICATOR_RANK\" = 0 ]; then "
       "until [ -e \"$ready\" ]; do sleep 0.01; done; exit 5; fi; touch \"$ready\"; sleep 30"});
  EXPECT_EQ(exit_code(ran.status), 1);
  EXPECT_TRUE(contains(ran.err, "rank 0 exited with status 5")) << ran.err;
  EXPECT_GE(ran.ms, 2000.0);  // SIGTERM ignored: SIGKILL after the 2 s grace
  EXPECT_LT(ran.ms, 10000.0);
}

TEST(Launcher, ForwardsSigtermToTheChildren) {
  const std::vector<std::string> argv = {g_launcher, "launch", "-n", "2", "--", "sleep", "30"};
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  // SIGTERM once both children run `sleep` (the launcher watches its signals before it
  // starts any child; its start-up, which loads LibTorch, can take seconds on a loaded
  // machine).
  const auto children_sleeping = [](pid_t parent) {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const std::size_t open = line.find('(');
      const std::size_t close = line.rfind(')');
      if (open == std::string::npos || close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      char state = 0;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid == parent && line.substr(open + 1, close - open - 1) == "sleep") ++n;
    }
    return n;
  };
  EXPECT_TRUE(harness::poll_until([&] { return children_sleeping(pid) == 2; },
                                  std::chrono::seconds(30), milliseconds(50)))
      << "the launcher did not start its two children within 30 s";
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  // The children died by SIGTERM (had it not reached them, they would have slept their 30 s
  // out and the launcher would exit 0).
  EXPECT_EQ(exit_code(status), 1);
}

TEST(Launcher, BadUsageExitsTwo) {
  Ran ran = run_capture({g_launcher, "launch", "-n", "0", "--", "true"});
  EXPECT_EQ(exit_code(ran.status), 2);
  EXPECT_TRUE(contains(ran.err, "-n must be at least 1")) << ran.err;
  ran = run_capture({g_launcher, "launch", "-n", "2"});
  EXPECT_EQ(exit_code(ran.status), 2);
  EXPECT_TRUE(contains(ran.err, "no program to run")) << ran.err;
  ran = run_capture({g_launcher, "launch", "--", "true"});
  EXPECT_EQ(exit_code(ran.status), 2);
  EXPECT_TRUE(contains(ran.err, "-n P is required")) << ran.err;
  ran = run_capture({g_launcher, "launch", "-n", "2", "--actors", "3", "--", "true"});
  EXPECT_EQ(exit_code(ran.status), 2);
  EXPECT_TRUE(contains(ran.err, "--actors (3) must be a multiple of -n (2)")) << ran.err;
  ran = run_capture({g_launcher, "launch", "--actors", "1", "--", "true", "--listen", "x:1"});
  EXPECT_EQ(exit_code(ran.status), 2);
  EXPECT_TRUE(contains(ran.err, "the launcher sets --listen")) << ran.err;
  ran = run_capture({g_launcher, "launch", "-n", "2", "--", "/nonexistent/program"});
  EXPECT_EQ(exit_code(ran.status), 2);
  EXPECT_TRUE(contains(ran.err, "cannot start '/nonexistent/program'")) << ran.err;
}

TEST(Launcher, AllChildrenSucceeding) {
  const Ran ran = run_capture({g_launcher, "launch", "-n", "4", "--", "true"});
  EXPECT_EQ(exit_code(ran.status), 0) << ran.err;
  EXPECT_EQ(ran.err, "");
}

}  // namespace
}  // namespace replicator

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: launcher_test PATH_TO_REPLICATOR\n");
    return 2;
  }
  replicator::g_launcher = argv[1];
  return RUN_ALL_TESTS();
}
