// Where each replica's time went, from the timeline files a job writes
// (REPLICATOR_TIMELINE, src/comm/timeline.h): per replica, the time inside its collectives,
// split into waiting (from its own arrival at a collective to the last replica's arrival)
// and the rest (moving and combining the data, once every replica is there), and how often
// it was the last to arrive. In data-parallel training the waiting is what the slowest
// replica of each stretch between two collectives costs the others: where it is large, the
// replicas' work is uneven (a slower host, a busy core, uneven batches), not the
// collectives slow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace replicator::apps {

struct ReplicaTime {
  std::string name;  // "replica <id>" (the timeline's thread name), or "process P thread T"
  int process = 0;   // the timeline's pid and tid
  int thread = 0;
  double span_us = 0;  // its steps' time (first collective to last where none)
  std::int64_t collectives = 0;
  double collective_us = 0;  // inside collectives
  double waiting_us = 0;     // of that, before the last replica arrived
  std::int64_t last = 0;     // collectives it arrived at last (of those every replica made)
};

struct TimelineSummary {
  std::vector<ReplicaTime> replicas;  // by process, then thread
  std::int64_t matched = 0;    // collectives every replica made (by step and sequence number)
  std::int64_t unmatched = 0;  // collectives some replica's file does not hold
};

// The summary of every process's timeline of one job: `texts` are the files' contents, in
// any order (a file whose job was killed may lack its closing bracket), `sources` their
// names for errors. Collectives are matched across replicas by their step and sequence
// number; waiting and being last count only collectives every replica made. Throws
// ConfigError where a text is not a trace-event array, or where none holds a collective.
// Pure; never blocks.
TimelineSummary summarize_timelines(const std::vector<std::string>& texts,
                                    const std::vector<std::string>& sources);

}  // namespace replicator::apps
