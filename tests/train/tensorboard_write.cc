// tensorboard_write LOGDIR EXPECTED_DIR: writes TensorBoard events through the job reporter
// (replicator/train/reporter.h) for tensorboard_read.py to read back with TensorBoard's own reader,
// and the PNG files of its images into EXPECTED_DIR as <tag>.png.
//
// Two runs in LOGDIR, as a job that is resumed writes them:
//   run 1 (afresh): train/loss at steps 1..4 (4, 0.1, -2.5, 1e30), eval/test_accuracy 0.8125
//     and value 7 at step 2, the image "pic" at step 4; a record without a step; booleans
//     and strings;
//   run 2 (resumed from step 2): train/loss 30 and 40 at steps 3 and 4, train/big 1.5 at
//     step 2^40, the images "pic" (RGB 5 x 3), "grey" (1 x 1) and "rgba" (4 x 2) at step 4.
// TensorBoard shows run 2's steps 3 and 4 in place of run 1's (the image "pic" too).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>

#include "replicator/train/png.h"
#include "replicator/train/reporter.h"

namespace {

using replicator::train::encode_png;
using replicator::train::Image;
using replicator::train::JobReporter;

Image pattern(int width, int height, int channels, int seed) {
  Image image = Image::filled(width, height, channels, 0);
  for (std::size_t i = 0; i < image.pixels.size(); ++i) {
    image.pixels[i] = static_cast<std::uint8_t>((i * 37 + static_cast<std::size_t>(seed)) % 256);
  }
  return image;
}

void image(JobReporter& reporter, const std::filesystem::path& expected, const std::string& tag,
           const Image& picture) {
  reporter.image(tag, 4, picture);
  const std::vector<std::uint8_t> png =
      encode_png(picture.width, picture.height, picture.channels, picture.pixels);
  std::ofstream(expected / (tag + ".png"), std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tensorboard_write LOGDIR EXPECTED_DIR\n");
    return 2;
  }
  const std::filesystem::path logdir = argv[1];
  const std::filesystem::path expected = argv[2];
  try {
    std::filesystem::create_directories(expected);
    {
      JobReporter run({.tensorboard = logdir, .progress = false});
      const double losses[] = {4, 0.1, -2.5, 1e30};
      for (int step = 1; step <= 4; ++step) {
        run.metric({{"type", "train"},
                    {"step", step},
                    {"loss", losses[step - 1]},
                    {"stopped", false},
                    {"env", "cartpole"}});
      }
      run.metric({{"type", "eval"}, {"step", 2}, {"test_accuracy", 0.8125}});
      run.metric({{"step", 2}, {"value", 7}});
      run.metric({{"type", "train"}, {"loss", 99.0}});  // no step
      run.image("pic", 4, pattern(5, 3, 3, 1));         // replaced by run 2's
    }
    JobReporter resumed({.tensorboard = logdir, .progress = false, .resume_step = 2});
    resumed.metric({{"type", "train"}, {"step", 3}, {"loss", 30.0}});
    resumed.metric({{"type", "train"}, {"step", 4}, {"loss", 40.0}});
    resumed.metric({{"type", "train"}, {"step", std::int64_t{1} << 40}, {"big", 1.5}});
    image(resumed, expected, "pic", pattern(5, 3, 3, 2));
    image(resumed, expected, "grey", pattern(1, 1, 1, 3));
    image(resumed, expected, "rgba", pattern(4, 2, 4, 4));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorboard_write: %s\n", e.what());
    return 1;
  }
  return 0;
}
