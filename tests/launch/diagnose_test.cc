// The verdict on a job's flight-recorder dumps, from dumps written as the runtime writes
// them (src/runtime/trace.h), read in every order.
#include "replicator/launch/diagnose.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "replicator/errors.h"

namespace replicator::launch {
namespace {

// One entry of a dump.
std::string entry(int step, int seq, const std::string& op, const std::string& state,
                  const std::string& at) {
  return R"({"step": )" + std::to_string(step) + R"(, "seq": )" + std::to_string(seq) +
         R"(, "op": ")" + op + R"(", "dtype": "f32", "count": 4, "bytes": 16, "state": ")" + state +
         R"(", "start_unix_us": 1.0, "end_unix_us": null, "duration_us": 1.0)" +
         (at.empty() ? "" : R"(, "at": ")" + at + "\"") + "}";
}

// A dump of process `rank` (2 local replicas of 2 processes) whose replicas' entries are
// `first` and `second` (each a list of entries, oldest first).
std::string dump(int rank, const std::string& reason, const std::string& error,
                 const std::vector<std::string>& first, const std::vector<std::string>& second,
                 double time_us = 100.0) {
  const auto entries = [](const std::vector<std::string>& list) {
    std::string out;
    for (const std::string& e : list) out += (out.empty() ? "" : ", ") + e;
    return "[" + out + "]";
  };
  return R"({"format": "replicator-flight-recorder", "version": 1, "reason": ")" + reason +
         R"(", "error": ")" + error + R"(", "rank": )" + std::to_string(rank) +
         R"(, "processes": 2, "local_replicas": 2, "pid": )" + std::to_string(1000 + rank) +
         R"(, "unix_time_us": )" + std::to_string(time_us) + R"(, "summary": [], "replicas": [)" +
         R"({"replica": )" + std::to_string(2 * rank) + R"(, "entries": )" + entries(first) +
         "}, " + R"({"replica": )" + std::to_string(2 * rank + 1) + R"(, "entries": )" +
         entries(second) + "}]}";
}

const std::string kBarrier = entry(1, 0, "barrier", "done", "train.cc:10");
const std::string kWaiting = entry(1, 1, "all_reduce", "in_progress", "train.cc:12");
const std::string kFailed = entry(1, 1, "all_reduce", "failed", "train.cc:12");

void expect_same(const Diagnosis& a, const Diagnosis& b) {
  EXPECT_EQ(a.verdict, b.verdict);
  EXPECT_EQ(a.lines, b.lines);
  EXPECT_EQ(a.json, b.json);
}

TEST(Diagnose, NamesTheReplicaThatFellBehindAndWhereTheOthersWaited) {
  const std::vector<std::string> texts = {
      dump(0, "Timeout", "all_reduce #1 timed out\\nflight recorder", {kBarrier, kFailed},
           {kBarrier, kFailed}),
      dump(1, "SIGUSR1", "", {kBarrier}, {kBarrier, kWaiting})};
  const Diagnosis d = diagnose_dumps(texts, {"a.json", "b.json"});
  EXPECT_EQ(d.verdict,
            "replica 2 fell behind first: last barrier #0 at train.cc:10 (step 1), done; "
            "replicas 0-1, 3 waited at all_reduce #1 at train.cc:12 (step 1)");
  ASSERT_GE(d.lines.size(), 4u);
  EXPECT_EQ(d.lines[0],
            "replicas 0-1 (process 0, pid 1000): failed at all_reduce #1 at train.cc:12 (step 1)");
  EXPECT_EQ(d.lines[1],
            "replica 2 (process 1, pid 1001): last barrier #0 at train.cc:10 (step 1), done");
  EXPECT_EQ(d.lines[3], "process 0: Timeout: all_reduce #1 timed out");
  EXPECT_NE(d.json.find(R"("first":[2])"), std::string::npos) << d.json;
  // Read the other way round: the same verdict, word for word.
  expect_same(d, diagnose_dumps({texts[1], texts[0]}, {"b.json", "a.json"}));
}

TEST(Diagnose, AProcessWithoutADumpIsNamed) {
  const Diagnosis d = diagnose_dumps(
      {dump(0, "Timeout", "all_reduce #1 timed out", {kBarrier, kFailed}, {kBarrier, kFailed})},
      {"a.json"});
  EXPECT_EQ(d.verdict,
            "process 1 wrote no dump (killed or stopped before it could); replicas 0-1 waited "
            "at all_reduce #1 at train.cc:12 (step 1)");
  EXPECT_EQ(d.lines[1],
            "replicas 2-3 (process 1): no dump from its process (killed or stopped before it "
            "could write one)");
}

TEST(Diagnose, AMismatchIsSaidAsTheErrorSaysIt) {
  const std::string error =
      "collective #1 does not match across processes: process 0 (replicas 0-1) called "
      "all_reduce(f32 x 4, op=sum) at train.cc:12; process 1 (replicas 2-3) called "
      "broadcast(f32 x 4, root=0) at train.cc:14.";
  const Diagnosis d = diagnose_dumps({dump(0, "CollectiveMismatch", error, {kFailed}, {kFailed}),
                                      dump(1, "CollectiveMismatch", error, {kFailed}, {kFailed})},
                                     {"a.json", "b.json"});
  EXPECT_EQ(d.verdict, "replicas called different collectives: " + error);
}

TEST(Diagnose, TheLatestDumpOfAProcessSpeaksForItAndOtherFilesAreSkipped) {
  const std::vector<std::string> texts = {
      dump(0, "SIGUSR1", "", {kBarrier}, {kBarrier}, 50.0),
      dump(0, "SIGUSR1", "", {kBarrier, kWaiting}, {kBarrier, kWaiting}, 60.0),
      dump(1, "SIGUSR1", "", {kBarrier, kWaiting}, {kBarrier, kWaiting}),
      "{\"format\": \"something else\"}", "not json"};
  const std::vector<std::string> names = {"r0-old", "r0-new", "r1", "other", "junk"};
  const Diagnosis d = diagnose_dumps(texts, names);
  EXPECT_EQ(d.verdict,
            "no replica fell behind: every one is at all_reduce #1 at train.cc:12 (step 1)");
  EXPECT_EQ(d.skipped.size(), 2u);
  EXPECT_EQ(d.lines.back(), "dumps read: r0-new, r1");
  std::vector<std::size_t> order = {0, 1, 2, 3, 4};
  while (std::next_permutation(order.begin(), order.end())) {
    std::vector<std::string> t;
    std::vector<std::string> n;
    for (const std::size_t i : order) {
      t.push_back(texts[i]);
      n.push_back(names[i]);
    }
    expect_same(d, diagnose_dumps(t, n));
  }
  EXPECT_THROW(diagnose_dumps({"junk"}, {"junk"}), ConfigError);
  // Dumps written before `since` (another run's) are skipped.
  const Diagnosis recent = diagnose_dumps(texts, names, 55);
  EXPECT_EQ(recent.lines.back(), "dumps read: r0-new, r1");
  EXPECT_EQ(recent.skipped.size(), 3u);
  EXPECT_EQ(recent.skipped[0].rfind("r0-old: written before 55 us", 0), 0u) << recent.skipped[0];
  const Diagnosis newest = diagnose_dumps(texts, names, 70);
  EXPECT_EQ(newest.lines.back(), "dumps read: r1");
  EXPECT_THROW(diagnose_dumps(texts, names, 200), ConfigError);
  EXPECT_THROW(diagnose("/nonexistent/folder"), ConfigError);
}

}  // namespace
}  // namespace replicator::launch
