#include "replicator/train/png.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <system_error>

#include "replicator/errors.h"

namespace replicator::train {
namespace {

void check_shape(int width, int height, int channels) {
  if (width < 0 || height < 0) {
    throw InvalidArgument("an image needs a non-negative size, got " + std::to_string(width) +
                          " x " + std::to_string(height));
  }
  if (channels != 1 && channels != 3 && channels != 4) {
    throw InvalidArgument("an image has 1 (gray), 3 (RGB) or 4 (RGBA) channels, got " +
                          std::to_string(channels));
  }
}

std::size_t byte_count(int width, int height, int channels) {
  return static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
         static_cast<std::size_t>(channels);
}

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 24));
  out.push_back(static_cast<std::uint8_t>(v >> 16));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

// A chunk: length, type, data, and the CRC-32 of type and data.
void put_chunk(std::vector<std::uint8_t>& out, const char (&type)[5],
               std::span<const std::uint8_t> data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = ::crc32(::crc32(0L, Z_NULL, 0), out.data() + type_at,
                            static_cast<uInt>(out.size() - type_at));
  put_u32(out, static_cast<std::uint32_t>(crc));
}

}  // namespace

Image Image::filled(int width, int height, int channels, std::uint8_t fill) {
  check_shape(width, height, channels);
  return {width, height, channels,
          std::vector<std::uint8_t>(byte_count(width, height, channels), fill)};
}

std::vector<std::uint8_t> encode_png(int width, int height, int channels,
                                     std::span<const std::uint8_t> pixels) {
  check_shape(width, height, channels);
  if (width == 0 || height == 0) {
    throw InvalidArgument("a PNG needs at least one pixel, got " + std::to_string(width) + " x " +
                          std::to_string(height));
  }
  if (pixels.size() != byte_count(width, height, channels)) {
    throw InvalidArgument("a " + std::to_string(width) + " x " + std::to_string(height) + " x " +
                          std::to_string(channels) + " image needs " +
                          std::to_string(byte_count(width, height, channels)) + " bytes, got " +
                          std::to_string(pixels.size()));
  }
  // Scanlines with filter 0 (none) each: the pictures here are flat colours and lines,
  // which deflate compresses well without a predictor.
  const std::size_t row = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  std::vector<std::uint8_t> raw;
  raw.reserve((row + 1) * static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto* begin = pixels.data() + static_cast<std::size_t>(y) * row;
    raw.insert(raw.end(), begin, begin + row);
  }
  uLongf deflated_size = ::compressBound(static_cast<uLong>(raw.size()));
  std::vector<std::uint8_t> deflated(deflated_size);
  if (::compress2(deflated.data(), &deflated_size, raw.data(), static_cast<uLong>(raw.size()), 6) !=
      Z_OK) {
    throw InvalidArgument("zlib could not deflate a " + std::to_string(width) + " x " +
                          std::to_string(height) + " image");
  }
  deflated.resize(deflated_size);

  std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<std::uint8_t> ihdr;
  put_u32(ihdr, static_cast<std::uint32_t>(width));
  put_u32(ihdr, static_cast<std::uint32_t>(height));
  // Bit depth 8; colour type 0 (gray), 2 (RGB) or 6 (RGBA); deflate, adaptive filters, no
  // interlace.
  const std::uint8_t colour_type = channels == 1 ? 0 : channels == 3 ? 2 : 6;
  ihdr.insert(ihdr.end(), {8, colour_type, 0, 0, 0});
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", deflated);
  put_chunk(png, "IEND", {});
  return png;
}

void write_png(const std::filesystem::path& path, int width, int height, int channels,
               std::span<const std::uint8_t> pixels) {
  const std::vector<std::uint8_t> png = encode_png(width, height, channels, pixels);
  const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
    if (!out.flush()) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw DataError("cannot write the picture " + path.string(), path.string());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw DataError("cannot write the picture " + path.string() + ": " + ec.message(),
                    path.string());
  }
}

void write_png(const std::filesystem::path& path, const Image& image) {
  write_png(path, image.width, image.height, image.channels, image.pixels);
}

Image tile_images(std::span<const std::uint8_t> images, int count, int height, int width,
                  int channels, const GridOptions& options) {
  check_shape(width, height, channels);
  if (count < 1 || height < 1 || width < 1 || options.cols < 1 || options.border < 0) {
    throw InvalidArgument(
        "a grid needs at least one image of at least 1 x 1 pixels, cols >= 1 "
        "and a border >= 0; got " +
        std::to_string(count) + " images of " + std::to_string(height) + " x " +
        std::to_string(width) + ", cols " + std::to_string(options.cols) + ", border " +
        std::to_string(options.border));
  }
  const std::size_t one = byte_count(width, height, channels);
  if (images.size() != one * static_cast<std::size_t>(count)) {
    throw InvalidArgument(std::to_string(count) + " images of " + std::to_string(height) + " x " +
                          std::to_string(width) + " x " + std::to_string(channels) + " need " +
                          std::to_string(one * static_cast<std::size_t>(count)) + " bytes, got " +
                          std::to_string(images.size()));
  }
  const int cols = std::min(options.cols, count);
  const int rows = (count + options.cols - 1) / options.cols;
  const int b = options.border;
  Image grid = Image::filled(cols * width + (cols + 1) * b, rows * height + (rows + 1) * b,
                             channels, options.border_value);
  const std::size_t row_bytes =
      static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  for (int i = 0; i < count; ++i) {
    const int x0 = b + (i % options.cols) * (width + b);
    const int y0 = b + (i / options.cols) * (height + b);
    const std::uint8_t* src = images.data() + one * static_cast<std::size_t>(i);
    for (int y = 0; y < height; ++y) {
      std::copy_n(src + static_cast<std::size_t>(y) * row_bytes, row_bytes, grid.at(x0, y0 + y));
    }
  }
  return grid;
}

}  // namespace replicator::train
