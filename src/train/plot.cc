#include "replicator/train/plot.h"

#include <plplot.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "replicator/errors.h"

namespace replicator::train {
namespace {

// The margins around the plotting area, in pixels of a chart.
constexpr int kMarginLeft = 96;
constexpr int kMarginRight = 24;
constexpr int kMarginTop = 66;
constexpr int kMarginBottom = 58;

// Text heights in pixels.
constexpr double kTitlePx = 17;
constexpr double kLabelPx = 14;
constexpr double kTickPx = 12;

constexpr std::uint8_t kInk[3] = {40, 40, 40};
constexpr std::uint8_t kGrid[3] = {228, 228, 228};
// Matplotlib's tab10.
constexpr std::uint8_t kPalette[10][3] = {
    {31, 119, 180}, {255, 127, 14},  {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
    {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};

// PLplot's colour map 0: the background, ink, grid, then the palette.
constexpr PLINT kInkIndex = 1;
constexpr PLINT kGridIndex = 2;
constexpr PLINT kFirstSeriesIndex = 3;

// A tick value as text, with as many decimals as the step between ticks needs.
std::string tick_text(double value, double step) {
  if (std::fabs(value) < step * 1e-9) value = 0;  // no "-0" from rounding
  char text[40];
  if (std::fabs(value) >= 1e6 || step < 1e-4) {
    std::snprintf(text, sizeof text, "%g", value);
  } else {
    const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
  }
  return text;
}

bool usable(double x, double y, bool log_x) {
  return std::isfinite(x) && std::isfinite(y) && (!log_x || x > 0);
}

// One axis: its ticks (in plotted units: log10 of x on a log axis) and labels.
struct Axis {
  std::vector<double> ticks;
  std::vector<std::string> labels;
  double lo = 0;
  double hi = 1;
};

Axis linear_axis(double lo, double hi) {
  Axis axis;
  axis.ticks = nice_ticks(lo, hi);
  const double step = axis.ticks.size() > 1 ? axis.ticks[1] - axis.ticks[0] : 1;
  for (double t : axis.ticks) axis.labels.push_back(tick_text(t, step));
  axis.lo = axis.ticks.front();
  axis.hi = axis.ticks.back();
  return axis;
}

// A log axis over data in [lo, hi] (> 0): ticks at the powers of ten, labelled with the
// value (1, 10, 100, 1e+03 ...); several decades share a tick when there are many.
Axis log_axis(double lo, double hi) {
  const int first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int last = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  if (last <= first) last = first + 1;
  const int every = (last - first + 7) / 8;
  Axis axis;
  for (int k = first; k <= last; k += every) {
    axis.ticks.push_back(k);
    char text[40];
    std::snprintf(text, sizeof text, "%g", std::pow(10.0, k));
    axis.labels.emplace_back(text);
  }
  axis.lo = first;
  axis.hi = axis.ticks.back() < last ? axis.ticks.back() + every : last;
  return axis;
}

// PLplot keeps its state (the current stream, its options) process-wide: one picture is drawn
// at a time.
std::mutex& plplot_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Whether PLplot has the cairo driver that draws into memory. Checked before plinit, which
// would end the process when a driver is missing.
bool have_memcairo() {
  std::array<const char*, 128> menus{};
  std::array<const char*, 128> names{};
  int count = static_cast<int>(names.size());
  const char** menu_list = menus.data();
  const char** name_list = names.data();
  plgDevs(&menu_list, &name_list, &count);
  for (int i = 0; i < count; ++i) {
    if (names[static_cast<std::size_t>(i)] != nullptr &&
        std::strcmp(names[static_cast<std::size_t>(i)], "memcairo") == 0) {
      return true;
    }
  }
  return false;
}

// One picture in PLplot's "memcairo" driver, drawn into an RGBA buffer: opened by the
// constructor, ended by the destructor. Positions are in pixels of the picture: pixel_frame
// maps a chart's pixels to PLplot's world coordinates.
class Canvas {
 public:
  Canvas(int width, int height, std::vector<std::uint8_t>& rgba) : width_(width) {
    plsdev("memcairo");
    plsmema(width, height, rgba.data());
    plscol0(0, 255, 255, 255);
    plscol0(kInkIndex, kInk[0], kInk[1], kInk[2]);
    plscol0(kGridIndex, kGrid[0], kGrid[1], kGrid[2]);
    for (int i = 0; i < 10; ++i) {
      plscol0(kFirstSeriesIndex + i, kPalette[i][0], kPalette[i][1], kPalette[i][2]);
    }
    plinit();
    pladv(0);
    PLFLT x_min = 0, x_max = 0, y_min = 0, y_max = 0;
    plgspa(&x_min, &x_max, &y_min, &y_max);
    mm_per_px_ = (x_max - x_min) / width;
  }
  ~Canvas() { plend1(); }
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  // The rectangle [x0, x1) x [y0, y1) of the picture (pixels, y down) as the viewport, its
  // world coordinates those pixels.
  void pixel_frame(int x0, int x1, int height) const {
    plvpor(static_cast<double>(x0) / width_, static_cast<double>(x1) / width_, 0, 1);
    plwind(x0, x1, height, 0);
  }
  // The plotting area `a` (pixels) as the viewport, over the window [x_lo, x_hi] x [y_lo, y_hi].
  void data_frame(const PlotArea& a, int height, double x_lo, double x_hi, double y_lo,
                  double y_hi) const {
    plvpor(static_cast<double>(a.left) / width_, static_cast<double>(a.right) / width_,
           1.0 - static_cast<double>(a.bottom) / height, 1.0 - static_cast<double>(a.top) / height);
    plwind(x_lo, x_hi, y_lo, y_hi);
  }
  void text_height(double px) const { plschr(px * mm_per_px_, 1.0); }
  // `text` centred on its line at (x, y) of a pixel frame, justified by `just` (0 left, 0.5
  // centre); `up`: rotated to read upwards.
  void text(double x, double y, double px, double just, const std::string& text,
            bool up = false) const {
    text_height(px);
    if (up) {
      plptex(x + px * 0.35, y, 0, -1, just, text.c_str());
    } else {
      plptex(x, y + px * 0.35, 1, 0, just, text.c_str());
    }
  }

 private:
  int width_;
  double mm_per_px_ = 0.25;
};

// Tick labels in the axes' own format (tick_text), through PLplot's label callback.
struct LabelFormat {
  double step = 1;
  bool log = false;
};
void format_label(PLINT, PLFLT value, char* label, PLINT length, PLPointer data) {
  const auto* format = static_cast<const LabelFormat*>(data);
  const std::string text = format->log ? tick_text(std::pow(10.0, value), std::pow(10.0, value))
                                       : tick_text(value, format->step);
  std::snprintf(label, static_cast<std::size_t>(length), "%s", text.c_str());
}

// The axes, grid and tick labels of a chart, in its data frame.
void draw_axes(const Axis& x_axis, const Axis& y_axis, bool log_x) {
  const double x_step = x_axis.ticks.size() > 1 ? x_axis.ticks[1] - x_axis.ticks[0] : 0;
  const double y_step = y_axis.ticks.size() > 1 ? y_axis.ticks[1] - y_axis.ticks[0] : 0;
  plwidth(1);
  plcol0(kGridIndex);
  plbox("g", x_step, 0, "g", y_step, 0);
  plcol0(kInkIndex);
  LabelFormat x_format{.step = x_step, .log = log_x};
  LabelFormat y_format{.step = y_step};
  plslabelfunc(format_label, &x_format);
  plbox(log_x ? "bcnstof" : "bcnsto", x_step, log_x ? 0 : 2, "", 0, 0);
  plslabelfunc(format_label, &y_format);
  plbox("", 0, 0, "bcnstvo", y_step, 2);
  plslabelfunc(nullptr, nullptr);
}

// The series as lines (broken where a point is not usable), a point alone as a dot.
void draw_series(const Chart& chart) {
  plwidth(2);
  std::vector<double> xs;
  std::vector<double> ys;
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    plcol0(kFirstSeriesIndex + static_cast<PLINT>(k % 10));
    const auto flush = [&] {
      if (xs.size() == 1) {
        plssym(0, 1.0);
        plpoin(1, xs.data(), ys.data(), 17);
      } else if (xs.size() > 1) {
        plline(static_cast<PLINT>(xs.size()), xs.data(), ys.data());
      }
      xs.clear();
      ys.clear();
    };
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i], chart.log_x)) {
        flush();
        continue;
      }
      xs.push_back(chart.log_x ? std::log10(s.x[i]) : s.x[i]);
      ys.push_back(s.y[i]);
    }
    flush();
  }
  plwidth(1);
}

