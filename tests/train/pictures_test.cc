// The pictures (replicator/train/png.h, plot.h): PNG files decoded here with zlib (and by
// Python's zlib when python3 is there), the image grid, tick values, charts.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "replicator/errors.h"
#include "replicator/train/plot.h"
#include "replicator/train/png.h"
#include "tests/harness/temp_dir.h"

namespace replicator::train {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 |
         std::uint32_t{p[3]};
}

// The PNG filters' predictor of byte `i` of a row (PNG spec. 9.2): a the byte one pixel to
// the left, b above, c above-left.
std::uint8_t predict(int filter, int a, int b, int c) {
  switch (filter) {
    case 0:
      return 0;
    case 1:
      return static_cast<std::uint8_t>(a);
    case 2:
      return static_cast<std::uint8_t>(b);
    case 3:
      return static_cast<std::uint8_t>((a + b) / 2);
    default: {
      const int p = a + b - c;
      const int pa = std::abs(p - a);
      const int pb = std::abs(p - b);
      const int pc = std::abs(p - c);
      return static_cast<std::uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
    }
  }
}

// A PNG decoder of its own (zlib and the PNG spec), checking every byte it reads: the
// signature, each chunk's CRC, IHDR's fields (8-bit grey, RGB or RGBA, no interlace), the
// IDAT chunks (and ancillary ones), IEND last, a known filter on every row.
Image decode_png(const std::vector<std::uint8_t>& png) {
  const std::uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_GE(png.size(), 8u);
  EXPECT_TRUE(std::equal(signature, signature + 8, png.begin())) << "bad signature";
  Image image;
  std::vector<std::uint8_t> idat;
  std::vector<std::string> types;
  std::size_t at = 8;
  while (at + 12 <= png.size()) {
    const std::uint32_t length = u32(&png[at]);
    EXPECT_LE(at + 12 + length, png.size()) << "chunk past the end";
    if (at + 12 + length > png.size()) break;
    const std::string type(png.begin() + static_cast<long>(at) + 4,
                           png.begin() + static_cast<long>(at) + 8);
    types.push_back(type);
    const std::uint8_t* data = &png[at + 8];
    const uLong crc = ::crc32(::crc32(0L, Z_NULL, 0), &png[at + 4], length + 4);
    EXPECT_EQ(u32(data + length), static_cast<std::uint32_t>(crc)) << "CRC of " << type;
    if (type == "IHDR") {
      EXPECT_EQ(length, 13u);
      image.width = static_cast<int>(u32(data));
      image.height = static_cast<int>(u32(data + 4));
      EXPECT_EQ(data[8], 8) << "bit depth";
      EXPECT_TRUE(data[9] == 0 || data[9] == 2 || data[9] == 6) << "colour type " << int{data[9]};
      image.channels = data[9] == 0 ? 1 : data[9] == 2 ? 3 : 4;
      EXPECT_EQ(data[10], 0) << "compression";
      EXPECT_EQ(data[11], 0) << "filter method";
      EXPECT_EQ(data[12], 0) << "interlace";
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + length);
    }
    at += 12 + length;
  }
  EXPECT_EQ(at, png.size()) << "bytes after the last chunk";
  EXPECT_GE(types.size(), 3u);
  if (types.size() < 3) return image;
  EXPECT_EQ(types.front(), "IHDR");
  EXPECT_EQ(types.back(), "IEND");
  // Between them: IDAT chunks and ancillary ones (a lower-case first letter: sRGB, ...).
  for (std::size_t i = 1; i + 1 < types.size(); ++i) {
    EXPECT_TRUE(types[i] == "IDAT" || std::islower(static_cast<unsigned char>(types[i][0])))
        << "chunk " << types[i];
  }
  const std::size_t row = static_cast<std::size_t>(image.width) * image.channels;
  std::vector<std::uint8_t> raw((row + 1) * static_cast<std::size_t>(image.height) + 1);
  uLongf raw_size = raw.size();
  EXPECT_EQ(::uncompress(raw.data(), &raw_size, idat.data(), idat.size()), Z_OK);
  EXPECT_EQ(raw_size, (row + 1) * static_cast<std::size_t>(image.height));
  const std::size_t bpp = static_cast<std::size_t>(image.channels);
  image.pixels.resize(row * static_cast<std::size_t>(image.height));
  for (int y = 0; y < image.height; ++y) {
    const std::uint8_t* line = raw.data() + static_cast<std::size_t>(y) * (row + 1);
    EXPECT_LE(line[0], 4) << "filter of row " << y;
    std::uint8_t* out = image.pixels.data() + static_cast<std::size_t>(y) * row;
    const std::uint8_t* up = y > 0 ? out - row : nullptr;
    for (std::size_t i = 0; i < row; ++i) {
      const int a = i >= bpp ? out[i - bpp] : 0;
      const int b = up != nullptr ? up[i] : 0;
      const int c = up != nullptr && i >= bpp ? up[i - bpp] : 0;
      out[i] = static_cast<std::uint8_t>(line[1 + i] + predict(line[0], a, b, c));
    }
  }
  return image;
}

