#include "src/collectives/plan.h"

#include <algorithm>

#include "src/collectives/frames.h"

namespace replicator::detail {

Path choose_local_path(std::size_t path_bytes, std::size_t staging_capacity,
                       const MachineFacts& facts) {
  const std::size_t threshold = facts.oversubscribed ? staging_capacity : 1024;
  return path_bytes <= std::min(threshold, staging_capacity) ? Path::kStaged : Path::kDirect;
}

std::string_view to_string(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kInFrame:
      return "in frame";
    case AllReduceAlgorithm::kGathered:
      return "gathered";
    case AllReduceAlgorithm::kPipelined:
      return "pipelined";
    case AllReduceAlgorithm::kNative:
      return "engine's own";
  }
  return "unknown";
}

AllReducePlan choose_all_reduce(const AllReduceShape& shape, const TransportTraits& traits) {
  const std::size_t all_rows = static_cast<std::size_t>(shape.max_subtrees) * shape.row_bytes;
  if (all_rows <= frame_payload(traits)) return {.algorithm = AllReduceAlgorithm::kInFrame};
  const std::size_t eager = traits.eager_bytes;
  const std::size_t row = shape.row_bytes;
  if (all_rows <= kGatherBytes &&
      (row <= eager || row / static_cast<std::size_t>(shape.processes) > eager)) {
    return {.algorithm = AllReduceAlgorithm::kGathered};
  }
  if (shape.native_same_bits && !shape.oversubscribed) {
    return {.algorithm = AllReduceAlgorithm::kNative};
  }
  return {.algorithm = AllReduceAlgorithm::kPipelined,
          .step_bytes =
              std::clamp(shape.largest_part_bytes, traits.min_step_bytes, traits.max_step_bytes),
          .receives_ahead = traits.receives_ahead,
          .stream_bytes =
              traits.streamed_results ? kStreamBytes : std::numeric_limits<std::size_t>::max()};
}

}  // namespace replicator::detail
