// Fashion-MNIST: the four gzipped IDX files of Zalando's Fashion-MNIST (Debian package
// `dataset-fashion-mnist`), read into two tensors.
//
// read_fashion_mnist BLOCKS while it reads and inflates both files of a split (about half a
// second for the 60000 training images) and throws replicator::DataError, whose `path()`
// names the offending file, when a file is missing, unreadable, not gzip, a corrupt gzip
// stream, has the wrong IDX magic or image size, is truncated or has trailing data, when
// the two files disagree on the example count (path() is then the images file), or when a
// label is outside 0..9.
// The returned Examples are plain tensors: share them read-only between threads (e.g. as
// std::shared_ptr<const Examples>); nothing in this layer mutates them.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>

namespace replicator::data {

enum class Split { kTrain, kTest };

// Image side of Fashion-MNIST (and MNIST) images, in pixels.
inline constexpr std::int64_t kImageSide = 28;

// Where the Debian package installs the files: /usr/share/datasets/fashion-mnist.
std::filesystem::path default_fashion_mnist_dir();

// N labelled 28×28 grey images, pixel 0 = background.
struct Examples {
  ::torch::Tensor images;  // uint8 [N, 28, 28], contiguous
  ::torch::Tensor labels;  // int64 [N], each in 0..9
  std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Reads `dir`/train-*.gz (60000 examples) or `dir`/t10k-*.gz (10000 examples).
Examples read_fashion_mnist(const std::filesystem::path& dir, Split split);

}  // namespace replicator::data