std::vector<std::uint8_t> pattern(int width, int height, int channels) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width * height * channels));
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<std::uint8_t>((i * 37 + i / 7) % 256);
  }
  return pixels;
}

TEST(Png, RoundTripsGrayRgbAndRgba) {
  TempDir dir;
  const std::vector<std::tuple<int, int, int>> shapes = {
      {1, 1, 1}, {7, 3, 1}, {5, 9, 3}, {300, 200, 3}, {6, 4, 4}};
  for (const auto& [w, h, c] : shapes) {
    const std::vector<std::uint8_t> pixels = pattern(w, h, c);
    const fs::path path = dir.path() / "p.png";
    write_png(path, w, h, c, pixels);
    const Image back = decode_png(read_bytes(path));
    EXPECT_EQ(back.width, w);
    EXPECT_EQ(back.height, h);
    EXPECT_EQ(back.channels, c);
    EXPECT_EQ(back.pixels, pixels) << w << "x" << h << "x" << c;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1)
      << "a temporary file was left behind";
}

// A second independent reader: Python's zlib and struct (PIL is not assumed).
TEST(Png, PythonReadsIt) {
  // std::system: this test starts no thread.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  if (std::system("python3 -c 'import zlib, struct' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no python3 with zlib";
  }
  TempDir dir;
  const int w = 13, h = 6;
  for (int c : {1, 3}) {
    const std::vector<std::uint8_t> pixels = pattern(w, h, c);
    write_png(dir.path() / "p.png", w, h, c, pixels);
    std::ofstream(dir.path() / "expected.raw", std::ios::binary)
        .write(reinterpret_cast<const char*>(pixels.data()),
               static_cast<std::streamsize>(pixels.size()));
    std::ofstream(dir.path() / "read.py") << R"(import struct, sys, zlib
png = open(sys.argv[1], 'rb').read()
assert png[:8] == b'\x89PNG\r\n\x1a\n', 'signature'
at, idat, header = 8, b'', None
while at < len(png):
    n, kind = struct.unpack('>I4s', png[at:at + 8])
    body = png[at + 8:at + 8 + n]
    (crc,) = struct.unpack('>I', png[at + 8 + n:at + 12 + n])
    assert zlib.crc32(kind + body) == crc, 'crc of %s' % kind
    if kind == b'IHDR': header = struct.unpack('>IIBBBBB', body)
    if kind == b'IDAT': idat += body
    at += 12 + n
w, h, depth, colour = header[:4]
channels = {0: 1, 2: 3}[colour]
raw = zlib.decompress(idat)
row = w * channels
def predict(kind, a, b, c):
    if kind == 0: return 0
    if kind == 1: return a
    if kind == 2: return b
    if kind == 3: return (a + b) // 2
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c
out = bytearray()
for y in range(h):
    kind = raw[y * (row + 1)]
    assert kind <= 4, 'filter'
    line = raw[y * (row + 1) + 1:(y + 1) * (row + 1)]
    for i in range(row):
        a = out[-channels] if i >= channels else 0
        b = out[-row] if y > 0 else 0
        c = out[-row - channels] if y > 0 and i >= channels else 0
        out.append((line[i] + predict(kind, a, b, c)) & 255)
pixels = bytes(out)
expected = open(sys.argv[2], 'rb').read()
assert (w, h, depth, channels) == (int(sys.argv[3]), int(sys.argv[4]), 8, int(sys.argv[5]))
assert pixels == expected, 'pixels differ'
print('ok')
)";
    const std::string command = "python3 " + (dir.path() / "read.py").string() + " " +
                                (dir.path() / "p.png").string() + " " +
                                (dir.path() / "expected.raw").string() + " " + std::to_string(w) +
                                " " + std::to_string(h) + " " + std::to_string(c);
    EXPECT_EQ(std::system(command.c_str()), 0) << command;  // NOLINT(concurrency-mt-unsafe)
  }
}

