// Tests of the flight recorder and the timeline:
//   (a) the ring keeps the newest entries after wrapping, and each entry's state follows its
//       collective; a reader running beside the writer only ever sees whole entries;
//   (b) a Timeout thrown by run ends with one line per replica, naming the one that never
//       arrived; the dump written to trace_dir parses and holds every replica's record;
//   (c) SIGUSR1 dumps a live job, and a program's own SIGUSR1 handler keeps working;
//   (d) the timeline is valid JSON with one track per replica and every step and
//       collective, with its sequence number and bytes; the straggler watch names the
//       missing replicas on stderr and marks the wait on the timeline, and says nothing
//       on a healthy run;
//   (e) bad settings are ConfigErrors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "replicator/replicator.h"
#include "src/comm/flight_recorder.h"
#include "src/comm/timeline.h"
#include "src/runtime/straggler.h"
#include "tests/harness/harness.h"

#define EXPECT_HAS_SUBSTR(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

namespace replicator {
namespace {

namespace fs = std::filesystem;
using detail::CallRecord;
using detail::CallState;
using detail::FlightRecorder;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A fresh folder under the system's temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "replicator-trace-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

constexpr detail::OpTraits kAllReduce{.name = "all_reduce"};

detail::Descriptor descriptor(std::uint64_t sequence, std::uint64_t count,
                              const Buffer* buffer = nullptr) {
  detail::Descriptor d{
      .traits = &kAllReduce, .dtype = DType::kF32, .sequence = sequence, .count = count};
  if (buffer) d.call.buffers = std::span<const Buffer>(buffer, 1);
  return d;
}

// ---- (a) the ring ------------------------------------------------------------------------

TEST(FlightRecorderTest, KeepsTheNewestEntriesAfterWrapping) {
  FlightRecorder recorder(7, 4);
  recorder.begin_step(Clock::now());
  for (std::uint64_t s = 0; s < 10; ++s) {
    recorder.issue(descriptor(s, s + 1), Clock::now());
    recorder.start();
    recorder.finish(false, Clock::now());
  }
  EXPECT_EQ(recorder.recorded(), 10u);
  const std::vector<CallRecord> records = recorder.records();
  ASSERT_EQ(records.size(), 4u);
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].index, 6 + i);
    EXPECT_EQ(records[i].sequence, 6 + i);
    EXPECT_EQ(records[i].count, 7 + i);
    EXPECT_EQ(records[i].op, "all_reduce");
    EXPECT_EQ(records[i].step, 1u);
    EXPECT_EQ(records[i].state, CallState::kDone);
    EXPECT_GE(records[i].end_ns, records[i].start_ns);
  }
  ASSERT_TRUE(recorder.last());
  EXPECT_EQ(recorder.last()->sequence, 9u);
}

TEST(FlightRecorderTest, StateFollowsTheCall) {
  FlightRecorder recorder(3, 8);
  const auto now = Clock::now();
  EXPECT_EQ(detail::summary_line(recorder, now), "replica 3: no collective yet");
  recorder.begin_step(now);
  std::vector<float> data(1 << 20);
  const Buffer buffer{data.data(), data.size(), DType::kF32};
  recorder.issue(descriptor(41, data.size(), &buffer), now);
  EXPECT_EQ(recorder.last()->state, CallState::kIssued);
  EXPECT_EQ(recorder.last()->bytes, 4u << 20);
  EXPECT_EQ(recorder.last()->end_ns, 0);
  EXPECT_HAS_SUBSTR(detail::summary_line(recorder, now + std::chrono::seconds(30)),
                    "replica 3: step 1, #41 all_reduce f32 x 1048576 (4 MiB), issued 30.0 s ago");
  recorder.start();
  EXPECT_EQ(recorder.last()->state, CallState::kInProgress);
  EXPECT_EQ(detail::summary_line(recorder, now + std::chrono::seconds(30)),
            "replica 3: step 1, #41 all_reduce f32 x 1048576 (4 MiB), in progress for 30.0 s");
  recorder.finish(false, now + milliseconds(5));
  EXPECT_EQ(recorder.last()->state, CallState::kDone);
  EXPECT_EQ(detail::summary_line(recorder, now + milliseconds(2005)),
            "replica 3: step 1, last #41 all_reduce f32 x 1048576 (4 MiB), done 2.0 s ago");
  recorder.issue(descriptor(42, 0), now + milliseconds(10));
  recorder.finish(true, now + milliseconds(510));
  EXPECT_EQ(recorder.last()->state, CallState::kFailed);
  EXPECT_EQ(detail::summary_line(recorder, now + std::chrono::seconds(9)),
            "replica 3: step 1, last #42 all_reduce f32 x 0 (0 B), failed after 500 ms");
}

