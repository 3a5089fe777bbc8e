// `replicator plot`: charts of a job's metrics.jsonl (replicator/train/plot.h) as a PNG file.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/command.h"
#include "replicator/errors.h"
#include "replicator/train/plot.h"

namespace replicator::apps {
namespace {

struct PlotFlags {
  std::string metrics;
  std::string x = "step";
  std::string y;
  std::string type;
  std::string out;
  bool log_x = false;
  int width = 800;
  int height = 500;
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

int run_plot(const PlotFlags& f) {
  std::vector<std::vector<std::string>> groups;
  for (const std::string& group : split(f.y, ',')) groups.push_back(split(group, '+'));
  if (groups.empty()) throw ConfigError("--y names no field: '" + f.y + "'");
  std::vector<train::Chart> charts = train::charts_from_metrics(f.metrics, f.x, groups, f.type);
  std::size_t points = 0;
  for (train::Chart& chart : charts) {
    chart.log_x = f.log_x;
    for (const train::Series& s : chart.series) points += s.x.size();
  }
  if (points == 0) {
    throw DataError("no line of " + f.metrics + " has the number '" + f.x + "' beside any of '" +
                        f.y + "'" + (f.type.empty() ? "" : " with type '" + f.type + "'"),
                    f.metrics);
  }
  train::write_png(f.out, train::render_charts(charts, {.width = f.width, .height = f.height}));
  std::fprintf(stderr, "wrote %s: %zu charts, %zu points\n", f.out.c_str(), charts.size(), points);
  return 0;
}

}  // namespace

Command add_plot(CLI::App& app) {
  auto flags = std::make_shared<PlotFlags>();
  CLI::App* plot = app.add_subcommand(
      "plot", "Charts of numeric fields of a job's metrics.jsonl against another, as a PNG");
  plot->add_option("--metrics", flags->metrics, "The metrics.jsonl file (one JSON object a line)")
      ->required()
      ->check(CLI::ExistingFile);
  plot->add_option("--x", flags->x, "The field along x")->capture_default_str();
  plot->add_option("--y", flags->y,
                   "Fields along y: one chart per comma-separated group, side by side; fields "
                   "joined with + share a chart (e.g. loss+test_loss,test_accuracy)")
      ->required();
  plot->add_option("--type", flags->type, "Only the lines whose \"type\" is this (e.g. train)");
  plot->add_flag("--log-x", flags->log_x, "x on a log scale");
  plot->add_option("--width", flags->width, "Width of each chart in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 8000));
  plot->add_option("--height", flags->height, "Height of each chart in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 8000));
  plot->add_option("--out", flags->out, "The PNG file to write")->required();
  return {plot, [flags] { return run_plot(*flags); }};
}

}  // namespace replicator::apps
