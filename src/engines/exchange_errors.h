// The words of the transports' exchange errors, shared by every engine so that a timeout
// reads the same whichever engine raised it.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace replicator::detail {

// "0, 2, 3": the ranks sorted, each once.
inline std::string join_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// "<engine> engine: exchange on lane <lane> timed out: process 1 did not deliver within
// 500 ms; ...": `missing` are the peers whose receives had not completed, or, where
// `receives_done`, those that had not taken what was sent to them.
inline std::string exchange_timeout_text(std::string_view engine, int lane,
                                         const std::vector<int>& missing, bool receives_done,
                                         std::chrono::milliseconds limit) {
  return std::string(engine) + " engine: exchange on lane " + std::to_string(lane) +
         " timed out: " + (missing.size() == 1 ? "process " : "processes ") + join_ranks(missing) +
         (receives_done ? " did not take delivery" : " did not deliver") + " within " +
         std::to_string(limit.count()) + " ms; the transport is poisoned, restart the job";
}

}  // namespace replicator::detail
