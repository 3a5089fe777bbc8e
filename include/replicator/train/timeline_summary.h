// Where each replica's time went, from the timeline files a job writes
// (REPLICATOR_TIMELINE, src/comm/timeline.h): per replica, the time inside its collectives,
// split into waiting (from its own arrival at a collective to the last replica's arrival)
// and the rest (moving and combining the data, once every replica is there), and how often
// it was the last to arrive. In data-parallel training the waiting is what the slowest
// replica of each stretch between two collectives costs the others: where it is large, the
// replicas' work is uneven (a slower host, a busy core, uneven batches), not the
// collectives slow.
//
// Arrivals are compared by the files' timestamps (microseconds since the Unix epoch): the
// processes of one host share a clock, but across hosts the waiting is only as good as
// their clocks agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace replicator::train {

struct ReplicaTime {
  std::string name;  // "replica <id>" (the timeline's thread name), or "process P thread T"
  int process = 0;   // the timeline's pid and tid
  int thread = 0;
  double span_us = 0;  // its steps' time (first collective to the last one's end, where none)
  std::int64_t collectives = 0;
  double collective_us = 0;  // inside collectives
  double matched_us = 0;     // inside the collectives every replica made
  double waiting_us = 0;     // of those, before the last replica arrived
  std::int64_t last = 0;     // of those, how many it arrived at last (alone: a tie counts none)
};

struct TimelineSummary {
  std::vector<ReplicaTime> replicas;  // the tracks with collectives, by process, then thread
  std::int64_t matched = 0;    // collectives every replica made (by step and sequence number)
  std::int64_t unmatched = 0;  // collectives some replica did not make, or whose file is missing
};

// The summary of every process's timeline of one run of a job: `texts` are the files'
// contents, in any order (a file whose job was killed may lack its closing bracket and end
// in half a line, which is dropped), `sources` their names for errors. Collectives are
// matched across replicas by their step and sequence number; waiting and being last count
// only the collectives every replica made. A track with steps but no collective (a thread
// that made none) is not a replica here. Throws ConfigError where a text is not a
// trace-event array, where an event's fields have other types than a timeline writes,
// where a replica's track is in two files or holds one collective twice (the same file
// passed twice, or the files of two runs), and where no text holds a collective. Pure;
// never blocks.
TimelineSummary summarize_timelines(const std::vector<std::string>& texts,
                                    const std::vector<std::string>& sources);

}  // namespace replicator::train