TEST(Png, BadInputAndUnwritablePathsThrow) {
  const std::vector<std::uint8_t> pixels(12);
  EXPECT_THROW(encode_png(2, 2, 2, pixels), InvalidArgument);
  EXPECT_THROW(encode_png(1, 1, 5, std::vector<std::uint8_t>(5)), InvalidArgument);
  EXPECT_THROW(encode_png(2, 2, 1, pixels), InvalidArgument);  // 4 bytes expected
  EXPECT_THROW(encode_png(0, 2, 3, {}), InvalidArgument);
  TempDir dir;
  try {
    write_png(dir.path() / "missing" / "p.png", 2, 2, 3, pixels);
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(e.path(), (dir.path() / "missing" / "p.png").string());
  }
}

TEST(Grid, TilesImagesRowByRowWithBorders) {
  // Five 2x3 gray images, image i filled with 10 * (i + 1), three to a row, border 1.
  const int h = 2, w = 3;
  std::vector<std::uint8_t> images;
  for (int i = 0; i < 5; ++i) images.insert(images.end(), std::size_t{h} * w, 10 * (i + 1));
  const Image grid = tile_images(images, 5, h, w, 1, {.cols = 3, .border = 1, .border_value = 0});
  EXPECT_EQ(grid.width, 3 * w + 4);
  EXPECT_EQ(grid.height, 2 * h + 3);
  for (int i = 0; i < 5; ++i) {
    const int x0 = 1 + (i % 3) * (w + 1);
    const int y0 = 1 + (i / 3) * (h + 1);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) EXPECT_EQ(*grid.at(x0 + x, y0 + y), 10 * (i + 1)) << i;
    }
  }
  EXPECT_EQ(*grid.at(0, 0), 0);                        // border
  EXPECT_EQ(*grid.at(w + 1, 1), 0);                    // between images
  EXPECT_EQ(*grid.at(1 + 2 * (w + 1), 1 + h + 1), 0);  // the empty sixth cell
  EXPECT_THROW(tile_images(images, 4, h, w, 1), InvalidArgument);
  EXPECT_THROW(tile_images(images, 5, h, w, 1, {.cols = 0}), InvalidArgument);
}

TEST(Plot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 100), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(nice_ticks(3, 97), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(nice_ticks(-3, 7), (std::vector<double>{-4, -2, 0, 2, 4, 6, 8}));
  const std::vector<double> unit = nice_ticks(0, 1);
  ASSERT_EQ(unit.size(), 6u);
  for (std::size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * i, 1e-12);
  const std::vector<double> one = nice_ticks(5, 5);
  EXPECT_LE(one.front(), 5);
  EXPECT_GE(one.back(), 5);
  EXPECT_GT(one.back(), one.front());
  for (double lo : {-1e9, -0.37, 0.0, 12.5}) {
    for (double span : {1e-6, 0.9, 3.3, 1e5}) {
      const std::vector<double> t = nice_ticks(lo, lo + span);
      EXPECT_LE(t.size(), 7u) << lo << " " << span;
      EXPECT_LE(t.front(), lo);
      EXPECT_GE(t.back(), lo + span);
    }
  }
  EXPECT_THROW(nice_ticks(1, 0), InvalidArgument);
  EXPECT_THROW(nice_ticks(0, NAN), InvalidArgument);
}

// Pixels of `colour` in the rectangle [x0, x1) x [y0, y1).
int count_colour(const Image& image, int x0, int y0, int x1, int y1, const std::uint8_t* colour) {
  int n = 0;
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) n += std::equal(colour, colour + 3, image.at(x, y)) ? 1 : 0;
  }
  return n;
}

