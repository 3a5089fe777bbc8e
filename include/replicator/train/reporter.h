// What every training job (classifier, GAN, IMPALA) shares around its own loop: the
// reporter that prints progress on stderr, appends metrics.jsonl and writes TensorBoard event
// files (replicator/train/tensorboard.h), the ETA text, the check that every replica starts
// from the same step, and the --json result line. No LibTorch here
// (replicator/train/job_checkpoint.h holds the checkpoint glue that needs it).
//
// A job holds its reporter through the skeleton (replicator/train/job.h: JobReplica's
// report_until on replica 0); each step: reporter->count_step(), and now and then
//   reporter->progress("step 10/100 ... ETA " + clock_text(reporter->eta(s)));
//   reporter->metric({{"type", "train"}, {"step", 10}, {"loss", 0.5}});
// then print_json_result with --json.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "replicator/train/tensorboard.h"

namespace replicator {
class ReplicaContext;
}

namespace replicator::train {

struct Image;

// "H:MM:SS" of a duration in seconds (negative and NaN read as 0). Never throws but
// std::bad_alloc.
std::string clock_text(double seconds);

// A count as a progress line shows it: "950", "12.5k", "3.20M". Never throws but
// std::bad_alloc.
std::string count_text(double n);

// Seconds on the steady clock since `start`, as a job's results and rates count them. Never
// blocks; never throws.
double seconds_since(std::chrono::steady_clock::time_point start);

// Seconds left for `done` of `total` steps that took `elapsed` seconds so far, at the same
// pace (0 when nothing is done yet or nothing is left).
double eta_seconds(double elapsed, std::int64_t done, std::int64_t total);

// Rewrites the JSON lines file `path` without the lines whose integer "step" is past `step`
// (written by an earlier run after its last checkpoint), through a temporary file in the same
// folder and a rename; untouched when it is missing or nothing is past `step`. Lines that are
// not JSON objects with a "step" are kept. BLOCKS on file I/O. Throws DataError when the file
// cannot be rewritten.
void keep_metrics_up_to(const std::filesystem::path& path, std::int64_t step);

struct JobReporterOptions {
  // Folder for metrics.jsonl (created if missing); empty: no file is written.
  std::filesystem::path out;
  // TensorBoard log folder (created if missing) for the records' numbers and the images;
  // empty: none. Each run starts a new event file there.
  std::filesystem::path tensorboard;
  // A progress line rewritten in place when `err` is a terminal; false (--no-progress), or
  // not a terminal: plain lines, one about every 10% of the steps (and every
  // `plain_every_s` seconds when set).
  bool progress = true;
  std::int64_t resume_step = 0;   // the step the run starts at (0: afresh)
  std::int64_t steps_to_run = 0;  // steps this run will take (for the plain lines' pace)
  std::optional<double> plain_every_s;
  std::FILE* err = stderr;       // where progress lines go
  std::optional<bool> terminal;  // whether `err` is a terminal; empty: isatty(err)
};

// What the reporting process (the one holding replica 0) prints and writes for a job: a
// progress line on stderr, notes, and metrics.jsonl (one JSON object per line, each flushed
// as written, so a crashed run keeps what it logged). Not thread-safe: one replica thread
// uses it.
class JobReporter {
 public:
  // Creates `out` and drops the lines of metrics.jsonl past `resume_step` (keep_metrics_up_to),
  // so that a resumed run repeats no step, then opens it for appending. With `tensorboard`,
  // starts an event file there; a resumed run marks a restart at resume_step + 1, so that
  // TensorBoard drops what earlier files hold past the resume step. BLOCKS on file I/O.
  // Throws DataError when a folder or a file cannot be written.
  explicit JobReporter(JobReporterOptions options);
  ~JobReporter();
  JobReporter(const JobReporter&) = delete;
  JobReporter& operator=(const JobReporter&) = delete;

  // One more step taken by this run (the pace of the plain lines and of eta()).
  void count_step() { ++done_; }
  std::int64_t steps_done() const { return done_; }
  // Seconds left at the pace of this run's steps so far, `elapsed` since it started.
  double eta(double elapsed) const { return eta_seconds(elapsed, done_, options_.steps_to_run); }

  // Shows `line` as the progress line: on a terminal it replaces the previous one (\r); else
  // it is printed as a plain line when about 10% of the steps (or plain_every_s) passed since
  // the last one printed, and dropped otherwise. Never throws.
  void progress(const std::string& line);
  // Prints `line` as a line of its own (after ending a progress line on a terminal). Never
  // throws.
  void note(const std::string& line);
  // Appends `record` as one line of metrics.jsonl and flushes it; nothing without `out`.
  // With `tensorboard`, also writes each number of a record that has an integer "step" (not
  // the step, not booleans or strings) as the scalar "<type>/<key>" ("train/loss"; the key
  // alone in a record without "type") at that step. BLOCKS on file I/O. Throws DataError when
  // the line or an event cannot be written.
  void metric(const nlohmann::ordered_json& record);
  // Writes `image` (replicator/train/png.h) as the TensorBoard image `tag` at `step`; nothing
  // without `tensorboard`. BLOCKS on file I/O. Throws InvalidArgument on an image that
  // encode_png refuses, DataError when the event cannot be written.
  void image(const std::string& tag, std::int64_t step, const Image& image);
  // A picture of the run: writes `image` as <out>/<name>.png (nothing without `out`) and as
  // the TensorBoard image `name` at `step` (nothing without `tensorboard`). BLOCKS on file
  // I/O. Throws InvalidArgument on an image that encode_png refuses, DataError when the file
  // or the event cannot be written.
  void picture(const std::string& name, std::int64_t step, const Image& image);
  // Ends the progress line on a terminal and closes metrics.jsonl and the TensorBoard file;
  // nothing is written after it. Idempotent; the destructor calls it. Never throws.
  void finish();

  // The folder of metrics.jsonl (empty: none); metrics_path() is empty without one.
  const std::filesystem::path& out() const { return options_.out; }
  std::filesystem::path metrics_path() const;
  bool terminal() const { return terminal_; }

 private:
  void end_progress_line();

  JobReporterOptions options_;
  bool terminal_ = false;
  bool line_open_ = false;  // a \r progress line is on the terminal
  std::ofstream metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
  std::int64_t done_ = 0;
  std::int64_t next_plain_ = 0;
  double last_plain_s_ = -1;  // steady-clock seconds of the last plain line; -1: none
};

// Checks that every replica starts from the same step: `step` is this replica's (from its
// checkpoint). A collective: every replica calls it, BLOCKS until all have. Throws DataError
// naming `out` when they differ (the processes saw different checkpoint folders), and what
// all_reduce throws.
void check_same_start_step(ReplicaContext& ctx, std::int64_t step,
                           const std::filesystem::path& out);

// Prints `result` as one JSON object on one line of stdout (--json) and flushes. Never throws
// but std::bad_alloc.
void print_json_result(const nlohmann::ordered_json& result);

}  // namespace replicator::train