// One row of legend entries (a swatch of the series' colour and its name) above the area.
void draw_legend(const Canvas& canvas, const Chart& chart) {
  const auto n = static_cast<PLINT>(chart.series.size());
  if (n == 0) return;
  std::vector<PLINT> options(chart.series.size(), PL_LEGEND_LINE);
  std::vector<PLINT> text_colours(chart.series.size(), kInkIndex);
  std::vector<PLINT> line_colours(chart.series.size());
  std::vector<PLINT> line_styles(chart.series.size(), 1);
  std::vector<PLFLT> line_widths(chart.series.size(), 3.0);
  std::vector<const char*> names(chart.series.size());
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    line_colours[k] = kFirstSeriesIndex + static_cast<PLINT>(k % 10);
    names[k] = chart.series[k].name.c_str();
  }
  canvas.text_height(kLabelPx);
  PLFLT width = 0;
  PLFLT height = 0;
  pllegend(&width, &height, PL_LEGEND_ROW_MAJOR, PL_POSITION_TOP | PL_POSITION_OUTSIDE, 0.0, 0.02,
           0.04, 0, kGridIndex, 1, 1, n, n, options.data(), 0.6, 1.0, 1.6, 0.0, text_colours.data(),
           names.data(), nullptr, nullptr, nullptr, nullptr, line_colours.data(),
           line_styles.data(), line_widths.data(), nullptr, nullptr, nullptr, nullptr);
}

