// The PNG writer (replicator/train/png.h) read back by libpng, a decoder we did not write: every
// pixel of grey, RGB and RGBA images of odd sizes.
#include "replicator/train/png.h"

#include <gtest/gtest.h>
#include <png.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace replicator::train {
namespace {

struct Decoded {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;
};

// libpng's simplified API, reading in the file's own format (no conversion); fails the test
// with libpng's message on a file it rejects.
Decoded decode_with_libpng(const std::vector<std::uint8_t>& file) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, file.data(), file.size()) == 0) {
    ADD_FAILURE() << "libpng: " << image.message;
    return {};
  }
  Decoded out{.width = static_cast<int>(image.width),
              .height = static_cast<int>(image.height),
              .channels = static_cast<int>(PNG_IMAGE_PIXEL_CHANNELS(image.format))};
  EXPECT_EQ(image.format & ~(PNG_FORMAT_FLAG_COLOR | PNG_FORMAT_FLAG_ALPHA), 0u)
      << "8-bit grey, RGB or RGBA, no colour map";
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr) == 0) {
    ADD_FAILURE() << "libpng: " << image.message;
  }
  png_image_free(&image);
  return out;
}

std::vector<std::uint8_t> pattern(int width, int height, int channels) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width * height * channels));
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    pixels[i] = static_cast<std::uint8_t>((i * 151 + i / 5) % 256);
  }
  return pixels;
}

TEST(PngLibpng, DecodesEveryPixelOfGreyRgbAndRgba) {
  for (int channels : {1, 3, 4}) {
    for (const auto& [width, height] :
         std::vector<std::tuple<int, int>>{{1, 1}, {3, 5}, {257, 2}, {2, 257}}) {
      const std::vector<std::uint8_t> pixels = pattern(width, height, channels);
      const Decoded back = decode_with_libpng(encode_png(width, height, channels, pixels));
      const std::string what =
          std::to_string(width) + " x " + std::to_string(height) + " x " + std::to_string(channels);
      EXPECT_EQ(back.width, width) << what;
      EXPECT_EQ(back.height, height) << what;
      EXPECT_EQ(back.channels, channels) << what;
      EXPECT_EQ(back.pixels, pixels) << what;
    }
  }
}

TEST(PngLibpng, DecodesAFlatImage) {
  // One colour compresses to almost nothing: the shortest IDAT the writer makes.
  const Image white = Image::filled(64, 48, 3, 255);
  const Decoded back =
      decode_with_libpng(encode_png(white.width, white.height, white.channels, white.pixels));
  EXPECT_EQ(back.pixels, white.pixels);
}

}  // namespace
}  // namespace replicator::train