TEST(FlightRecorderTest, EntriesAndSummaryNameTheCallSite) {
  FlightRecorder recorder(2, 4);
  const auto now = Clock::now();
  recorder.begin_step(now);
  detail::Descriptor d = descriptor(7, 16);
  d.call.where = CallSite{"/home/me/project/src/train.cc", 120};
  recorder.issue(d, now);
  EXPECT_EQ(recorder.last()->where.line, 120u);
  EXPECT_EQ(detail::summary_line(recorder, now + std::chrono::seconds(2)),
            "replica 2: step 1, #7 all_reduce f32 x 16 (0 B) at train.cc:120, issued 2.0 s ago, "
            "waiting for this process's other replicas");
  EXPECT_EQ(to_string(CallSite{}), "");
  EXPECT_EQ(to_string(CallSite{"noslash.cc", 3}), "noslash.cc:3");
}

TEST(FlightRecorderTest, OffRecordsNothing) {
  FlightRecorder recorder(0, 0);
  recorder.issue(descriptor(0, 1), Clock::now());
  recorder.finish(false, Clock::now());
  EXPECT_TRUE(recorder.records().empty());
  EXPECT_FALSE(recorder.last());
  EXPECT_HAS_SUBSTR(detail::summary_line(recorder, Clock::now()), "off");
}

// Every field of entry s is a function of s: a reader that copied half of one entry and
// half of another would see them disagree.
TEST(FlightRecorderTest, ReaderBesideTheWriterSeesWholeEntries) {
  FlightRecorder recorder(0, 16);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    const auto base = Clock::time_point(std::chrono::nanoseconds(1'000'000));
    for (std::uint64_t s = 0; s < 1'000'000; ++s) {
      const auto at = base + std::chrono::nanoseconds(s * 10);
      recorder.issue(descriptor(s, 3 * s), at);
      recorder.start();
      recorder.finish(s % 7 == 0, at + std::chrono::nanoseconds(s));
    }
    done = true;
  });
  std::uint64_t seen = 0;
  bool whole = true;
  while (!done && whole) {
    for (const CallRecord& r : recorder.records()) {
      ++seen;
      const std::int64_t start = 1'000'000 + static_cast<std::int64_t>(r.sequence) * 10;
      whole = whole && r.index == r.sequence && r.count == 3 * r.sequence && r.bytes == 0 &&
              r.start_ns == start &&
              (r.end_ns == 0 || r.end_ns == start + static_cast<std::int64_t>(r.sequence)) &&
              (r.state != CallState::kFailed || r.sequence % 7 == 0) &&
              (r.state != CallState::kDone || r.sequence % 7 != 0);
      EXPECT_TRUE(whole) << "torn entry: index " << r.index << " seq " << r.sequence << " count "
                         << r.count << " start " << r.start_ns << " end " << r.end_ns;
      if (!whole) break;
    }
  }
  writer.join();
  EXPECT_GT(seen, 0u);
  EXPECT_EQ(recorder.records().size(), 16u);
}

// ---- (b) the summary and the dump --------------------------------------------------------

Config with_replicas(int n, milliseconds timeout) {
  Config config;
  config.local_replicas = n;
  config.timeout = timeout;
  return config;
}

// Replicas 0 and 1 reduce 1000 floats (#1) after a barrier (#0); replica 2 arrives only
// once both have timed out. Returns what run threw.
// Where run_with_late_replica's all_reduce is called from (passed on explicitly, as a
// wrapper of the user's would).
CallSite g_late_site;

