// Line charts as pictures: series of (x, y) points, each in its own colour, on axes with
// nice tick values, a title, axis labels and a legend, drawn by the plotting library PLplot
// (its cairo driver: antialiased lines and text, into memory). Several charts render side by
// side into one image (a 1 x k row of subplots).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "replicator/train/png.h"

namespace replicator::train {

struct Series {
  std::string name;  // shown in the legend
  std::vector<double> x;
  std::vector<double> y;  // y.size() == x.size(); points with a NaN or infinite coordinate
                          // (or x <= 0 on a log x axis) are skipped, breaking the line
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  bool log_x = false;  // x on a log10 scale
};

struct ChartSize {
  int width = 800;  // of each chart
  int height = 500;
};

// The rectangle of a chart's plotting area (inside the axes), in pixels of a chart of
// `size`: left <= x < right, top <= y < bottom.
struct PlotArea {
  int left = 0;
  int top = 0;
  int right = 0;
  int bottom = 0;
};
PlotArea plot_area(const ChartSize& size = {});

// Tick values for an axis over [lo, hi]: multiples of a step 1, 2 or 5 x 10^k, from the
// largest multiple <= lo to the smallest >= hi, at most `max_ticks` + 1 of them (0..100 gives
// 0, 20, ..., 100). lo == hi is widened around the value. Never throws but std::bad_alloc;
// throws InvalidArgument on a non-finite bound or lo > hi.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks = 6);

// The colour of the i-th series, RGB (a palette of ten, then again).
const std::uint8_t* series_colour(std::size_t i);

// Renders `charts` side by side, each size.width x size.height, into one RGB image. Calls
// are serialised on a lock of the process (PLplot's state is global); no other blocking.
// Throws InvalidArgument on an empty list, a too small size, or a series whose x and y differ
// in length; ConfigError when PLplot lacks its memcairo driver (Debian's
// plplot-driver-cairo).
Image render_charts(const std::vector<Chart>& charts, const ChartSize& size = {});

// Charts of a metrics.jsonl file (one JSON object per line, as JobReporter writes): one
// chart per group of `y_groups`, each series one field of the group against the field
// `x_field`, over the lines where both are numbers (and, when `type` is not empty, whose
// "type" equals it). Lines that are not JSON objects are skipped. With `skip_empty`, a chart
// none of whose series has a point is left out. BLOCKS on file I/O. Throws DataError when
// the file cannot be read.
std::vector<Chart> charts_from_metrics(const std::filesystem::path& metrics,
                                       const std::string& x_field,
                                       const std::vector<std::vector<std::string>>& y_groups,
                                       const std::string& type = "", bool skip_empty = false);

}  // namespace replicator::train
