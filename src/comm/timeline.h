// Timeline: a Chrome trace-event JSON file (the array form) of every step and collective of
// this process's replicas, which Perfetto (ui.perfetto.dev) and chrome://tracing open:
// one track per process (pid = its rank), one per replica (tid = its global id, named
// "replica <id>"), an "X" (complete) event per step ("step <n>") and per collective (its
// op; args: step, seq, dtype, count, bytes, at (file:line), and state when it failed). Timestamps
// are microseconds since the Unix epoch, so the files of a job's processes line up.
//
// The replicas never wait for the file: each appends to its own lane's chunk (no lock), a
// full chunk goes to a writer thread, which formats and writes it. The file is valid JSON
// once the Timeline is destroyed; before that it lacks only the closing bracket, which the
// viewers accept (a job killed midway still opens, up to its last full chunk).
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "replicator/dtype.h"
#include "src/comm/flight_recorder.h"

namespace replicator::detail {

// Nanoseconds as microseconds with three decimals ("-12.345"), for JSON: exact, with no
// rounding through a double. Never throws but std::bad_alloc.
std::string json_micros(std::int64_t ns);
// `text` as a JSON string, quotes included, with quotes, backslashes and control bytes
// escaped. Never throws but std::bad_alloc.
std::string json_string(std::string_view text);

struct TimelineEvent {
  bool is_step = false;  // a step; else a collective
  CallState state = CallState::kDone;
  DType dtype = DType::kF32;
  std::string_view op;  // static storage (the collectives' table)
  std::uint64_t step = 0;
  std::uint64_t sequence = 0;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::int64_t start_ns = 0;  // steady_clock
  std::int64_t end_ns = 0;
  CallSite where;  // the caller's line (args "at"); unknown for steps
};

class Timeline;

// One replica's buffer: written by that replica's thread only.
class TimelineLane {
 public:
  // Appends one event. Never blocks but to hand a full chunk (1024 events) to the writer;
  // never throws but std::bad_alloc.
  void add(const TimelineEvent& event);

 private:
  friend class Timeline;
  struct Chunk {
    int replica = 0;
    std::size_t size = 0;
    std::array<TimelineEvent, 1024> events;
  };
  TimelineLane(Timeline& owner, int replica);
  Timeline& owner_;
  const int replica_;
  std::unique_ptr<Chunk> chunk_;
};

class Timeline {
 public:
  // Creates (truncates) `path` and starts the writer thread, for replicas first ..
  // first + num_local - 1 of process `rank`. Throws ConfigError naming the path and the
  // system's reason when the file cannot be created.
  Timeline(const std::string& path, int rank, int first, int num_local);
  // Writes what the lanes hold, closes the JSON array and the file, joins the writer. Only
  // once no replica thread runs. A write that failed on the way is reported on stderr (one
  // line naming the file).
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  TimelineLane* lane(int local) { return lanes_[static_cast<std::size_t>(local)].get(); }

  // Adds an instant event `name` (category `category`) at `at_ns` (steady_clock) on the
  // track of replica `replica` (a global id, which need not be this process's), with
  // `args_json` (a JSON object's text) as its arguments. Any thread: the event goes to the
  // writer thread, which writes it with the next chunk. Never blocks but on the lock the
  // lanes take to hand over a full chunk; never throws but std::bad_alloc.
  void mark(int replica, std::string_view name, std::string_view category, std::int64_t at_ns,
            std::string_view args_json);
  const std::string& path() const { return path_; }

  // The file a process of a job writes: `path` itself in a one-process job, else with
  // ".rank<R>" before the extension ("run.json" -> "run.rank1.json").
  static std::string path_for(const std::string& path, int rank, int processes);

 private:
  friend class TimelineLane;
  std::unique_ptr<TimelineLane::Chunk> exchange(std::unique_ptr<TimelineLane::Chunk> full);
  void write_chunk(const TimelineLane::Chunk& chunk);
  void write_line(const std::string& line);
  void write_marks(const std::vector<std::string>& marks);
  void writer_loop();

  const std::string path_;
  const int rank_;
  const std::int64_t unix_offset_ns_;  // system_clock - steady_clock when made
  std::FILE* file_ = nullptr;
  bool first_line_ = true;
  bool write_failed_ = false;
  std::vector<std::unique_ptr<TimelineLane>> lanes_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<TimelineLane::Chunk>> full_;
  std::vector<std::unique_ptr<TimelineLane::Chunk>> free_;
  std::vector<std::string> marks_;  // instant events' lines, for the writer
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace replicator::detail
