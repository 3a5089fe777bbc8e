// read_fashion_mnist on the real files of the Debian package (skipped where it is not
// installed) and on small crafted files, one per way a file can be wrong.
#include "replicator/data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "replicator/data/sharded_loader.h"
#include "replicator/errors.h"

namespace replicator::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

void append_be32(Bytes& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back((value >> shift) & 0xff);
}

Bytes images_idx(std::uint32_t magic, std::uint32_t count, std::uint32_t rows, std::uint32_t cols,
                 std::size_t payload_bytes) {
  Bytes bytes;
  for (auto v : {magic, count, rows, cols}) append_be32(bytes, v);
  for (std::size_t i = 0; i < payload_bytes; ++i) bytes.push_back((i * 7 + i / 28) & 0xff);
  return bytes;
}

Bytes labels_idx(std::uint32_t magic, std::uint32_t count, const Bytes& labels) {
  Bytes bytes;
  append_be32(bytes, magic);
  append_be32(bytes, count);
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  return bytes;
}

void write_gz(const fs::path& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

void write_raw(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

Bytes read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The whole decompressed content of a gz file, read with gzread: independent of the reader.
Bytes gunzip(const fs::path& path) {
  Bytes out;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return out;
  std::array<std::uint8_t, 1 << 16> chunk{};
  int got = 0;
  while ((got = gzread(file, chunk.data(), chunk.size())) > 0) {
    out.insert(out.end(), chunk.begin(), chunk.begin() + got);
  }
  gzclose(file);
  return out;
}

// Runs `read` and returns the DataError it throws (a failure if it throws none).
template <typename Read>
DataError data_error_of(Read&& read) {
  try {
    read();
  } catch (const DataError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a DataError";
  return DataError("none", "");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- the real files -------------------------------------------------------------------

class RealFashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(default_fashion_mnist_dir() / "train-labels-idx1-ubyte.gz")) return;
    const auto start = std::chrono::steady_clock::now();
    train_ = std::make_shared<const Examples>(
        read_fashion_mnist(default_fashion_mnist_dir(), Split::kTrain));
    test_ = std::make_shared<const Examples>(
        read_fashion_mnist(default_fashion_mnist_dir(), Split::kTest));
    std::printf("read both splits in %.2f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  static void TearDownTestSuite() {
    train_.reset();
    test_.reset();
  }
  void SetUp() override {
    if (!train_) GTEST_SKIP() << "package dataset-fashion-mnist is not installed";
  }

  static std::shared_ptr<const Examples> train_;
  static std::shared_ptr<const Examples> test_;
};

std::shared_ptr<const Examples> RealFashionMnist::train_;
std::shared_ptr<const Examples> RealFashionMnist::test_;

TEST_F(RealFashionMnist, SizesTypesAndClassHistogram) {
  ASSERT_EQ(train_->size(), 60000);
  ASSERT_EQ(test_->size(), 10000);
  for (const auto* examples : {train_.get(), test_.get()}) {
    EXPECT_EQ(examples->images.scalar_type(), ::torch::kUInt8);
    EXPECT_EQ(examples->images.sizes(), (std::vector<std::int64_t>{examples->size(), 28, 28}));
    EXPECT_TRUE(examples->images.is_contiguous());
    EXPECT_EQ(examples->labels.scalar_type(), ::torch::kInt64);
    const auto per_class = examples->size() / 10;
    EXPECT_TRUE(::torch::equal(::torch::bincount(examples->labels, {}, 10),
                               ::torch::full({10}, per_class, ::torch::kInt64)));
  }
}

TEST_F(RealFashionMnist, MatchesAnIndependentReadOfTheRawFiles) {
  const auto labels = train_->labels.data_ptr<std::int64_t>();
  EXPECT_EQ((std::vector<std::int64_t>(labels, labels + 5)),
            (std::vector<std::int64_t>{9, 0, 0, 3, 0}));

  const auto raw_labels = gunzip(default_fashion_mnist_dir() / "train-labels-idx1-ubyte.gz");
  ASSERT_EQ(raw_labels.size(), 8u + 60000u);
  for (std::int64_t i = 0; i < 60000; ++i) ASSERT_EQ(labels[i], raw_labels[8 + i]) << i;

  const auto raw_images = gunzip(default_fashion_mnist_dir() / "t10k-images-idx3-ubyte.gz");
  ASSERT_EQ(raw_images.size(), 16u + 10000u * 784u);
  EXPECT_EQ(
      std::memcmp(test_->images.data_ptr<std::uint8_t>(), raw_images.data() + 16, 10000u * 784u),
      0);
}

// Two replicas, each on its own thread with its own loader over the one shared training
// set, as a training job runs them: together they see every training example once.
TEST_F(RealFashionMnist, TwoReplicasCoverOneEpoch) {
  constexpr int kReplicas = 2;
  std::array<std::vector<std::int64_t>, kReplicas> seen;
  std::array<double, kReplicas> seconds{};
  std::array<std::int64_t, kReplicas> batches{};
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r) {
    threads.emplace_back([&, r] {
      ShardedLoader loader(train_, {.global_batch = 256,
                                    .replica = r,
                                    .num_replicas = kReplicas,
                                    .seed = 7,
                                    .augment = true});
      const auto start = std::chrono::steady_clock::now();
      loader.start_epoch(0);
      while (auto batch = loader.next()) {
        ++batches[r];
        const auto labels = batch->labels.data_ptr<std::int64_t>();
        seen[r].insert(seen[r].end(), labels, labels + batch->labels.size(0));
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto& thread : threads) thread.join();
  std::printf("one epoch of next(), B=256, R=2, augment: %.3f s and %.3f s per replica\n",
              seconds[0], seconds[1]);
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(batches[r], 60000 / 256);
    EXPECT_EQ(seen[r].size(), 60000u / 256u * 128u);
  }
  // Labels only, so the check is the class histogram of the 59904 examples kept.
  std::array<std::int64_t, 10> histogram{};
  for (const auto& labels : seen) {
    for (auto label : labels) ++histogram[label];
  }
  std::int64_t total = 0;
  for (auto count : histogram) {
    EXPECT_LE(count, 6000);
    EXPECT_GE(count, 6000 - 96);  // at most the 96 dropped examples are missing
    total += count;
  }
  EXPECT_EQ(total, 59904);
}

// ---- crafted files ---------------------------------------------------------------------

class CraftedFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("replicator_data_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    images_ = dir_ / "train-images-idx3-ubyte.gz";
    labels_ = dir_ / "train-labels-idx1-ubyte.gz";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A valid pair of three examples with labels 3, 0, 9.
  void write_valid_pair() {
    write_gz(images_, images_idx(0x803, 3, 28, 28, 3 * 784));
    write_gz(labels_, labels_idx(0x801, 3, {3, 0, 9}));
  }

  DataError error_reading() {
    return data_error_of([&] { read_fashion_mnist(dir_, Split::kTrain); });
  }

  fs::path dir_;
  fs::path images_;
  fs::path labels_;
};

TEST_F(CraftedFiles, ValidFilesRead) {
  write_valid_pair();
  const auto examples = read_fashion_mnist(dir_, Split::kTrain);
  ASSERT_EQ(examples.size(), 3);
  EXPECT_TRUE(::torch::equal(examples.labels, ::torch::tensor({3, 0, 9}, ::torch::kInt64)));
  const auto expected = images_idx(0x803, 3, 28, 28, 3 * 784);
  EXPECT_EQ(std::memcmp(examples.images.data_ptr<std::uint8_t>(), expected.data() + 16, 3 * 784),
            0);
}

TEST_F(CraftedFiles, TestSplitReadsT10kFiles) {
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", images_idx(0x803, 2, 28, 28, 2 * 784));
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", labels_idx(0x801, 2, {1, 2}));
  EXPECT_EQ(read_fashion_mnist(dir_, Split::kTest).size(), 2);
}

TEST_F(CraftedFiles, SeveralGzipMembersRead) {
  const auto bytes = images_idx(0x803, 3, 28, 28, 3 * 784);
  const auto half = dir_ / "half.gz";
  write_gz(half, Bytes(bytes.begin(), bytes.begin() + 1000));
  auto joined = read_raw(half);
  write_gz(half, Bytes(bytes.begin() + 1000, bytes.end()));
  const auto second = read_raw(half);
  joined.insert(joined.end(), second.begin(), second.end());
  write_raw(images_, joined);
  write_gz(labels_, labels_idx(0x801, 3, {3, 0, 9}));
  EXPECT_EQ(read_fashion_mnist(dir_, Split::kTrain).size(), 3);
}

TEST_F(CraftedFiles, MissingFile) {
  write_gz(labels_, labels_idx(0x801, 3, {3, 0, 9}));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "cannot open")) << error.what();
  EXPECT_TRUE(contains(error.what(), "No such file")) << error.what();
}

TEST_F(CraftedFiles, DirectoryInsteadOfAFile) {
  write_valid_pair();
  fs::remove(images_);
  fs::create_directory(images_);
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "cannot open")) << error.what();
}

