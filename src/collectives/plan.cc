#include "src/collectives/plan.h"

#include <algorithm>
#include <cmath>

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

double TransportCosts::at(const Times& times, double bytes) {
  const auto size = [](std::size_t i) { return static_cast<double>(kCostBytes[i]); };
  if (bytes <= size(0)) return times[0];
  std::size_t i = 1;
  while (i + 1 < kCostBytes.size() && bytes > size(i)) ++i;
  const double slope = (times[i] - times[i - 1]) / (size(i) - size(i - 1));
  return std::max(0.0, times[i - 1] + (bytes - size(i - 1)) * slope);
}

double gathered_seconds(const AllReduceShape& shape) {
  const TransportCosts& c = shape.costs;
  if (!c.exchange_known() || !c.reduce_known()) return -1;
  const double rows =
      static_cast<double>(shape.max_subtrees) * static_cast<double>(shape.row_bytes);
  const double others = static_cast<double>(std::max(1, shape.processes - 1));
  // P rows of each subtree reduce into one: P - 1 reductions of two inputs.
  return TransportCosts::at(c.exchange_s, rows) + others * TransportCosts::at(c.reduce_s, rows);
}

double pipelined_seconds(const AllReduceShape& shape, std::size_t step_bytes) {
  const TransportCosts& c = shape.costs;
  if (!c.exchange_known() || !c.reduce_known() || step_bytes == 0) return -1;
  const double part =
      static_cast<double>(shape.max_subtrees) * static_cast<double>(shape.largest_part_bytes);
  const double step = std::min(part, static_cast<double>(step_bytes));
  if (!(step > 0)) return 0;
  const double steps = std::ceil(part / step);
  const double others = static_cast<double>(std::max(1, shape.processes - 1));
  // A step costs what it was measured to cost alone, or its share of the whole part's cost
  // where that is dearer: a part far past the caches streams from memory at the rate of the
  // large sizes, whatever the step it is cut into.
  const auto per_step = [&](const TransportCosts::Times& times) {
    return std::max(TransportCosts::at(times, step), TransportCosts::at(times, part) / steps);
  };
  // The part's exchange in steps as measured, where it was (and the steps were the rings').
  const double exchange =
      c.stepped_known() ? TransportCosts::at(c.stepped_s, part) : steps * per_step(c.exchange_s);
  return 2 * exchange + steps * others * per_step(c.reduce_s);
}

double native_seconds(const AllReduceShape& shape) {
  const TransportCosts& c = shape.costs;
  if (!c.native_known()) return -1;
  return TransportCosts::at(c.native_s, static_cast<double>(shape.row_bytes));
}

std::size_t stream_from(const AllReduceShape& shape, const TransportTraits& traits) {
  constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
  if (!traits.streamed_results) return kNever;
  if (shape.cache_share_bytes == 0) return kStreamBytes;
  return shape.largest_part_bytes >= shape.cache_share_bytes ? 0 : kNever;
}

AllReducePlan pipelined_plan(const AllReduceShape& shape, const TransportTraits& traits) {
  if (traits.shared_step_bytes > 0 && !shape.oversubscribed) {
    return {.algorithm = AllReduceAlgorithm::kPipelined,
            .step_bytes = std::min(shape.largest_part_bytes, traits.shared_step_bytes),
            .receives_ahead = false};
  }
  return {.algorithm = AllReduceAlgorithm::kPipelined,
          .step_bytes =
              std::clamp(shape.largest_part_bytes, traits.min_step_bytes, traits.max_step_bytes),
          .receives_ahead = traits.receives_ahead,
          .stream_bytes = stream_from(shape, traits)};
}

AllReducePlan choose_all_reduce(const AllReduceShape& shape, const TransportTraits& traits) {
  const std::size_t all_rows = static_cast<std::size_t>(shape.max_subtrees) * shape.row_bytes;
  if (all_rows <= frame_payload(traits)) return {.algorithm = AllReduceAlgorithm::kInFrame};
  const std::size_t eager = traits.eager_bytes;
  const std::size_t row = shape.row_bytes;
  const bool native = shape.native_same_bits && !shape.oversubscribed;
  const AllReducePlan pipelined = pipelined_plan(shape, traits);
  const double native_s = native ? native_seconds(shape) : -1;
  const double pipelined_s = pipelined_seconds(shape, pipelined.step_bytes);
  if (native_s >= 0 && pipelined_s >= 0) {
    AllReducePlan ours = pipelined;
    double ours_s = pipelined_s;
    if (all_rows <= kGatherCapBytes && gathered_seconds(shape) <= ours_s) {
      ours = {.algorithm = AllReduceAlgorithm::kGathered};
      ours_s = gathered_seconds(shape);
    }
    return ours_s <= (1 - kEstimateMargin) * native_s
               ? ours
               : AllReducePlan{.algorithm = AllReduceAlgorithm::kNative};
  }
  if (all_rows <= kGatherBytes &&
      (row <= eager || row / static_cast<std::size_t>(shape.processes) > eager)) {
    return {.algorithm = AllReduceAlgorithm::kGathered};
  }
  if (native) return {.algorithm = AllReduceAlgorithm::kNative};
  return pipelined;
}

}  // namespace replicator::detail