void render_chart(const Canvas& canvas, int x_offset, const Chart& chart, const ChartSize& size) {
  // Ranges over the usable points of every series.
  double x_lo = std::numeric_limits<double>::infinity();
  double x_hi = -x_lo;
  double y_lo = x_lo;
  double y_hi = -x_lo;
  for (const Series& s : chart.series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i], chart.log_x)) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  const bool empty = !(x_lo <= x_hi);
  if (empty) {
    x_lo = chart.log_x ? 1 : 0;
    x_hi = chart.log_x ? 10 : 1;
    y_lo = 0;
    y_hi = 1;
  }
  const Axis x_axis = chart.log_x ? log_axis(x_lo, x_hi) : linear_axis(x_lo, x_hi);
  const Axis y_axis = linear_axis(y_lo, y_hi);
  PlotArea area = plot_area(size);
  area.left += x_offset;
  area.right += x_offset;

  // Title and axis labels, in the chart's pixels.
  canvas.pixel_frame(x_offset, x_offset + size.width, size.height);
  plcol0(kInkIndex);
  canvas.text(x_offset + size.width / 2.0, 18, kTitlePx, 0.5, chart.title);
  canvas.text((area.left + area.right) / 2.0, area.bottom + 40, kLabelPx, 0.5, chart.x_label);
  canvas.text(x_offset + 18, (area.top + area.bottom) / 2.0, kLabelPx, 0.5, chart.y_label,
              /*up=*/true);

  canvas.data_frame(area, size.height, x_axis.lo, x_axis.hi, y_axis.lo, y_axis.hi);
  canvas.text_height(kTickPx);
  draw_axes(x_axis, y_axis, chart.log_x);
  if (empty) {
    canvas.text_height(kLabelPx);
    plptex((x_axis.lo + x_axis.hi) / 2, (y_axis.lo + y_axis.hi) / 2, 1, 0, 0.5, "no data");
  }
  draw_series(chart);
  draw_legend(canvas, chart);
}

}  // namespace