std::exception_ptr run_with_late_replica(Replicator& repl) {
  harness::CountDown waiters(2);
  g_late_site = CallSite::here();
  return harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      ctx.barrier();
      std::vector<float> v(1000, 1.0f);
      if (ctx.replica_id() == 2) {
        EXPECT_TRUE(waiters.wait_for(std::chrono::seconds(30)));
      }
      const std::exception_ptr error =
          harness::capture([&] { ctx.all_reduce(v, {}, g_late_site); });
      if (ctx.replica_id() != 2) waiters.count_down();
      if (error) std::rethrow_exception(error);
    });
  });
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

TEST(FlightRecorderSummaryTest, TimeoutEndsWithALinePerReplicaNamingTheLateOne) {
  Replicator repl(with_replicas(3, milliseconds(200)));
  const std::exception_ptr error = run_with_late_replica(repl);
  const auto e = harness::caught_as<Timeout>(error);
  ASSERT_TRUE(e) << harness::describe(error);
  EXPECT_EQ(e->missing(), std::vector<int>{2});
  EXPECT_EQ(e->sequence(), 1u);
  EXPECT_TRUE(e->replica().has_value());
  const std::vector<std::string> lines = lines_of(e->what());
  ASSERT_EQ(lines.size(), 5u) << e->what();
  // The message starts as before ...
  const std::string at = " at " + to_string(g_late_site);
  EXPECT_EQ(at.rfind(" at trace_test.cc:", 0), 0u) << at;
  EXPECT_EQ(
      lines[0].rfind(
          "all_reduce #1 (all_reduce(f32 x 1000, op=sum))" + at + " timed out after 200 ms", 0),
      0u)
      << lines[0];
  EXPECT_HAS_SUBSTR(lines[0], "replica 2 never arrived");
  // ... and ends with each replica's latest collective when the first one failed: the two
  // waiting at the entry of #1 for their local peer, which was last seen at #0.
  EXPECT_EQ(lines[1].rfind("flight recorder", 0), 0u) << lines[1];
  for (const int r : {0, 1}) {
    EXPECT_EQ(lines[static_cast<std::size_t>(2 + r)].rfind(
                  "  replica " + std::to_string(r) +
                      ": step 1, #1 all_reduce f32 x 1000 (3.9 KiB)" + at + ", issued ",
                  0),
              0u)
        << e->what();
  }
  EXPECT_EQ(lines[4].rfind("  replica 2: step 1, last #0 barrier at trace_test.cc:", 0), 0u)
      << e->what();
  EXPECT_HAS_SUBSTR(lines[4], ", done ");
  EXPECT_HAS_SUBSTR(lines[4], "; never arrived at all_reduce #1 within 200 ms");
}

