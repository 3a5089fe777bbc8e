// The launch layer's API on real processes (/bin/sh children): the plain launcher's
// environment, exit codes (also with another thread taking the exit signals), failure
// release and actor restarts; the elastic agent's restart after a failure, the verdict it
// says of a failed generation's flight-recorder dumps (on real gloo workers) and its refusal
// of options that cannot work; the actors of an IMPALA learner added to a plan, and the
// elastic job's host range.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "replicator/launch/elastic.h"
#include "replicator/launch/launcher.h"
#include "tests/harness/temp_dir.h"

namespace replicator::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class LaunchTest : public ::testing::Test {
 protected:
  harness::TempDir dir_;
};

TEST_F(LaunchTest, EveryProcessGetsItsRankAndTheJobsStore) {
  LaunchOptions options;
  options.processes = 3;
  options.local_replicas = 2;
  options.command =
      sh("echo \"$REPLICATOR_ENGINE $REPLICATOR_WORLD_SIZE "
         "$REPLICATOR_LOCAL_REPLICAS $REPLICATOR_HOST_PROCESSES "
         "${REPLICATOR_STORE%%//*} $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
         "$MASTER_ADDR\" > " +
         dir_.path().string() + "/rank.$REPLICATOR_RANK; echo \"$MASTER_PORT\" > " +
         dir_.path().string() + "/port.$REPLICATOR_RANK");
  EXPECT_EQ(run_processes(options), 0);
  const std::string port = read(dir_.path() / "port.0");
  EXPECT_GT(std::stoi(port), 0);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(read(dir_.path() / ("rank." + r)),
              "gloo 3 2 3 file: " + r + " 3 " + r + " 3 127.0.0.1\n")
        << "rank " << rank;
    EXPECT_EQ(read(dir_.path() / ("port." + r)), port) << "every rank meets at one MASTER_PORT";
  }
}

