#include "bench/bench_rows.h"

#include <algorithm>
#include <cstdio>

#include "bench/median.h"
#include "replicator/errors.h"

namespace replicator::bench {

std::map<std::string, double> print_bench_rows(const std::vector<BenchRow>& rows,
                                               const BenchPrint& how) {
  std::map<std::string, double> medians;
  for (const BenchRow& row : rows) {
    if (row.values.empty()) throw InvalidArgument("bench: row '" + row.name + "' has no values");
    const double med = bench::median(row.values);
    const double lo = *std::min_element(row.values.begin(), row.values.end());
    const double hi = *std::max_element(row.values.begin(), row.values.end());
    const double mb = row.bytes_per_item * med / 1e6;
    medians[row.name] = med;
    if (how.json) {
      nlohmann::ordered_json j = {{"type", how.type},
                                  {"row", row.name},
                                  {"unit", row.unit},
                                  {how.value_key, med},
                                  {"min", lo},
                                  {"max", hi},
                                  {"repeats", row.values.size()}};
      if (row.bytes_per_item > 0) j["mb_per_s"] = mb;
      for (const auto& [key, value] : how.extra.items()) j[key] = value;
      std::printf("%s\n", j.dump().c_str());
    } else if (row.bytes_per_item > 0) {
      std::printf("%-36s %12.0f %s  %8.1f MB/s  [%.0f..%.0f]\n", row.name.c_str(), med,
                  row.unit.c_str(), mb, lo, hi);
    } else {
      std::printf("%-36s %12.0f %s  [%.0f..%.0f]\n", row.name.c_str(), med, row.unit.c_str(), lo,
                  hi);
    }
  }
  return medians;
}

void print_bench_ratios(const std::vector<std::pair<std::string, double>>& ratios,
                        const BenchPrint& how) {
  for (const auto& [name, value] : ratios) {
    if (how.json) {
      std::printf(
          "%s\n",
          nlohmann::ordered_json{{"type", how.type + "_ratio"}, {"ratio", name}, {"value", value}}
              .dump()
              .c_str());
    } else {
      std::printf("# %-46s %.2f\n", name.c_str(), value);
    }
  }
}

nlohmann::ordered_json result_with(const std::string& output, const std::string& field,
                                   const std::string& command) {
  nlohmann::ordered_json found;
  std::size_t start = 0;
  while (start < output.size()) {
    const std::size_t end = output.find('\n', start);
    const std::string line =
        output.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::size_t brace = line.find('{');
    if (brace != std::string::npos && line.find(field) != std::string::npos) {
      auto j = nlohmann::ordered_json::parse(line.substr(brace), nullptr,
                                             /*allow_exceptions=*/false);
      if (j.is_object() && j.contains(field)) found = std::move(j);
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (found.is_null())
    throw Error("no result line with \"" + field + "\" in the output of: " + command);
  return found;
}

}  // namespace replicator::bench
