// The rows and ratios the benchmarks of the rl layer print (`bench rl`, `bench rl-remote`,
// `bench env-server`): each row's median over its repeats with the range, as text or as one
// JSON object per line.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace replicator::bench {

struct BenchRow {
  std::string name;
  std::string unit;            // "frames/s", "unrolls/s", ...
  double bytes_per_item = 0;   // > 0: MB/s is printed too
  std::vector<double> values;  // one per repeat; not empty when printed
};

struct BenchPrint {
  std::string type;                  // the JSON objects' "type"; ratios: type + "_ratio"
  std::string value_key = "median";  // the JSON key of a row's median
  bool json = false;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // added to every row
};

// Prints every row: "name  median unit  [min..max]" (with "MB/s" when bytes_per_item > 0), or
// {"type", "row", "unit", <value_key>: median, "min", "max", "repeats", "mb_per_s"?, extra...}
// per line with json. Returns the medians by row name. Throws InvalidArgument for a row
// without values.
std::map<std::string, double> print_bench_rows(const std::vector<BenchRow>& rows,
                                               const BenchPrint& how);

// Prints "# name  value" per ratio, or {"type": type + "_ratio", "ratio", "value"} per line.
// Never throws but std::bad_alloc.
void print_bench_ratios(const std::vector<std::pair<std::string, double>>& ratios,
                        const BenchPrint& how);

// The last JSON object printed in `output` (a line, possibly behind a "[rank N] " prefix)
// that has the field `field`. Throws Error naming `command` when there is none.
nlohmann::ordered_json result_with(const std::string& output, const std::string& field,
                                   const std::string& command);

}  // namespace replicator::bench