// `processes` ranks of which rank 1 fails at once and the others would run a minute: the
// launch fails (exit code 1) and stops them well before.
void expect_rank_one_fails_the_launch(int processes) {
  LaunchOptions options;
  options.processes = processes;
  options.kill_grace = std::chrono::milliseconds(200);
  options.command = sh("if [ \"$REPLICATOR_RANK\" = 1 ]; then exit 3; fi; exec sleep 60");
  const auto start = Clock::now();
  EXPECT_EQ(run_processes(options), 1);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST_F(LaunchTest, AFailedProcessStopsTheOthersAndFailsTheLaunch) {
  expect_rank_one_fails_the_launch(3);
}

// A thread that does not block SIGCHLD (as LibTorch's OpenMP pool, started before the
// launcher) takes the children's exit signals; the launcher still sees the failure.
TEST_F(LaunchTest, AnotherThreadTakingTheExitSignalsHidesNoExit) {
  // It spins, so that it is running when a signal comes and takes it first.
  std::atomic<bool> done{false};
  std::thread bystander([&] {
    while (!done.load(std::memory_order_relaxed)) {
    }
  });
  expect_rank_one_fails_the_launch(2);
  done = true;
  bystander.join();
}

TEST_F(LaunchTest, AProgramThatCannotStartIsExitCodeTwo) {
  LaunchOptions options;
  options.processes = 2;
  options.command = {(dir_.path() / "no-such-program").string()};
  EXPECT_EQ(run_processes(options), 2);
}

TEST_F(LaunchTest, AFailingActorIsRestartedWhileTheJobRuns) {
  const fs::path tries = dir_.path() / "tries";
  const fs::path job_done = dir_.path() / "job-done";
  LaunchOptions options;
  options.processes = 1;
  // The job ends once the actor tried three times (or after 30 s).
  options.command = sh("i=0; while [ \"$(cat " + tries.string() +
                       " 2>/dev/null | wc -l)\" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; "
                       "i=$((i+1)); done; touch " +
                       job_done.string());
  options.actors = {sh("echo try >> " + tries.string() + "; exit 1")};
  options.actor_restarts = 2;
  EXPECT_EQ(run_processes(options), 0);
  EXPECT_TRUE(fs::exists(job_done));
  // The first start and its two restarts; no more once they were used up.
  EXPECT_EQ(read(tries), "try\ntry\ntry\n");
}

TEST_F(LaunchTest, OptionsThatCannotWorkAreConfigErrors) {
  LaunchOptions options;
  EXPECT_THROW(run_processes(options), ConfigError);  // no command
  options.command = sh("true");
  options.processes = 0;
  EXPECT_THROW(run_processes(options), ConfigError);
  options.processes = 1;
  options.local_replicas = 0;
  EXPECT_THROW(run_processes(options), ConfigError);
  options.local_replicas.reset();
  options.actor_restarts = -1;
  EXPECT_THROW(run_processes(options), ConfigError);
}

TEST_F(LaunchTest, TheElasticAgentRestartsTheJobAfterAFailure) {
  ElasticOptions options;
  options.processes = 2;
  options.max_restarts = 1;
  options.last_call = std::chrono::milliseconds(0);
  options.rdzv = "file://" + (dir_.path() / "rdzv" / "job").string();
  // Rank 1 of the first generation fails; the second generation finishes.
  options.command =
      sh("if [ \"$REPLICATOR_RESTART_COUNT\" = 0 ] && [ \"$REPLICATOR_RANK\" = 1 ]; then exit 5; "
         "fi; echo \"$REPLICATOR_GENERATION $REPLICATOR_RESTART_COUNT\" > " +
         dir_.path().string() + "/done.$REPLICATOR_RANK");
  EXPECT_EQ(run_elastic(options), 0);
  EXPECT_EQ(read(dir_.path() / "done.0"), "1 1\n");
  EXPECT_EQ(read(dir_.path() / "done.1"), "1 1\n");
}

TEST_F(LaunchTest, TheElasticAgentGivesUpWhenItsRestartsAreUsedUp) {
  ElasticOptions options;
  options.max_restarts = 1;
  options.last_call = std::chrono::milliseconds(0);
  options.command = sh("echo x >> " + dir_.path().string() + "/runs; exit 1");
  EXPECT_EQ(run_elastic(options), 1);
  EXPECT_EQ(read(dir_.path() / "runs"), "x\nx\n");  // the first run and one restart
}

// REPLICATOR_TRACE_DIR for the agent, while it lives.
struct TraceDir {
  explicit TraceDir(const fs::path& dir) { ::setenv("REPLICATOR_TRACE_DIR", dir.c_str(), 1); }
  ~TraceDir() { ::unsetenv("REPLICATOR_TRACE_DIR"); }
  TraceDir(const TraceDir&) = delete;
  TraceDir& operator=(const TraceDir&) = delete;
};

// A job whose process 1 stops (SIGSTOP) in the middle of a stream of all_reduces
// (tests/engines/multiproc_main.cc, scenario "stop"): process 0 times out and writes its
// flight-recorder dump to the generation's folder, and the agent, ending the generation,
// says the verdict of that dump: who stopped, at which collective the other waited. A dump
// an earlier run left in the folder has no say.
TEST_F(LaunchTest, TheElasticAgentSaysTheVerdictOfAFailedGenerationsDumps) {
#ifndef REPLICATOR_HAVE_GLOO
  GTEST_SKIP() << "built without the gloo engine";
#endif
  const fs::path dumps = dir_.path() / "dumps";
  const TraceDir trace_dir(dumps);
  ElasticOptions options;
  options.processes = 2;
  options.max_restarts = 0;
  options.last_call = std::chrono::milliseconds(0);
  options.rdzv = "file://" + (dir_.path() / "rdzv" / "job").string();
  options.command = sh("REPLICATOR_TIMEOUT=3s exec " + std::string(REPLICATOR_MULTIPROC) + " stop");
  // A dump of process 1 left in the folder by an earlier run of the job: not this run's.
  fs::create_directories(dumps / "generation0");
  const std::string stale = "flight_recorder.rank1.pid1.1.json";
  std::ofstream(dumps / "generation0" / stale)
      << R"({"format": "replicator-flight-recorder", "version": 1, "reason": "CollectiveMismatch",)"
      << R"( "error": "an earlier run", "rank": 1, "processes": 2, "local_replicas": 1,)"
      << R"( "pid": 1, "unix_time_us": 1000.0, "summary": [], "replicas": [{"replica": 1,)"
      << R"( "entries": []}]})";
  testing::internal::CaptureStderr();
  const int code = run_elastic(options);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1) << said;
  // Process 0's dump, in the first generation's folder, beside the earlier run's.
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dumps / "generation0")) {
    if (e.path().filename() != stale) files.push_back(e.path().filename().string());
  }
  ASSERT_EQ(files.size(), 1u) << said;
  EXPECT_EQ(files[0].rfind("flight_recorder.rank0.", 0), 0u) << files[0];
  const std::string verdict =
      "replicator launch: generation 0, from the dumps on this host: process 1 wrote no dump "
      "(killed or stopped before it could); replica 0 waited at all_reduce #100 at "
      "multiproc_main.cc:";
  const std::size_t at = said.find(verdict);
  ASSERT_NE(at, std::string::npos) << said;
  const std::string line = said.substr(at, said.find('\n', at) - at);
  EXPECT_NE(line.find(" (step 2)"), std::string::npos) << line;
  // Said once, after the generation's end and before the agent gives up.
  EXPECT_EQ(said.find(verdict, at + 1), std::string::npos) << said;
  EXPECT_LT(said.find("replicator launch: generation 0: "), at) << said;
  EXPECT_GT(said.find("replicator launch: giving up after 0 restarts"), at) << said;
}

