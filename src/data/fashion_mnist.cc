// Reading Fashion-MNIST: each gzipped IDX file is read whole (26 MB for the training images)
// and parsed in memory (idx.h) straight into a tensor allocated from its header.
#include "replicator/data/fashion_mnist.h"

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "replicator/errors.h"
#include "src/data/idx.h"

namespace replicator::data {
namespace {

namespace fs = std::filesystem;

static_assert(kImageSide == detail::kIdxImageSide);

// The bytes of the file at `path`; throws DataError naming it when it cannot be read.
std::vector<std::uint8_t> read_file(const fs::path& path) {
  const std::string name = path.string();
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (error) {
    throw DataError("cannot open " + name + ": " + error.message() +
                        " (the Debian package dataset-fashion-mnist installs the files in " +
                        default_fashion_mnist_dir().string() + ")",
                    name);
  }
  struct CloseFile {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  const std::unique_ptr<std::FILE, CloseFile> file(std::fopen(name.c_str(), "rb"));
  if (file == nullptr) {
    throw DataError("cannot open " + name + ": " + std::generic_category().message(errno), name);
  }
  std::vector<std::uint8_t> bytes(size);
  const std::size_t got = std::fread(bytes.data(), 1, bytes.size(), file.get());
  if (got < bytes.size() && std::ferror(file.get())) {
    throw DataError(name + " cannot be read: " + std::generic_category().message(errno), name);
  }
  bytes.resize(got);  // a file that shrank since file_size reads as truncated
  return bytes;
}

}  // namespace

fs::path default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

Examples read_fashion_mnist(const fs::path& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto images_path = dir / (prefix + "-images-idx3-ubyte.gz");
  const auto labels_path = dir / (prefix + "-labels-idx1-ubyte.gz");
  ::torch::Tensor labels;
  const std::int64_t count = detail::parse_idx_labels(
      read_file(labels_path), labels_path.string(), [&](std::int64_t bytes) {
        labels = ::torch::empty({bytes}, ::torch::kUInt8);
        return labels.data_ptr<std::uint8_t>();
      });
  Examples examples;
  examples.labels = labels.to(::torch::kInt64);
  detail::parse_idx_images(read_file(images_path), images_path.string(), count,
                           labels_path.string(), [&](std::int64_t bytes) {
                             examples.images = ::torch::empty(
                                 {bytes / (kImageSide * kImageSide), kImageSide, kImageSide},
                                 ::torch::kUInt8);
                             return examples.images.data_ptr<std::uint8_t>();
                           });
  return examples;
}

}  // namespace replicator::data
