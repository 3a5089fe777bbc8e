// Pictures as PNG files: an 8-bit image in memory, a writer (libpng), and a grid of equally
// sized images (a GAN's samples, one row per class).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace replicator::train {

// An 8-bit image, rows top to bottom, each pixel's `channels` bytes together (1: gray,
// 3: RGB, 4: RGBA). pixels.size() == width * height * channels.
struct Image {
  int width = 0;
  int height = 0;
  int channels = 3;
  std::vector<std::uint8_t> pixels;

  // A width x height image with every byte `fill`. Throws InvalidArgument on a negative
  // size or channels other than 1, 3 and 4.
  static Image filled(int width, int height, int channels, std::uint8_t fill);
  std::uint8_t* at(int x, int y) {
    return pixels.data() + (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                            static_cast<std::size_t>(x)) *
                               static_cast<std::size_t>(channels);
  }
  const std::uint8_t* at(int x, int y) const { return const_cast<Image*>(this)->at(x, y); }
};

// The bytes of a PNG file of `width` x `height` pixels with `channels` 1 (grayscale), 3
// (RGB) or 4 (RGBA), 8 bits each, from `pixels` laid out as in Image, encoded by libpng.
// Never blocks. Throws InvalidArgument on a size below 1 x 1, another channel count or a
// pixels span of the wrong length; Error if libpng fails.
std::vector<std::uint8_t> encode_png(int width, int height, int channels,
                                     std::span<const std::uint8_t> pixels);

// Writes encode_png(...) to `path` atomically: a temporary file in the same folder, then a
// rename (a reader never sees half a picture). BLOCKS on file I/O. Throws InvalidArgument as
// encode_png, DataError when the file cannot be written.
void write_png(const std::filesystem::path& path, int width, int height, int channels,
               std::span<const std::uint8_t> pixels);
void write_png(const std::filesystem::path& path, const Image& image);

struct GridOptions {
  int cols = 8;                     // images per row; rows = ceil(count / cols)
  int border = 1;                   // pixels between images and around the grid
  std::uint8_t border_value = 255;  // the border's byte (every channel)
};

// Tiles `count` images of height x width x channels bytes each, stored one after another
// in `images` (count * height * width * channels bytes), into one image of rows x cols
// cells, row by row; cells past the last image are left as the border. Never blocks. Throws
// InvalidArgument on a wrong span length, a non-positive size or cols, a negative border or
// channels other than 1, 3 and 4.
Image tile_images(std::span<const std::uint8_t> images, int count, int height, int width,
                  int channels, const GridOptions& options = {});

}  // namespace replicator::train