TEST_F(CraftedFiles, EmptyFile) {
  write_valid_pair();
  write_raw(labels_, {});
  const auto error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(contains(error.what(), "is empty")) << error.what();
}

TEST_F(CraftedFiles, NotGzip) {
  write_valid_pair();
  write_raw(images_, images_idx(0x803, 3, 28, 28, 3 * 784));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "is not a gzip file")) << error.what();
}

TEST_F(CraftedFiles, CorruptGzipStream) {
  write_valid_pair();
  auto bytes = read_raw(images_);
  bytes[bytes.size() - 6] ^= 0xff;  // the CRC-32 in the gzip trailer
  write_raw(images_, bytes);
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "is a corrupt gzip stream")) << error.what();
}

TEST_F(CraftedFiles, TruncatedGzipStream) {
  write_valid_pair();
  auto bytes = read_raw(images_);
  bytes.resize(bytes.size() / 2);
  write_raw(images_, bytes);
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "is a truncated gzip stream")) << error.what();
}

TEST_F(CraftedFiles, GarbageAfterTheGzipStream) {
  write_valid_pair();
  auto bytes = read_raw(labels_);
  bytes.insert(bytes.end(), {'j', 'u', 'n', 'k'});
  write_raw(labels_, bytes);
  const auto error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(contains(error.what(), "4 bytes of trailing garbage after its gzip stream"))
      << error.what();
}