TEST_F(LaunchTest, ElasticOptionsThatCannotWorkAreConfigErrors) {
  ElasticOptions options;
  options.command = sh("true");
  options.heartbeat_timeout = 2 * options.heartbeat;
  EXPECT_THROW(run_elastic(options), ConfigError);
  options = ElasticOptions{};
  options.command = sh("true");
  options.max_hosts = 2;  // several hosts and no store where they meet
  EXPECT_THROW(run_elastic(options), ConfigError);
  options.min_hosts = 3;
  options.rdzv = "file://" + (dir_.path() / "job").string();
  EXPECT_THROW(run_elastic(options), ConfigError);  // MIN above MAX
  options = ElasticOptions{};
  options.command = sh("true");
  options.rdzv = "file://relative";
  EXPECT_THROW(run_elastic(options), ConfigError);
}

TEST(RemoteActorsTest, TheLearnerGetsItsFlagsAndEachActorItsLearners) {
  LaunchOptions plan;
  plan.processes = 2;
  plan.command = {"replicator", "train", "impala"};
  const LaunchOptions with =
      with_remote_actors(plan, {.actors = 4, .port = 4000, .program = "/bin/replicator"});
  EXPECT_EQ(with.command,
            (std::vector<std::string>{"replicator", "train", "impala", "--remote-actors", "2",
                                      "--listen", "127.0.0.1:4000"}));
  ASSERT_EQ(with.actors.size(), 4u);
  EXPECT_EQ(with.actors[3],
            (std::vector<std::string>{"/bin/replicator", "rl", "actor", "--learner",
                                      "127.0.0.1:4000,127.0.0.1:4001", "--id", "3"}));
  plan.host = "10.0.0.7";
  const LaunchOptions free = with_remote_actors(plan, {.actors = 2, .program = "r"});
  const std::string listen = free.command.back();
  ASSERT_EQ(listen.rfind("10.0.0.7:", 0), 0u) << listen;
  const int port = std::stoi(listen.substr(9));
  EXPECT_GT(port, 0);
  EXPECT_EQ(free.actors[0][4], listen + ",10.0.0.7:" + std::to_string(port + 1));
}

TEST(RemoteActorsTest, PlansThatCannotWorkAreConfigErrors) {
  LaunchOptions plan;
  plan.processes = 2;
  plan.command = {"replicator", "train", "impala"};
  EXPECT_THROW(with_remote_actors(plan, {.actors = 3, .port = 4000}), ConfigError);
  EXPECT_THROW(with_remote_actors(plan, {.actors = 2, .port = 65535}), ConfigError);
  plan.command.push_back("--listen=0.0.0.0:5");
  EXPECT_THROW(with_remote_actors(plan, {.actors = 2, .port = 4000}), ConfigError);
}

TEST(HostRangeTest, NOrMinMax) {
  EXPECT_EQ(parse_host_range("3"), std::make_pair(3, 3));
  EXPECT_EQ(parse_host_range("1:4"), std::make_pair(1, 4));
  for (const char* bad : {"", "0", "4:2", "x", "1:", ":2", "-1", "1234567"}) {
    EXPECT_THROW(parse_host_range(bad), ConfigError) << bad;
  }
}

}  // namespace
}  // namespace replicator::launch
