#include "replicator/train/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "replicator/errors.h"

namespace replicator::train {
namespace {

// ASCII 32..126 in 5 x 7 pixels: five columns per glyph, left to right; bit 0 of a column is
// its top row, bit 6 its bottom.
constexpr std::array<std::uint8_t, std::size_t{95}* 5> kFont = {
    0x00, 0x00, 0x00, 0x00, 0x00,  // space
    0x00, 0x00, 0x5F, 0x00, 0x00,  // !
    0x00, 0x07, 0x00, 0x07, 0x00,  // "
    0x14, 0x7F, 0x14, 0x7F, 0x14,  // #
    0x24, 0x2A, 0x7F, 0x2A, 0x12,  // $
    0x23, 0x13, 0x08, 0x64, 0x62,  // %
    0x36, 0x49, 0x55, 0x22, 0x50,  // &
    0x00, 0x05, 0x03, 0x00, 0x00,  // '
    0x00, 0x1C, 0x22, 0x41, 0x00,  // (
    0x00, 0x41, 0x22, 0x1C, 0x00,  // )
    0x08, 0x2A, 0x1C, 0x2A, 0x08,  // *
    0x08, 0x08, 0x3E, 0x08, 0x08,  // +
    0x00, 0x50, 0x30, 0x00, 0x00,  // ,
    0x08, 0x08, 0x08, 0x08, 0x08,  // -
    0x00, 0x60, 0x60, 0x00, 0x00,  // .
    0x20, 0x10, 0x08, 0x04, 0x02,  // /
    0x3E, 0x51, 0x49, 0x45, 0x3E,  // 0
    0x00, 0x42, 0x7F, 0x40, 0x00,  // 1
    0x42, 0x61, 0x51, 0x49, 0x46,  // 2
    0x21, 0x41, 0x45, 0x4B, 0x31,  // 3
    0x18, 0x14, 0x12, 0x7F, 0x10,  // 4
    0x27, 0x45, 0x45, 0x45, 0x39,  // 5
    0x3C, 0x4A, 0x49, 0x49, 0x30,  // 6
    0x01, 0x71, 0x09, 0x05, 0x03,  // 7
    0x36, 0x49, 0x49, 0x49, 0x36,  // 8
    0x06, 0x49, 0x49, 0x29, 0x1E,  // 9
    0x00, 0x36, 0x36, 0x00, 0x00,  // :
    0x00, 0x56, 0x36, 0x00, 0x00,  // ;
    0x08, 0x14, 0x22, 0x41, 0x00,  // <
    0x14, 0x14, 0x14, 0x14, 0x14,  // =
    0x00, 0x41, 0x22, 0x14, 0x08,  // >
    0x02, 0x01, 0x51, 0x09, 0x06,  // ?
    0x32, 0x49, 0x79, 0x41, 0x3E,  // @
    0x7E, 0x11, 0x11, 0x11, 0x7E,  // A
    0x7F, 0x49, 0x49, 0x49, 0x36,  // B
    0x3E, 0x41, 0x41, 0x41, 0x22,  // C
    0x7F, 0x41, 0x41, 0x22, 0x1C,  // D
    0x7F, 0x49, 0x49, 0x49, 0x41,  // E
    0x7F, 0x09, 0x09, 0x09, 0x01,  // F
    0x3E, 0x41, 0x49, 0x49, 0x7A,  // G
    0x7F, 0x08, 0x08, 0x08, 0x7F,  // H
    0x00, 0x41, 0x7F, 0x41, 0x00,  // I
    0x20, 0x40, 0x41, 0x3F, 0x01,  // J
    0x7F, 0x08, 0x14, 0x22, 0x41,  // K
    0x7F, 0x40, 0x40, 0x40, 0x40,  // L
    0x7F, 0x02, 0x0C, 0x02, 0x7F,  // M
    0x7F, 0x04, 0x08, 0x10, 0x7F,  // N
    0x3E, 0x41, 0x41, 0x41, 0x3E,  // O
    0x7F, 0x09, 0x09, 0x09, 0x06,  // P
    0x3E, 0x41, 0x51, 0x21, 0x5E,  // Q
    0x7F, 0x09, 0x19, 0x29, 0x46,  // R
    0x46, 0x49, 0x49, 0x49, 0x31,  // S
    0x01, 0x01, 0x7F, 0x01, 0x01,  // T
    0x3F, 0x40, 0x40, 0x40, 0x3F,  // U
    0x1F, 0x20, 0x40, 0x20, 0x1F,  // V
    0x3F, 0x40, 0x38, 0x40, 0x3F,  // W
    0x63, 0x14, 0x08, 0x14, 0x63,  // X
    0x07, 0x08, 0x70, 0x08, 0x07,  // Y
    0x61, 0x51, 0x49, 0x45, 0x43,  // Z
    0x00, 0x7F, 0x41, 0x41, 0x00,  // [
    0x02, 0x04, 0x08, 0x10, 0x20,  // backslash
    0x00, 0x41, 0x41, 0x7F, 0x00,  // ]
    0x04, 0x02, 0x01, 0x02, 0x04,  // ^
    0x40, 0x40, 0x40, 0x40, 0x40,  // _
    0x00, 0x01, 0x02, 0x04, 0x00,  // `
    0x20, 0x54, 0x54, 0x54, 0x78,  // a
    0x7F, 0x48, 0x44, 0x44, 0x38,  // b
    0x38, 0x44, 0x44, 0x44, 0x20,  // c
    0x38, 0x44, 0x44, 0x48, 0x7F,  // d
    0x38, 0x54, 0x54, 0x54, 0x18,  // e
    0x08, 0x7E, 0x09, 0x01, 0x02,  // f
    0x0C, 0x52, 0x52, 0x52, 0x3E,  // g
    0x7F, 0x08, 0x04, 0x04, 0x78,  // h
    0x00, 0x44, 0x7D, 0x40, 0x00,  // i
    0x20, 0x40, 0x44, 0x3D, 0x00,  // j
    0x7F, 0x10, 0x28, 0x44, 0x00,  // k
    0x00, 0x41, 0x7F, 0x40, 0x00,  // l
    0x7C, 0x04, 0x18, 0x04, 0x78,  // m
    0x7C, 0x08, 0x04, 0x04, 0x78,  // n
    0x38, 0x44, 0x44, 0x44, 0x38,  // o
    0x7C, 0x14, 0x14, 0x14, 0x08,  // p
    0x08, 0x14, 0x14, 0x18, 0x7C,  // q
    0x7C, 0x08, 0x04, 0x04, 0x08,  // r
    0x48, 0x54, 0x54, 0x54, 0x20,  // s
    0x04, 0x3F, 0x44, 0x40, 0x20,  // t
    0x3C, 0x40, 0x40, 0x20, 0x7C,  // u
    0x1C, 0x20, 0x40, 0x20, 0x1C,  // v
    0x3C, 0x40, 0x30, 0x40, 0x3C,  // w
    0x44, 0x28, 0x10, 0x28, 0x44,  // x
    0x0C, 0x50, 0x50, 0x50, 0x3C,  // y
    0x44, 0x64, 0x54, 0x4C, 0x44,  // z
    0x00, 0x08, 0x36, 0x41, 0x00,  // {
    0x00, 0x00, 0x7F, 0x00, 0x00,  // |
    0x00, 0x41, 0x36, 0x08, 0x00,  // }
    0x08, 0x04, 0x08, 0x10, 0x08,  // ~
};

constexpr int kGlyphWidth = 5;
constexpr int kGlyphHeight = 7;
constexpr int kAdvance = 6;  // glyph and one column of space

// Text sizes (font scale) and the margins around the plotting area.
constexpr int kTitleScale = 2;
constexpr int kTextScale = 2;  // labels and legend
constexpr int kTickScale = 1;
constexpr int kMarginLeft = 96;
constexpr int kMarginRight = 24;
constexpr int kMarginTop = 66;
constexpr int kMarginBottom = 58;

constexpr std::uint8_t kInk[3] = {40, 40, 40};
constexpr std::uint8_t kGrid[3] = {228, 228, 228};
// Matplotlib's tab10.
constexpr std::uint8_t kPalette[10][3] = {
    {31, 119, 180}, {255, 127, 14},  {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
    {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};

void set_pixel(Image& image, int x, int y, const std::uint8_t* colour) {
  if (x < 0 || y < 0 || x >= image.width || y >= image.height) return;
  std::copy_n(colour, 3, image.at(x, y));
}

void fill_rect(Image& image, int x0, int y0, int x1, int y1, const std::uint8_t* colour) {
  for (int y = std::max(0, y0); y < std::min(image.height, y1); ++y) {
    for (int x = std::max(0, x0); x < std::min(image.width, x1); ++x)
      std::copy_n(colour, 3, image.at(x, y));
  }
}

const std::uint8_t* glyph(char c) {
  const int code = static_cast<unsigned char>(c);
  const int index = code >= 32 && code <= 126 ? code - 32 : '?' - 32;
  return kFont.data() + static_cast<std::size_t>(index) * kGlyphWidth;
}

// `text` turned 90 degrees counter-clockwise (read bottom to top), its bounding box's
// top-left corner at (x, y).
void draw_text_up(Image& image, int x, int y, const std::string& text, const std::uint8_t* colour,
                  int scale) {
  const int length = text_width(text, scale);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::uint8_t* columns = glyph(text[i]);
    for (int col = 0; col < kGlyphWidth; ++col) {
      for (int row = 0; row < kGlyphHeight; ++row) {
        if (((columns[col] >> row) & 1) == 0) continue;
        // Glyph column -> image row (upwards), glyph row -> image column.
        const int px = x + row * scale;
        const int py = y + length - (static_cast<int>(i) * kAdvance + col + 1) * scale;
        fill_rect(image, px, py, px + scale, py + scale, colour);
      }
    }
  }
}

// A line of width 2 from (x0, y0) to (x1, y1) (Bresenham), drawn only inside `clip`.
void draw_line(Image& image, int x0, int y0, int x1, int y1, const std::uint8_t* colour,
               const PlotArea& clip) {
  const int dx = std::abs(x1 - x0);
  const int dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1;
  const int sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    for (int oy = 0; oy < 2; ++oy) {
      for (int ox = 0; ox < 2; ++ox) {
        const int x = x0 + ox;
        const int y = y0 + oy;
        if (x >= clip.left && x < clip.right && y >= clip.top && y < clip.bottom) {
          set_pixel(image, x, y, colour);
        }
      }
    }
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

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

void render_chart(Image& image, int x_offset, const Chart& chart, const ChartSize& size) {
  PlotArea area = plot_area(size);
  area.left += x_offset;
  area.right += x_offset;

  // Ranges over the usable points of every series.
  double x_lo = std::numeric_limits<double>::infinity();
  double x_hi = -x_lo;
  double y_lo = x_lo;
  double y_hi = -x_lo;
  for (const Series& s : chart.series) {
    if (s.x.size() != s.y.size()) {
      throw InvalidArgument("series '" + s.name + "' has " + std::to_string(s.x.size()) +
                            " x values and " + std::to_string(s.y.size()) + " y values");
    }
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
  const double w = area.right - area.left - 1;
  const double h = area.bottom - area.top - 1;
  const auto px = [&](double v) {
    const double t = (v - x_axis.lo) / (x_axis.hi - x_axis.lo);
    return area.left + static_cast<int>(std::lround(t * w));
  };
  const auto py = [&](double v) {
    const double t = (v - y_axis.lo) / (y_axis.hi - y_axis.lo);
    return area.bottom - 1 - static_cast<int>(std::lround(t * h));
  };

  // Grid, ticks and tick labels.
  const int tick_h = kGlyphHeight * kTickScale;
  for (std::size_t i = 0; i < x_axis.ticks.size(); ++i) {
    const int x = px(x_axis.ticks[i]);
    fill_rect(image, x, area.top, x + 1, area.bottom, kGrid);
    fill_rect(image, x, area.bottom, x + 1, area.bottom + 5, kInk);
    draw_text(image, x - text_width(x_axis.labels[i], kTickScale) / 2, area.bottom + 8,
              x_axis.labels[i], kInk, kTickScale);
  }
  for (std::size_t i = 0; i < y_axis.ticks.size(); ++i) {
    const int y = py(y_axis.ticks[i]);
    fill_rect(image, area.left, y, area.right, y + 1, kGrid);
    fill_rect(image, area.left - 5, y, area.left, y + 1, kInk);
    draw_text(image, area.left - 8 - text_width(y_axis.labels[i], kTickScale), y - tick_h / 2,
              y_axis.labels[i], kInk, kTickScale);
  }
  // Frame.
  fill_rect(image, area.left - 1, area.top - 1, area.right + 1, area.top, kInk);
  fill_rect(image, area.left - 1, area.bottom, area.right + 1, area.bottom + 1, kInk);
  fill_rect(image, area.left - 1, area.top - 1, area.left, area.bottom + 1, kInk);
  fill_rect(image, area.right, area.top - 1, area.right + 1, area.bottom + 1, kInk);

  // Title, axis labels, legend.
  const int chart_mid = x_offset + size.width / 2;
  draw_text(image, chart_mid - text_width(chart.title, kTitleScale) / 2, 10, chart.title, kInk,
            kTitleScale);
  draw_text(image, (area.left + area.right) / 2 - text_width(chart.x_label, kTextScale) / 2,
            area.bottom + 8 + tick_h + 10, chart.x_label, kInk, kTextScale);
  draw_text_up(image, x_offset + 10,
               (area.top + area.bottom) / 2 - text_width(chart.y_label, kTextScale) / 2,
               chart.y_label, kInk, kTextScale);
  int legend_width = 0;
  for (const Series& s : chart.series) legend_width += 28 + text_width(s.name, kTextScale) + 16;
  int lx = chart_mid - legend_width / 2;
  const int ly = 36;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    fill_rect(image, lx, ly + 6, lx + 22, ly + 9, series_colour(i));
    draw_text(image, lx + 28, ly, chart.series[i].name, kInk, kTextScale);
    lx += 28 + text_width(chart.series[i].name, kTextScale) + 16;
  }
  if (empty) {
    const std::string none = "no data";
    draw_text(image, (area.left + area.right - text_width(none, kTextScale)) / 2,
              (area.top + area.bottom) / 2, none, kInk, kTextScale);
  }

  // The series, in order (later ones on top); a point alone gets a small square.
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    const std::uint8_t* colour = series_colour(i);
    const auto plotted = [&](std::size_t j) {
      return std::pair(px(chart.log_x ? std::log10(s.x[j]) : s.x[j]), py(s.y[j]));
    };
    for (std::size_t j = 0; j < s.x.size(); ++j) {
      if (!usable(s.x[j], s.y[j], chart.log_x)) continue;
      const auto [x, y] = plotted(j);
      const bool before = j > 0 && usable(s.x[j - 1], s.y[j - 1], chart.log_x);
      const bool after = j + 1 < s.x.size() && usable(s.x[j + 1], s.y[j + 1], chart.log_x);
      if (before) {
        const auto [x0, y0] = plotted(j - 1);
        draw_line(image, x0, y0, x, y, colour, area);
      } else if (!after) {
        fill_rect(image, std::max(x - 2, area.left), std::max(y - 2, area.top),
                  std::min(x + 3, area.right), std::min(y + 3, area.bottom), colour);
      }
    }
  }
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

int text_width(const std::string& text, int scale) {
  if (text.empty()) return 0;
  return (static_cast<int>(text.size()) * kAdvance - 1) * scale;
}

void draw_text(Image& image, int x, int y, const std::string& text, const std::uint8_t* colour,
               int scale) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::uint8_t* columns = glyph(text[i]);
    const int gx = x + static_cast<int>(i) * kAdvance * scale;
    for (int col = 0; col < kGlyphWidth; ++col) {
      for (int row = 0; row < kGlyphHeight; ++row) {
        if (((columns[col] >> row) & 1) == 0) continue;
        fill_rect(image, gx + col * scale, y + row * scale, gx + (col + 1) * scale,
                  y + (row + 1) * scale, colour);
      }
    }
  }
}

Image render_charts(const std::vector<Chart>& charts, const ChartSize& size) {
  if (charts.empty()) throw InvalidArgument("nothing to plot: no chart");
  if (size.width < kMarginLeft + kMarginRight + 50 ||
      size.height < kMarginTop + kMarginBottom + 50) {
    throw InvalidArgument("a chart needs at least " +
                          std::to_string(kMarginLeft + kMarginRight + 50) + " x " +
                          std::to_string(kMarginTop + kMarginBottom + 50) + " pixels, got " +
                          std::to_string(size.width) + " x " + std::to_string(size.height));
  }
  Image image = Image::filled(size.width * static_cast<int>(charts.size()), size.height, 3, 255);
  for (std::size_t i = 0; i < charts.size(); ++i) {
    render_chart(image, static_cast<int>(i) * size.width, charts[i], size);
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