TEST(FlightRecorderSummaryTest, DumpInTraceDirParsesAndHoldsEveryReplica) {
  TempDir dir;
  Config config = with_replicas(3, milliseconds(200));
  config.trace.dir = (dir.path() / "dumps").string();  // made by the Replicator
  Replicator repl(config);
  repl.run([](ReplicaContext& ctx) {
    std::vector<double> v(8);
    ctx.broadcast(v);
  });
  const std::exception_ptr error = run_with_late_replica(repl);
  const auto e = harness::caught_as<Timeout>(error);
  ASSERT_TRUE(e) << harness::describe(error);
  const std::string message = e->what();
  const std::string marker = "full record in ";
  const std::size_t at = message.find(marker);
  ASSERT_NE(at, std::string::npos) << message;
  const std::string path =
      message.substr(at + marker.size(), message.find("):", at) - at - marker.size());
  ASSERT_EQ(fs::path(path).parent_path(), fs::path(config.trace.dir));
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["format"], "replicator-flight-recorder");
  EXPECT_EQ(dump["reason"], "Timeout");
  EXPECT_EQ(dump["error"].get<std::string>().rfind("all_reduce #1", 0), 0u);
  EXPECT_EQ(dump["rank"], 0);
  EXPECT_EQ(dump["summary"].size(), 3u);
  ASSERT_EQ(dump["replicas"].size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const nlohmann::json& replica = dump["replicas"][static_cast<std::size_t>(r)];
    EXPECT_EQ(replica["replica"], r);
    EXPECT_EQ(replica["capacity"], 256);
    EXPECT_EQ(replica["step"], 2);
    // Step 1: broadcast #0, end of step #1; step 2: barrier #0, all_reduce #1 (failed, on
    // the late replica too: it arrived at a poisoned group).
    const nlohmann::json& entries = replica["entries"];
    ASSERT_EQ(entries.size(), 4u) << replica.dump();
    const std::vector<std::string> ops = {"broadcast", "end of step", "barrier", "all_reduce"};
    for (std::size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(entries[i]["op"], ops[i]);
    EXPECT_EQ(entries[0]["bytes"], 64);
    EXPECT_EQ(entries[0]["dtype"], "f64");
    EXPECT_EQ(entries[0]["state"], "done");
    EXPECT_EQ(entries[3]["step"], 2);
    EXPECT_EQ(entries[3]["seq"], 1);
    EXPECT_EQ(entries[3]["count"], 1000);
    EXPECT_EQ(entries[3]["bytes"], 4000);
    EXPECT_EQ(entries[3]["state"], "failed");
    EXPECT_EQ(entries[3]["at"], to_string(g_late_site));
    EXPECT_EQ(entries[0]["at"].get<std::string>().rfind("trace_test.cc:", 0), 0u);
    EXPECT_GE(entries[3]["end_unix_us"].get<double>(), entries[3]["start_unix_us"].get<double>());
  }
  // Nothing half-written is left beside it.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(config.trace.dir)) {
    EXPECT_EQ(entry.path().extension(), ".json") << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(FlightRecorderSummaryTest, AbortedNamesTheReplicaThatFailed) {
  Replicator repl(with_replicas(2, milliseconds(30'000)));
  const std::exception_ptr error = harness::capture([&] {
    repl.run([](ReplicaContext& ctx) {
      if (ctx.replica_id() == 1) throw std::runtime_error("boom");
      ctx.barrier();
    });
  });
  // run rethrows the failure itself (not summarised); the replica it released got Aborted,
  // and a run whose first failure is an Aborted (a multi-process job) carries the summary.
  EXPECT_TRUE(harness::caught_as<ReplicaFailed>(error)) << harness::describe(error);
  const std::exception_ptr aborted = harness::capture([&] {
    repl.run([](ReplicaContext& ctx) {
      if (ctx.replica_id() == 1) throw Aborted("released by a peer", 5);
      ctx.barrier();
    });
  });
  const auto e = harness::caught_as<Aborted>(aborted);
  ASSERT_TRUE(e) << harness::describe(aborted);
  EXPECT_EQ(e->cause_replica(), 5);
  EXPECT_EQ(std::string(e->what()).rfind("released by a peer\nflight recorder", 0), 0u)
      << e->what();
  EXPECT_HAS_SUBSTR(std::string(e->what()), "\n  replica 0: step 2, #0 barrier at trace_test.cc:");
  EXPECT_HAS_SUBSTR(std::string(e->what()), ", issued ");
}

// ---- (c) SIGUSR1 -------------------------------------------------------------------------

// The dumps in `dir` (not the temporary file of one being written).
std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("flight_recorder.")) {
      files.push_back(entry.path());
    }
  }
  return files;
}

TEST(SignalDumpTest, SigusrDumpsALiveJob) {
  TempDir dir;
  Config config = with_replicas(2, milliseconds(60'000));
  config.trace.dir = dir.path().string();
  Replicator repl(config);
  harness::CountDown second_issued(1);
  nlohmann::json dump;
  repl.run([&](ReplicaContext& ctx) {
    std::vector<float> v(16, 1.0f);
    ctx.all_reduce(v);
    if (ctx.replica_id() == 1) second_issued.count_down();
    if (ctx.replica_id() == 0) {
      // Replica 1 is about to wait in all_reduce #1 for this one: a job that looks hung.
      // Dump until a dump shows it there (it may still be on its way).
      EXPECT_TRUE(second_issued.wait_for(std::chrono::seconds(20)));
      for (int attempt = 0; attempt < 100; ++attempt) {
        kill(getpid(), SIGUSR1);
        const bool written = harness::poll_until([&] { return !files_in(dir.path()).empty(); },
                                                 std::chrono::seconds(20));
        ASSERT_TRUE(written) << "no dump within 20 s of SIGUSR1";
        const fs::path file = files_in(dir.path()).front();
        std::ifstream in(file);
        dump = nlohmann::json::parse(in);
        in.close();
        fs::remove(file);
        // The summary is taken just before the entries: both must show it.
        const std::string line = dump["summary"][1];
        if (dump["replicas"][1]["entries"].back()["seq"] == 1 &&
            line.find("#1 all_reduce") != std::string::npos) {
          break;
        }
      }
    }
    ctx.all_reduce(v);
  });
  ASSERT_FALSE(dump.is_null());
  EXPECT_EQ(dump["reason"], "SIGUSR1");
  ASSERT_EQ(dump["replicas"].size(), 2u);
  const nlohmann::json& waiting = dump["replicas"][1]["entries"];
  ASSERT_EQ(waiting.size(), 2u) << dump.dump();
  EXPECT_EQ(waiting[1]["seq"], 1);
  EXPECT_EQ(waiting[1]["state"], "issued");
  EXPECT_TRUE(waiting[1]["end_unix_us"].is_null());
  EXPECT_EQ(dump["replicas"][0]["entries"][0]["state"], "done");
  EXPECT_HAS_SUBSTR(dump["summary"][1].get<std::string>(), "replica 1: step 1, #1 all_reduce");
}

std::atomic<int> program_handler_calls{0};
void program_handler(int) { program_handler_calls.fetch_add(1); }

TEST(SignalDumpTest, ProgramHandlerKeepsWorkingAndComesBack) {
  struct sigaction mine {};
  mine.sa_handler = program_handler;
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGUSR1, &mine, &before), 0);
  {
    TempDir dir;
    Config config = with_replicas(2, milliseconds(60'000));
    config.trace.dir = dir.path().string();
    Replicator repl(config);
    program_handler_calls = 0;
    kill(getpid(), SIGUSR1);
    EXPECT_TRUE(harness::poll_until([&] { return !files_in(dir.path()).empty(); },
                                    std::chrono::seconds(20)));
    EXPECT_TRUE(harness::poll_until([&] { return program_handler_calls.load() == 1; },
                                    std::chrono::seconds(20)));
  }
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGUSR1, &before, &after), 0);
  EXPECT_EQ(after.sa_handler, program_handler) << "the program's handler was not restored";
}

TEST(SignalDumpTest, OffLeavesSigusrAlone) {
  Config config = with_replicas(1, milliseconds(1000));
  config.trace.signal = false;
  Replicator repl(config);
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// A program may exit while a Replicator lives (a Python process that never destroys its
// process group does): the SIGUSR1 thread must not end it with std::terminate.
TEST(SignalDumpTest, ExitWithALiveReplicatorIsClean) {
  EXPECT_EXIT(
      {
        auto* leaked = new Replicator(with_replicas(2, milliseconds(1000)));
        leaked->run([](ReplicaContext& ctx) { ctx.barrier(); });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- (d) the timeline --------------------------------------------------------------------

TEST(TimelineTest, PathPerProcess) {
  using detail::Timeline;
  EXPECT_EQ(Timeline::path_for("run.json", 0, 1), "run.json");
  EXPECT_EQ(Timeline::path_for("run.json", 1, 2), "run.rank1.json");
  EXPECT_EQ(Timeline::path_for("/tmp/a.b/run", 0, 2), "/tmp/a.b/run.rank0");
  EXPECT_EQ(Timeline::path_for("/tmp/.trace", 3, 4), "/tmp/.trace.rank3");
}

TEST(TimelineTest, OneTrackPerReplicaWithEveryStepAndCollective) {
  TempDir dir;
  Config config = with_replicas(3, milliseconds(60'000));
  config.trace.timeline = (dir.path() / "run.json").string();
  constexpr int kBarriers = 1500;  // more than a chunk: the writer thread runs midway
  {
    Replicator repl(config);
    for (int step = 0; step < 2; ++step) {
      repl.run([](ReplicaContext& ctx) {
        std::vector<float> f(4, 1.0f);
        ctx.all_reduce(f);
        ctx.barrier();
        std::vector<double> d(8);
        ctx.broadcast(d);
      });
    }
    repl.run([](ReplicaContext& ctx) {
      for (int i = 0; i < kBarriers; ++i) ctx.barrier();
    });
  }
  std::ifstream in(config.trace.timeline);
  ASSERT_TRUE(in);
  const nlohmann::json trace = nlohmann::json::parse(in);
  ASSERT_TRUE(trace.is_array());
  std::map<int, std::string> names;
  std::map<int, std::vector<nlohmann::json>> collectives, steps;
  for (const nlohmann::json& e : trace) {
    EXPECT_EQ(e["pid"], 0);
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_GT(e["ts"].get<double>(), 1.6e15);  // microseconds since 1970
    (e["cat"] == "step" ? steps : collectives)[e["tid"]].push_back(e);
  }
  EXPECT_EQ(names,
            (std::map<int, std::string>{{0, "replica 0"}, {1, "replica 1"}, {2, "replica 2"}}));
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(steps[r].size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(steps[r][static_cast<std::size_t>(s)]["name"], "step " + std::to_string(s + 1));
    }
    const std::vector<nlohmann::json>& mine = collectives[r];
    ASSERT_EQ(mine.size(), 2u * 4 + kBarriers + 1);
    for (int s = 0; s < 2; ++s) {
      const std::vector<std::string> ops = {"all_reduce", "barrier", "broadcast", "end of step"};
      const std::vector<int> bytes = {16, 0, 64, 0};
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const nlohmann::json& e = mine[static_cast<std::size_t>(s) * 4 + k];
        EXPECT_EQ(e["name"], ops[k]);
        EXPECT_EQ(e["args"]["seq"], k);
        EXPECT_EQ(e["args"]["step"], s + 1);
        EXPECT_EQ(e["args"]["bytes"], bytes[k]);
        // The caller's line; the end of a step is the runtime's own, and names none.
        if (k < 3) {
          EXPECT_EQ(e["args"]["at"].get<std::string>().rfind("trace_test.cc:", 0), 0u) << e;
        } else {
          EXPECT_FALSE(e["args"].contains("at")) << e;
        }
        // Inside its step.
        const nlohmann::json& step = steps[r][static_cast<std::size_t>(s)];
        EXPECT_GE(e["ts"].get<double>() + 1, step["ts"].get<double>());
        EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(),
                  step["ts"].get<double>() + step["dur"].get<double>() + 1);
      }
    }
    for (int i = 0; i < kBarriers; ++i) {
      const nlohmann::json& e = mine[8 + static_cast<std::size_t>(i)];
      EXPECT_EQ(e["name"], "barrier");
      EXPECT_EQ(e["args"]["seq"], i);
      EXPECT_EQ(e["args"]["step"], 3);
    }
  }
}

TEST(TimelineTest, UncreatableFileIsConfigError) {
  TempDir dir;
  Config config = with_replicas(1, milliseconds(1000));
  config.trace.timeline = (dir.path() / "missing-folder" / "run.json").string();
  try {
    Replicator repl(config);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_HAS_SUBSTR(std::string(e.what()), config.trace.timeline);
    EXPECT_HAS_SUBSTR(std::string(e.what()), "No such file or directory");
  }
}

// ---- (e) settings ------------------------------------------------------------------------

// ---- (d) the straggler watch -------------------------------------------------------------

// The lines of `text` that the straggler watch printed.
std::vector<std::string> straggler_lines(const std::string& text) {
  std::vector<std::string> found;
  for (const std::string& line : lines_of(text)) {
    if (line.rfind("replicator: ", 0) == 0 && line.find(" waited ") != std::string::npos) {
      found.push_back(line);
    }
  }
  return found;
}

// What a job of 3 replicas said whose replica 2 sleeps 700 ms between a barrier and an
// all_reduce (straggler_after 100 ms): stderr, and the lines of the two collectives.
struct SlowReplica {
  std::string err;
  std::uint32_t barrier_line = 0;
  std::uint32_t reduce_line = 0;
};

// Runs that job; with `timeline` (a file's path), writes its timeline there.
SlowReplica run_with_a_slow_replica(const std::string& timeline = "") {
  Config config = with_replicas(3, milliseconds(30'000));
  config.trace.straggler_after = milliseconds(100);
  if (!timeline.empty()) config.trace.timeline = timeline;
  std::atomic<std::uint32_t> barrier_line{0}, reduce_line{0};
  Replicator repl(config);
  testing::internal::CaptureStderr();
  repl.run([&](ReplicaContext& ctx) {
    barrier_line = CallSite::here().line + 1;
    ctx.barrier();
    if (ctx.replica_id() == 2) std::this_thread::sleep_for(milliseconds(700));
    std::vector<float> v(4, 1.0f);
    reduce_line = CallSite::here().line + 1;
    ctx.all_reduce(v);
  });
  return {testing::internal::GetCapturedStderr(), barrier_line, reduce_line};
}

TEST(StragglerTest, AReplicaSlowInComputeIsNamedOnceWithItsLastCollective) {
  const SlowReplica job = run_with_a_slow_replica();
  const std::vector<std::string> lines = straggler_lines(job.err);
  ASSERT_EQ(lines.size(), 1u) << job.err;
  const std::string& line = lines[0];
  EXPECT_EQ(line.rfind("replicator: replicas 0-1 have waited ", 0), 0u) << line;
  EXPECT_HAS_SUBSTR(line, " at all_reduce #1 at trace_test.cc:" + std::to_string(job.reduce_line) +
                              " for replica 2 (this process): in compute for ");
  EXPECT_HAS_SUBSTR(line, " since its collective barrier #0 at trace_test.cc:" +
                              std::to_string(job.barrier_line));
}

// The "straggler" events of the timeline file at `path`.
std::vector<nlohmann::json> straggler_events(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<nlohmann::json> found;
  if (!in) return found;
  for (const nlohmann::json& e : nlohmann::json::parse(in)) {
    if (e["name"] == "straggler") found.push_back(e);
  }
  return found;
}

TEST(StragglerTest, TheTimelineMarksTheWaitOnEachWaitingReplicasTrack) {
  TempDir dir;
  const std::string path = (dir.path() / "run.json").string();
  const SlowReplica job = run_with_a_slow_replica(path);
  const std::vector<std::string> printed = straggler_lines(job.err);
  const std::uint32_t barrier_line = job.barrier_line;
  const std::uint32_t reduce_line = job.reduce_line;
  ASSERT_EQ(printed.size(), 1u);
  const std::vector<nlohmann::json> events = straggler_events(path);
  ASSERT_EQ(events.size(), 2u) << nlohmann::json(events).dump(1);
  std::vector<int> tracks;
  for (const nlohmann::json& e : events) {
    tracks.push_back(e["tid"]);
    EXPECT_EQ(e["ph"], "i") << e;
    EXPECT_EQ(e["pid"], 0) << e;
    EXPECT_GT(e["ts"].get<double>(), 1.6e15) << e;
    const nlohmann::json& args = e["args"];
    EXPECT_EQ(args["op"], "all_reduce") << e;
    EXPECT_EQ(args["seq"], 1) << e;
    EXPECT_EQ(args["at"], "trace_test.cc:" + std::to_string(reduce_line)) << e;
    EXPECT_GE(args["waited_us"].get<double>(), 100'000.0) << e;
    EXPECT_EQ(args["line"], printed[0]) << e;
    ASSERT_EQ(args["missing"].size(), 1u) << e;
    const nlohmann::json& missing = args["missing"][0];
    EXPECT_EQ(missing["replicas"], "replica 2") << e;
    EXPECT_EQ(missing["process"], 0) << e;
    EXPECT_EQ(missing["state"], "alive") << e;
    EXPECT_EQ(missing["last"], "barrier #0 at trace_test.cc:" + std::to_string(barrier_line)) << e;
    EXPECT_EQ(missing["doing"].get<std::string>().rfind("in compute for ", 0), 0u) << e;
  }
  std::sort(tracks.begin(), tracks.end());
  EXPECT_EQ(tracks, (std::vector<int>{0, 1}));  // the waiting replicas', not replica 2's
}

TEST(StragglerTest, NoLineWhenEveryoneArrivesInTimeOrWhenOff) {
  // With the default (a quarter of the 2 s timeout: 500 ms), 200 steps in which everyone
  // arrives print nothing and mark nothing on the timeline; switched off, not even a replica 800 ms
  // late in the first step, which the default would name.
  for (const milliseconds after : {milliseconds(0), milliseconds(-1)}) {
    TempDir dir;
    Config config = with_replicas(2, milliseconds(2'000));
    config.trace.straggler_after = after;
    config.trace.timeline = (dir.path() / "run.json").string();
    std::string err;
    {
      Replicator repl(config);
      testing::internal::CaptureStderr();
      for (int step = 0; step < 200; ++step) {
        repl.run([&](ReplicaContext& ctx) {
          std::vector<float> v(64, 1.0f);
          ctx.all_reduce(v);
          if (after.count() < 0 && ctx.replica_id() == 1 && step == 0) {
            std::this_thread::sleep_for(milliseconds(800));
          }
          ctx.barrier();
        });
      }
      err = testing::internal::GetCapturedStderr();
    }
    EXPECT_TRUE(straggler_lines(err).empty()) << err;
    EXPECT_TRUE(straggler_events(config.trace.timeline).empty());
  }
  Config config;
  config.timeout = milliseconds(60'000);
  EXPECT_EQ(config.straggler_limit(), milliseconds(5'000));
  config.timeout = milliseconds(2'000);
  EXPECT_EQ(config.straggler_limit(), milliseconds(500));
  config.set("straggler-after", "off");
  EXPECT_EQ(config.straggler_limit(), milliseconds(0));
  config.set("straggler-after", "2s");
  EXPECT_EQ(config.straggler_limit(), milliseconds(2'000));
}

TEST(StragglerTest, StatusFilesRoundTripAndProcStates) {
  detail::ProcessStatus s{.rank = 1, .pid = 4242, .host = "node a", .written_unix_ns = 17};
  s.replicas.push_back({.replica = 2,
                        .step = 3,
                        .sequence = 40,
                        .state = CallState::kDone,
                        .any = true,
                        .op = "end of step",
                        .site = "my_train 100%.cc:118",
                        .start_unix_ns = 5,
                        .end_unix_ns = 9});
  s.replicas.push_back({.replica = 3});
  const std::optional<detail::ProcessStatus> back = detail::parse_status(detail::status_text(s));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->host, "node a");
  EXPECT_EQ(back->written_unix_ns, 17);
  ASSERT_EQ(back->replicas.size(), 2u);
  EXPECT_EQ(back->replicas[0].op, "end of step");
  EXPECT_EQ(back->replicas[0].site, "my_train 100%.cc:118");
  EXPECT_EQ(back->replicas[0].sequence, 40u);
  EXPECT_EQ(back->replicas[0].end_unix_ns, 9);
  EXPECT_TRUE(back->replicas[0].any);
  EXPECT_FALSE(back->replicas[1].any);
  EXPECT_EQ(back->replicas[1].site, "");
  EXPECT_FALSE(detail::parse_status("replicator-status 2\n"));
  EXPECT_FALSE(detail::parse_status("rank 1\n"));
  EXPECT_FALSE(detail::parse_status(detail::status_text(s) + "replica x\n"));

  EXPECT_EQ(detail::process_state(getpid()), "alive");
  const pid_t child = fork();
  if (child == 0) {
    raise(SIGSTOP);
    _exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  EXPECT_EQ(detail::process_state(child), "stopped");
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  EXPECT_EQ(detail::process_state(child), "gone");
}

TEST(TraceConfigTest, BadValuesAreConfigErrors) {
  Config config;
  EXPECT_THROW(config.set("flight-recorder-size", "-1"), ConfigError);
  EXPECT_THROW(config.set("flight-recorder-size", "lots"), ConfigError);
  EXPECT_THROW(config.set("trace-signal", "maybe"), ConfigError);
  EXPECT_THROW(config.set("trace-dir", ""), ConfigError);
  EXPECT_THROW(config.set("timeline", ""), ConfigError);
  config.set("flight-recorder-size", "0");
  EXPECT_EQ(config.trace.flight_recorder_size, 0);
  config.set("trace-signal", "off");
  EXPECT_FALSE(config.trace.signal);
}

TEST(TraceConfigTest, UnwritableTraceDirIsConfigError) {
  TempDir dir;
  const fs::path file = dir.path() / "a-file";
  std::ofstream(file) << "x";
  Config config = with_replicas(1, milliseconds(1000));
  config.trace.dir = (file / "dumps").string();
  try {
    Replicator repl(config);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_HAS_SUBSTR(std::string(e.what()), config.trace.dir);
  }
}

}  // namespace
}  // namespace replicator