TEST(Plot, RisingLineGoesFromBottomLeftToTopRight) {
  Chart chart{.title = "loss", .x_label = "step", .y_label = "value"};
  Series s{.name = "rising"};
  for (int i = 0; i <= 100; ++i) {
    s.x.push_back(i);
    // A gap of NaNs in the middle: no line drawn across it.
    s.y.push_back(i >= 40 && i <= 60 ? std::nan("") : i);
  }
  chart.series.push_back(s);
  const Image image = render_charts({chart});
  EXPECT_EQ(image.width, 800);
  EXPECT_EQ(image.height, 500);
  const PlotArea a = plot_area();
  const int mx = (a.left + a.right) / 2;
  const int my = (a.top + a.bottom) / 2;
  const std::uint8_t* c = series_colour(0);
  EXPECT_GT(count_colour(image, a.left, my, mx, a.bottom, c), 100) << "bottom-left";
  EXPECT_GT(count_colour(image, mx, a.top, a.right, my, c), 100) << "top-right";
  EXPECT_EQ(count_colour(image, a.left, a.top, mx - 20, my - 20, c), 0) << "top-left";
  EXPECT_EQ(count_colour(image, mx + 20, my + 20, a.right, a.bottom, c), 0) << "bottom-right";
  // x 0..100 spans the area (ticks 0..100); 45..55 is inside the gap.
  const int gap0 = a.left + (a.right - a.left) * 45 / 100;
  const int gap1 = a.left + (a.right - a.left) * 55 / 100;
  EXPECT_EQ(count_colour(image, gap0, a.top, gap1, a.bottom, c), 0) << "NaN gap drawn";
  // The legend's swatch is above the area, the title's ink above that.
  EXPECT_GT(count_colour(image, 0, 0, image.width, a.top, c), 0) << "legend";

  TempDir dir;
  write_png(dir.path() / "chart.png", image);
  EXPECT_EQ(decode_png(read_bytes(dir.path() / "chart.png")).pixels, image.pixels);
}

TEST(Plot, SideBySideChartsAndLogX) {
  Chart a{.title = "a"};
  a.series.push_back({.name = "one", .x = {1, 10, 100, 1000}, .y = {4, 3, 2, 1}});
  a.log_x = true;
  Chart b{.title = "b"};
  b.series.push_back({.name = "one", .x = {0, 1}, .y = {0, 1}});
  b.series.push_back({.name = "two", .x = {0, 1}, .y = {1, 0}});
  const Image image = render_charts({a, b}, {.width = 400, .height = 300});
  EXPECT_EQ(image.width, 800);
  EXPECT_EQ(image.height, 300);
  const PlotArea p = plot_area({.width = 400, .height = 300});
  // The log axis makes the falling line straight: its middle point is mid-area.
  EXPECT_GT(count_colour(image, (p.left + p.right) / 2 - 3, (p.top + p.bottom) / 2 - 3,
                         (p.left + p.right) / 2 + 3, (p.top + p.bottom) / 2 + 3, series_colour(0)),
            0);
  EXPECT_GT(count_colour(image, 400 + p.left, p.top, 400 + p.right, p.bottom, series_colour(1)),
            50);
  Chart bad;
  bad.series.push_back({.name = "bad", .x = {1, 2}, .y = {1}});
  EXPECT_THROW(render_charts({bad}), InvalidArgument);
  EXPECT_THROW(render_charts({}), InvalidArgument);
}

TEST(Plot, ChartsFromMetrics) {
  TempDir dir;
  std::ofstream(dir.path() / "metrics.jsonl")
      << R"({"type":"train","step":1,"loss":2.0})"
         "\n"
      << "not json\n"
      << R"({"type":"train","step":2,"loss":1.5})"
         "\n"
      << R"({"type":"eval","step":2,"test_accuracy":0.5,"loss":9})"
         "\n";
  const std::vector<Chart> charts = charts_from_metrics(
      dir.path() / "metrics.jsonl", "step", {{"loss"}, {"test_accuracy", "missing"}}, "train");
  ASSERT_EQ(charts.size(), 2u);
  EXPECT_EQ(charts[0].series[0].x, (std::vector<double>{1, 2}));
  EXPECT_EQ(charts[0].series[0].y, (std::vector<double>{2.0, 1.5}));
  EXPECT_TRUE(charts[1].series[0].x.empty());  // only in eval lines
  EXPECT_EQ(charts_from_metrics(dir.path() / "metrics.jsonl", "step", {{"loss"}, {"test_accuracy"}},
                                "", /*skip_empty=*/true)
                .size(),
            2u);
  EXPECT_EQ(charts_from_metrics(dir.path() / "metrics.jsonl", "step", {{"none"}, {"loss"}}, "",
                                /*skip_empty=*/true)
                .size(),
            1u);
  EXPECT_THROW(charts_from_metrics(dir.path() / "absent.jsonl", "step", {{"loss"}}), DataError);
}

}  // namespace
}  // namespace replicator::train
