// One verdict for a whole job from its processes' flight-recorder dumps
// (Config::Trace::dir / REPLICATOR_TRACE_DIR: flight_recorder.rank<R>.pid<P>.<N>.json, written
// when run() throws and on SIGUSR1). `replicator diagnose DIR` prints it.
//
// The verdict says who stopped first (the replica whose last collective is furthest behind,
// with its call site), at which collective and line the others waited, which processes
// wrote no dump (killed or stopped before they could), and what each process's error
// said. Each process's latest dump speaks for it; the text depends only on what the dumps
// hold, never on the order the files are read in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace replicator::launch {

struct Diagnosis {
  std::string verdict;               // one sentence
  std::vector<std::string> lines;    // per replica, then per process error, then the files
  std::string json;                  // the same as one JSON object, for tools
  std::vector<std::string> skipped;  // files in the folder that are not dumps, and why
};

// Reads every dump in `dir` written at or after `since_unix_us` (microseconds since the
// Unix epoch, as the dumps' unix_time_us say; 0: all of them); older dumps are skipped, so
// that a folder reused by another run of the job does not speak for this one. BLOCKS on
// file reads. Throws ConfigError when `dir` cannot be read or holds no dump that counts.
Diagnosis diagnose(const std::string& dir, std::int64_t since_unix_us = 0);

// The same, from dump texts (one per file; `names` for messages). Throws ConfigError when
// none of them is a dump that counts.
Diagnosis diagnose_dumps(const std::vector<std::string>& texts,
                         const std::vector<std::string>& names, std::int64_t since_unix_us = 0);

}  // namespace replicator::launch
