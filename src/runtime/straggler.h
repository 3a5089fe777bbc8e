// The straggler watch: names the replicas a collective waits for, long before its deadline.
//
// A thread per Replicator wakes a few times per `limit` and reads its replicas' flight
// recorders (which never block the replicas). When a replica has waited at a collective
// for `limit` and some replica has not arrived, the process prints one line, once per
// collective:
//
//   replicator: replicas 0-1 have waited 1.0 s at all_reduce #41 at train.cc:120 for
//   replicas 2-3 (process 1, pid 4242, stopped): last barrier #40 at train.cc:118, done
//   1.3 s ago
//   replicator: replica 3 has waited 1.0 s at all_reduce #41 at train.cc:120 for replica 2
//   (this process): in compute for 1.0 s since its collective barrier #40 at train.cc:118
//
// With a timeline (Config::timeline), each waiting replica's track also gets an instant
// event "straggler" at the moment the line is printed, whose arguments name the collective
// and the missing replicas (their process, its state, their last collective).
//
// The flight recorder must be on (Config::flight_recorder_size > 0).
// What it knows of the other processes it reads from their status files: in a job of
// several processes, each watch also writes its replicas' latest collectives to a small
// file (a status board in /dev/shm, one file per process, rewritten when something
// changed), so a process on the same host can be named even when it is stopped or gone:
// its process state comes from /proc. Processes on other hosts are named as not visible.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/comm/flight_recorder.h"
#include "src/comm/timeline.h"

namespace replicator::detail {

// One replica's latest collective as a status file holds it.
struct ReplicaStatus {
  int replica = 0;
  std::uint64_t step = 0;
  std::uint64_t sequence = 0;
  CallState state = CallState::kDone;
  bool any = false;  // it has issued a collective
  std::string op;
  std::string site;  // "train.cc:120", or empty
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
};

// One process's status file.
struct ProcessStatus {
  int rank = 0;
  long pid = 0;
  std::string host;
  std::int64_t written_unix_ns = 0;
  std::vector<ReplicaStatus> replicas;
};

// The text of a status file, and back (nullopt for text that is not one). Never throw but
// std::bad_alloc.
std::string status_text(const ProcessStatus& status);
std::optional<ProcessStatus> parse_status(const std::string& text);

// What /proc says of a process on this host: "alive", "stopped" (SIGSTOP, or stopped by a
// debugger), or "gone" (no such process, or a zombie).
std::string process_state(long pid);

// Replicas that have not arrived at a collective: a run of consecutive ones of one process
// that are said alike.
struct MissingRun {
  int first = 0;
  int last = 0;
  int process = 0;
  long pid = 0;           // 0: not known
  std::string state;      // the process's: "alive", "stopped", "gone", "not visible"
  std::string where;      // how the line names the process
  std::string last_call;  // "barrier #40 at train.cc:118"; empty when none
  std::string doing;      // what they are doing, as the line says it
};

struct StragglerOptions {
  std::chrono::milliseconds limit{0};  // > 0
  int rank = 0;
  int processes = 1;
  int num_local = 1;
  // The status board's files are <board>.rank<R>; empty: no board (one process, or
  // processes that are not real ones).
  std::string board;
  // Where lines go; default: stderr.
  std::function<void(const std::string&)> print;
  // Where waits are marked too; null: nowhere. Must outlive the watch.
  Timeline* timeline = nullptr;
};

// The status board's file prefix for a job: /dev/shm (else the temporary folder), the user,
// the job name and what tells this launch apart from others of the same name (the store,
// the MPI launcher's namespace, the elastic generation). Never throws but std::bad_alloc.
std::string status_board(const std::string& job, const std::string& store, int generation);

class StragglerWatch {
 public:
  // Starts the thread. `recorders` must outlive the watch. Throws std::system_error when
  // the thread cannot start.
  StragglerWatch(const FlightRecorders& recorders, StragglerOptions options);
  // Stops the thread (BLOCKS at most one period) and removes this process's status file.
  ~StragglerWatch();
  StragglerWatch(const StragglerWatch&) = delete;
  StragglerWatch& operator=(const StragglerWatch&) = delete;

 private:
  void loop();
  // One look, as the thread takes every period. Never throws but std::bad_alloc.
  void check(FlightRecorder::Clock::time_point now);
  ProcessStatus my_status(std::int64_t unix_offset_ns) const;
  void publish(const ProcessStatus& status);
  // The replicas that have not arrived at `r` (none when every replica has).
  std::vector<MissingRun> missing_at(const CallRecord& r, const ProcessStatus& mine,
                                     std::int64_t now_unix_ns) const;
  // Marks the wait on the timeline's track of each replica in `waiting`.
  void mark(const CallRecord& r, const std::vector<int>& waiting, std::chrono::nanoseconds waited,
            const std::vector<MissingRun>& missing, const std::string& line,
            FlightRecorder::Clock::time_point now) const;

  const FlightRecorders& recorders_;
  const StragglerOptions options_;
  const std::string host_;
  std::string published_;  // the text last written to the board
  // The last collective reported (step, sequence): once per collective.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> reported_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace replicator::detail
