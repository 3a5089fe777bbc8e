// The summary of timeline files (replicator/train/timeline_summary.h): waiting counted from each
// replica's arrival to the last one's, over the collectives every replica made, across the
// files of several processes, and what is not a timeline.
#include "replicator/train/timeline_summary.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "replicator/errors.h"

namespace replicator::train {
namespace {

// One collective event as the timeline writes it.
std::string collective(int pid, int tid, std::int64_t seq, double ts, double dur,
                       std::int64_t step = 1) {
  return R"({"name":"all_reduce","cat":"collective","ph":"X","pid":)" + std::to_string(pid) +
         R"(,"tid":)" + std::to_string(tid) + R"(,"ts":)" + std::to_string(ts) + R"(,"dur":)" +
         std::to_string(dur) + R"(,"args":{"step":)" + std::to_string(step) + R"(,"seq":)" +
         std::to_string(seq) + R"(,"dtype":"f32","count":4,"bytes":16}})";
}

std::string thread_name(int pid, int tid, const std::string& name) {
  return R"({"name":"thread_name","ph":"M","pid":)" + std::to_string(pid) + R"(,"tid":)" +
         std::to_string(tid) + R"(,"args":{"name":")" + name + R"("}})";
}

std::string step(int pid, int tid, double ts, double dur) {
  return R"({"name":"step 1","cat":"step","ph":"X","pid":)" + std::to_string(pid) + R"(,"tid":)" +
         std::to_string(tid) + R"(,"ts":)" + std::to_string(ts) + R"(,"dur":)" +
         std::to_string(dur) + R"(,"args":{"step":1}})";
}

std::string file(const std::vector<std::string>& events, bool closed = true) {
  std::string text = "[\n";
  for (const std::string& e : events) text += e + ",\n";
  if (closed) {
    text.resize(text.size() - 2);
    text += "\n]\n";
  }
  return text;
}

// Two replicas of one process; three collectives. Replica 1 comes 50 us after replica 0
// to the first, replica 0 20 us after replica 1 to the second, replica 1 100 us later to
// the third; each ends 10 us after the last arrival.
TEST(TimelineSummaryTest, WaitingRunsFromEachArrivalToTheLastOne) {
  const std::string text = file({thread_name(0, 0, "replica 0"), thread_name(0, 1, "replica 1"),
                                 collective(0, 0, 0, 1000, 60), collective(0, 1, 0, 1050, 10),
                                 collective(0, 0, 1, 1120, 10), collective(0, 1, 1, 1100, 30),
                                 collective(0, 0, 2, 1200, 110), collective(0, 1, 2, 1300, 10),
                                 step(0, 0, 900, 1000), step(0, 1, 900, 1000)});
  const TimelineSummary s = summarize_timelines({text}, {"run.json"});
  EXPECT_EQ(s.matched, 3);
  EXPECT_EQ(s.unmatched, 0);
  ASSERT_EQ(s.replicas.size(), 2u);
  const ReplicaTime& r0 = s.replicas[0];
  const ReplicaTime& r1 = s.replicas[1];
  EXPECT_EQ(r0.name, "replica 0");
  EXPECT_EQ(r1.name, "replica 1");
  EXPECT_EQ(r0.collectives, 3);
  EXPECT_DOUBLE_EQ(r0.collective_us, 180);
  EXPECT_DOUBLE_EQ(r1.collective_us, 50);
  EXPECT_DOUBLE_EQ(r0.waiting_us, 150);  // 50 at the first, 100 at the third
  EXPECT_DOUBLE_EQ(r1.waiting_us, 20);   // 20 at the second
  EXPECT_EQ(r0.last, 1);                 // the second
  EXPECT_EQ(r1.last, 2);
  EXPECT_DOUBLE_EQ(r0.span_us, 1000);  // its step
}

// The files of two processes (one replica each) line up by their timestamps; one file was
// cut off before its closing bracket (its job was killed); a collective only one process's
// file holds is not matched, and no waiting is counted at it. Without step events the span
// runs from the first collective to the end of the last.
TEST(TimelineSummaryTest, FilesOfSeveralProcessesAndACutOffOne) {
  const std::string rank0 = file({thread_name(0, 0, "replica 0"), collective(0, 0, 0, 0, 40),
                                  collective(0, 0, 1, 100, 5), collective(0, 0, 2, 200, 50)});
  const std::string rank1 = file(
      {thread_name(1, 1, "replica 1"), collective(1, 1, 0, 30, 10), collective(1, 1, 1, 104, 1)},
      /*closed=*/false);
  const TimelineSummary s =
      summarize_timelines({rank1, rank0}, {"run.rank1.json", "run.rank0.json"});
  EXPECT_EQ(s.matched, 2);
  EXPECT_EQ(s.unmatched, 1);
  ASSERT_EQ(s.replicas.size(), 2u);
  EXPECT_EQ(s.replicas[0].process, 0);
  EXPECT_EQ(s.replicas[1].process, 1);
  EXPECT_DOUBLE_EQ(s.replicas[0].waiting_us, 34);  // 30 + 4
  EXPECT_DOUBLE_EQ(s.replicas[1].waiting_us, 0);
  EXPECT_DOUBLE_EQ(s.replicas[0].span_us, 250);
  EXPECT_DOUBLE_EQ(s.replicas[1].span_us, 75);
  EXPECT_EQ(s.replicas[1].last, 2);
}

// Calls are matched by step and sequence number (each run() numbers its collectives from
// 0); an arrival at the same microsecond as another's credits no one with being last; a
// file cut off in the middle of a line loses that line; a thread with steps and no
// collective is not a replica.
TEST(TimelineSummaryTest, StepsTiesHalfLinesAndThreadsWithoutCollectives) {
  const std::string rank0 = file({collective(0, 0, 0, 0, 10, 1), collective(0, 0, 0, 100, 10, 2),
                                  collective(0, 0, 1, 200, 10, 2), step(0, 5, 0, 300)});
  std::string rank1 = file({collective(1, 0, 0, 5, 5, 1), collective(1, 0, 0, 100, 10, 2),
                            collective(1, 0, 1, 190, 20, 2)},
                           /*closed=*/false);
  rank1 += R"({"name":"all_reduce","cat":"collective","ph":"X","pid":1,"ti)";  // half a line
  const TimelineSummary s = summarize_timelines({rank0, rank1}, {"r0.json", "r1.json"});
  EXPECT_EQ(s.matched, 3);
  EXPECT_EQ(s.unmatched, 0);
  ASSERT_EQ(s.replicas.size(), 2u);                        // not process 0's thread 5
  EXPECT_DOUBLE_EQ(s.replicas[1].waiting_us, 0 + 0 + 10);  // (step 1, 0): 0 of 5 us
  EXPECT_DOUBLE_EQ(s.replicas[0].waiting_us, 5);
  EXPECT_EQ(s.replicas[0].last, 1);  // (step 2, 1)
  EXPECT_EQ(s.replicas[1].last, 1);  // (step 1, 0); (step 2, 0) is a tie
  EXPECT_DOUBLE_EQ(s.replicas[0].matched_us, 30);
  // The same file twice, or a leftover file of another run beside them, is refused.
  EXPECT_THROW(summarize_timelines({rank0, rank0}, {"a.json", "a.json"}), ConfigError);
  EXPECT_THROW(summarize_timelines({rank0, rank0}, {"a.json", "b.json"}), ConfigError);
}

TEST(TimelineSummaryTest, WhatIsNotATimelineIsAConfigErrorNamingTheFile) {
  try {
    summarize_timelines({"not json"}, {"bad.json"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(summarize_timelines({R"({"a": 1})"}, {"object.json"}), ConfigError);
  // A trace without any collective says so.
  EXPECT_THROW(summarize_timelines({file({step(0, 0, 0, 10)})}, {"steps.json"}), ConfigError);
  EXPECT_THROW(summarize_timelines({"[]"}, {"empty.json"}), ConfigError);
  // An event whose fields have other types than the timeline writes.
  try {
    summarize_timelines(
        {R"([{"name":"all_reduce","cat":"collective","ph":"X","pid":0,"tid":0,"ts":"soon",)"
         R"("dur":1,"args":{"step":1,"seq":0}}])"},
        {"typed.json"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("typed.json"), std::string::npos) << e.what();
  }
  // A thread name without its arguments is skipped, not read.
  const TimelineSummary s = summarize_timelines(
      {file({R"({"name":"thread_name","ph":"M","pid":0,"tid":0})", collective(0, 0, 0, 0, 1)})},
      {"bare.json"});
  ASSERT_EQ(s.replicas.size(), 1u);
  EXPECT_EQ(s.replicas[0].name, "process 0 thread 0");
}

}  // namespace
}  // namespace replicator::train
