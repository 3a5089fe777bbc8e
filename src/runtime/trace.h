// Tracer: a Replicator's flight recorders (one per local replica), its timeline, and what
// they say when something goes wrong.
//
// - When run() throws Timeout, CollectiveMismatch, PeerLost or Aborted, with_summary()
//   makes the same error (type and fields) whose message is the original text followed by
//   one line per replica: this process's replicas as their recorders saw them when the
//   first collective failed, then what the error tells of the other processes' replicas
//   (which never arrived, which process was lost, which replica failed first, what each
//   called). With Config::trace_dir the whole record is also written there as JSON, and
//   the summary names the file.
// - SIGUSR1 (Config::trace_signal) writes the same JSON from a live process, to
//   trace_dir, or to stderr when none is set.
// - A replica that has waited Config::straggler_after at a collective gets the missing
//   replicas named on stderr, once per collective, and on the timeline (straggler.h).
//
// The dump (format "replicator-flight-recorder", version 1):
//   {"format": "replicator-flight-recorder", "version": 1, "reason": "Timeout" | "SIGUSR1" | ...,
//    "error": "<message>", "rank": R, "processes": P, "local_replicas": L, "pid": ...,
//    "unix_time_us": <when written>, "summary": ["replica 0: ...", ...],
//    "replicas": [{"replica": 0, "capacity": 256, "recorded": <collectives so far>,
//                  "step": <current step>, "entries": [{"step", "seq", "op", "dtype",
//                  "count", "bytes", "state", "start_unix_us", "end_unix_us" (null while
//                  running), "duration_us", "at" (the call site, "train.cc:120", when
//                  known)}, ... oldest first]}, ...]}
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replicator/config.h"
#include "src/comm/flight_recorder.h"
#include "src/comm/timeline.h"

namespace replicator::detail {

class SignalDump;
class StragglerWatch;

class Tracer {
 public:
  // For replicas rank * num_local .. + num_local - 1 of a job of `processes` processes.
  // Creates config.trace.dir if missing and config.trace.timeline's file; installs the SIGUSR1
  // dump (config.trace.signal). Throws ConfigError when the folder cannot be created or
  // written, or the timeline file cannot be created.
  Tracer(const Config& config, int rank, int processes, int num_local);
  // Finishes the timeline file. Only once no replica thread runs.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  FlightRecorders& recorders() { return *recorders_; }

  // The error `e` with the flight recorder's summary at the end of its message (and the
  // record written to trace_dir) when it is a Timeout, CollectiveMismatch, PeerLost or
  // Aborted; null for any other error. Call after run's replicas have all finished. Never
  // throws but std::bad_alloc; a dump that cannot be written is said in the summary.
  std::exception_ptr with_summary(const std::exception& e);

  // The whole record as JSON (the format above). Any thread; never blocks a replica.
  std::string json(std::string_view reason, std::string_view error,
                   const std::vector<std::string>& summary) const;

  // Writes `json` to a new file in trace_dir (through a temporary file and a rename);
  // returns its path. Throws std::system_error naming the path when it cannot.
  std::string write_dump(const std::string& json) const;

 private:
  // What error `e` tells of replicas: notes on this process's own (by local id), and
  // lines on the other processes' replicas.
  struct Notes {
    std::map<int, std::string> local;
    std::vector<std::string> remote;
  };
  Notes notes(const std::exception& e) const;
  void dump_on_signal();

  const int rank_;
  const int processes_;
  const int num_local_;
  const std::string trace_dir_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<FlightRecorders> recorders_;
  std::unique_ptr<SignalDump> signal_;
  std::unique_ptr<StragglerWatch> straggler_;  // Config::straggler_after
};

}  // namespace replicator::detail