PlotArea plot_area(const ChartSize& size) {
  return {kMarginLeft, kMarginTop, size.width - kMarginRight, size.height - kMarginBottom};
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi) {
    throw InvalidArgument("axis ticks need finite bounds lo <= hi, got " + std::to_string(lo) +
                          " and " + std::to_string(hi));
  }
  max_ticks = std::max(max_ticks, 2);
  if (lo == hi) {
    const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  const double raw = (hi - lo) / (max_ticks - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  constexpr double kSteps[] = {1, 2, 5, 10, 20, 50, 100};
  for (double m : kSteps) {
    const double step = m * magnitude;
    if (step < raw * (1 - 1e-9)) continue;
    const auto first = static_cast<long long>(std::floor(lo / step + 1e-9));
    const auto last = static_cast<long long>(std::ceil(hi / step - 1e-9));
    if (last - first > max_ticks) continue;
    std::vector<double> ticks;
    for (long long k = first; k <= last; ++k) ticks.push_back(static_cast<double>(k) * step);
    return ticks;
  }
  return {lo, hi};  // not reached: a step of 100 x magnitude always fits
}

const std::uint8_t* series_colour(std::size_t i) { return kPalette[i % 10]; }

Image render_charts(const std::vector<Chart>& charts, const ChartSize& size) {
  if (charts.empty()) throw InvalidArgument("nothing to plot: no chart");
  if (size.width < kMarginLeft + kMarginRight + 50 ||
      size.height < kMarginTop + kMarginBottom + 50) {
    throw InvalidArgument("a chart needs at least " +
                          std::to_string(kMarginLeft + kMarginRight + 50) + " x " +
                          std::to_string(kMarginTop + kMarginBottom + 50) + " pixels, got " +
                          std::to_string(size.width) + " x " + std::to_string(size.height));
  }
  for (const Chart& chart : charts) {
    for (const Series& s : chart.series) {
      if (s.x.size() != s.y.size()) {
        throw InvalidArgument("series '" + s.name + "' has " + std::to_string(s.x.size()) +
                              " x values and " + std::to_string(s.y.size()) + " y values");
      }
    }
  }
  const int width = size.width * static_cast<int>(charts.size());
  std::vector<std::uint8_t> rgba(
      static_cast<std::size_t>(width) * static_cast<std::size_t>(size.height) * 4, 255);
  {
    const std::lock_guard<std::mutex> lock(plplot_mutex());
    if (!have_memcairo()) {
      throw ConfigError(
          "the plotting library PLplot has no memcairo driver: install Debian's "
          "plplot-driver-cairo (scripts/install_deps.sh does)");
    }
    const Canvas canvas(width, size.height, rgba);
    for (std::size_t i = 0; i < charts.size(); ++i) {
      render_chart(canvas, static_cast<int>(i) * size.width, charts[i], size);
    }
  }
  Image image = Image::filled(width, size.height, 3, 255);
  for (std::size_t i = 0, j = 0; i < image.pixels.size(); i += 3, j += 4) {
    std::copy_n(rgba.data() + j, 3, image.pixels.data() + i);
  }
  return image;
}

std::vector<Chart> charts_from_metrics(const std::filesystem::path& metrics,
                                       const std::string& x_field,
                                       const std::vector<std::vector<std::string>>& y_groups,
                                       const std::string& type, bool skip_empty) {
  std::ifstream in(metrics);
  if (!in) throw DataError("cannot read " + metrics.string(), metrics.string());
  std::vector<Chart> charts;
  for (const std::vector<std::string>& group : y_groups) {
    Chart chart;
    chart.x_label = x_field;
    for (const std::string& field : group) {
      chart.title += (chart.title.empty() ? "" : ", ") + field;
      chart.series.push_back({.name = field});
    }
    chart.y_label = group.size() == 1 ? group[0] : "";
    charts.push_back(std::move(chart));
  }
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains(x_field) || !j[x_field].is_number()) continue;
    if (!type.empty() && !(j.contains("type") && j["type"] == type)) continue;
    const double x = j[x_field].get<double>();
    for (Chart& chart : charts) {
      for (Series& s : chart.series) {
        if (!j.contains(s.name) || !j[s.name].is_number()) continue;
        s.x.push_back(x);
        s.y.push_back(j[s.name].get<double>());
      }
    }
  }
  if (in.bad()) throw DataError("cannot read " + metrics.string(), metrics.string());
  if (skip_empty) {
    std::erase_if(charts, [](const Chart& c) {
      return std::all_of(c.series.begin(), c.series.end(),
                         [](const Series& s) { return s.x.empty(); });
    });
  }
  return charts;
}

}  // namespace replicator::train
