#include "replicator/train/png.h"

#include <png.h>
#include <unistd.h>

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

}  // namespace

Image Image::filled(int width, int height, int channels, std::uint8_t fill) {
  check_shape(width, height, channels);
  return {width, height, channels,
          std::vector<std::uint8_t>(byte_count(width, height, channels), fill)};
}

std::vector<std::uint8_t> encode_png(int width, int height, int channels,
                                     std::span<const std::uint8_t> pixels) {
  check_shape(width, height, channels);
  if (width < 1 || height < 1) {
    throw InvalidArgument("a PNG file needs at least 1 x 1 pixels, got " + std::to_string(width) +
                          " x " + std::to_string(height));
  }
  if (pixels.size() != byte_count(width, height, channels)) {
    throw InvalidArgument(std::to_string(width) + " x " + std::to_string(height) + " x " +
                          std::to_string(channels) + " pixels need " +
                          std::to_string(byte_count(width, height, channels)) + " bytes, got " +
                          std::to_string(pixels.size()));
  }
  // libpng's simplified API: no longjmp, errors in image.message.
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  const auto stride = static_cast<png_int_32>(width * channels);
  std::vector<std::uint8_t> png(PNG_IMAGE_PNG_SIZE_MAX(image));
  png_alloc_size_t size = png.size();
  const int written = png_image_write_to_memory(&image, png.data(), &size, /*convert_to_8bit=*/0,
                                                pixels.data(), stride, /*colormap=*/nullptr);
  const std::string message = image.message;
  png_image_free(&image);
  if (written == 0)
    throw Error("libpng could not encode a " + std::to_string(width) + " x " +
                std::to_string(height) + " image: " + message);
  png.resize(size);
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