TEST_F(CraftedFiles, WrongMagic) {
  write_valid_pair();
  write_gz(images_, images_idx(0x801, 3, 28, 28, 3 * 784));
  auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(
      contains(error.what(), "has IDX magic 0x00000801 where an images file has 0x00000803"))
      << error.what();

  write_valid_pair();
  write_gz(labels_, labels_idx(0x803, 3, {3, 0, 9}));
  error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(contains(error.what(), "has IDX magic 0x00000803 where a labels file has 0x00000801"))
      << error.what();
}

TEST_F(CraftedFiles, ShorterThanTheHeader) {
  write_valid_pair();
  write_gz(labels_, {0, 0, 8, 1, 0});
  const auto error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(contains(error.what(), "holds 5 bytes, fewer than the 8-byte IDX header"))
      << error.what();
}

TEST_F(CraftedFiles, WrongImageSize) {
  write_valid_pair();
  write_gz(images_, images_idx(0x803, 3, 28, 27, 3 * 28 * 27));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "holds images of 28×27; expected 28×28")) << error.what();
}

TEST_F(CraftedFiles, CountMismatch) {
  write_valid_pair();
  write_gz(images_, images_idx(0x803, 4, 28, 28, 4 * 784));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(), "holds 4 images but " + labels_.string() + " holds 3 labels"))
      << error.what();
}

TEST_F(CraftedFiles, TruncatedData) {
  write_valid_pair();
  write_gz(images_, images_idx(0x803, 3, 28, 28, 2 * 784));
  auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(),
                       "is truncated: the header promises 3 images of 28×28 (2368 bytes) but the "
                       "file holds 1584"))
      << error.what();

  write_gz(labels_, labels_idx(0x801, 3, {3, 0}));
  error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(
      contains(error.what(), "the header promises 3 labels (11 bytes) but the file holds 10"))
      << error.what();
}

// A count no file of this size can hold is reported as truncation, without allocating for it.
TEST_F(CraftedFiles, ImplausibleCount) {
  write_valid_pair();
  write_gz(labels_, labels_idx(0x801, 0xffffffff, {3, 0, 9}));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(contains(error.what(),
                       "promises 4294967295 labels (4294967303 bytes) but the file "
                       "holds 11"))
      << error.what();
}

TEST_F(CraftedFiles, TrailingData) {
  write_valid_pair();
  write_gz(images_, images_idx(0x803, 3, 28, 28, 3 * 784 + 5));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), images_.string());
  EXPECT_TRUE(contains(error.what(),
                       "has 5 bytes of trailing data: the header promises 3 images "
                       "of 28×28 (2368 bytes) but the file holds 2373"))
      << error.what();
}

TEST_F(CraftedFiles, LabelOutOfRange) {
  write_valid_pair();
  write_gz(labels_, labels_idx(0x801, 3, {3, 10, 9}));
  const auto error = error_reading();
  EXPECT_EQ(error.path(), labels_.string());
  EXPECT_TRUE(contains(error.what(), "holds label 10 at index 1; expected 0..9")) << error.what();
}

}  // namespace
}  // namespace replicator::data
