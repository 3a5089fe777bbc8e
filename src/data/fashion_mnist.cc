// Reading the gzipped IDX files of Fashion-MNIST with zlib's inflate.
//
// inflate rather than gzread: gzread passes a file that is not gzip through unchanged and
// ignores garbage after the last gzip member, and both must be errors here. Each payload is
// inflated straight into one tensor allocated from the IDX header, after the header's
// promise has been checked against what the compressed size can possibly hold, so a corrupt
// count cannot trigger a huge allocation.
#include "replicator/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "replicator/errors.h"

namespace replicator::data {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr std::int64_t kImagesHeaderBytes = 16;     // magic, count, rows, cols
constexpr std::int64_t kLabelsHeaderBytes = 8;      // magic, count
constexpr std::int64_t kImageBytes = kImageSide * kImageSide;
constexpr int kNumClasses = 10;
// Deflate expands at most 1032:1, so a gzip file holds at most this many bytes per
// compressed byte.
constexpr std::int64_t kMaxInflateRatio = 1032;

std::string hex32(std::uint32_t value) {
  std::array<char, 11> text{};
  std::snprintf(text.data(), text.size(), "0x%08x", value);
  return text.data();
}

std::uint32_t big_endian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// The decompressed bytes of one gzip file: one or more gzip members and nothing after them.
class GzipFile {
 public:
  explicit GzipFile(const fs::path& path);
  ~GzipFile();
  GzipFile(const GzipFile&) = delete;
  GzipFile& operator=(const GzipFile&) = delete;

  // Inflates up to `n` bytes into `out`; returns fewer only at the end of the data.
  std::int64_t read(void* out, std::int64_t n);
  // Inflates the rest of the data, discarding it; returns how many bytes that was.
  std::int64_t skip_rest();

  // Whether the file can possibly inflate to `bytes` bytes.
  bool can_hold(std::int64_t bytes) const { return bytes <= kMaxInflateRatio * compressed_size_; }
  [[noreturn]] void fail(const std::string& what) const { throw DataError(name_ + what, name_); }

 private:
  bool refill();  // false at the end of the file
  std::int64_t compressed_offset() const { return consumed_ - zs_.avail_in; }

  struct CloseFile {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };

  std::string name_;
  std::unique_ptr<std::FILE, CloseFile> file_;
  z_stream zs_{};
  bool inflate_ready_ = false;
  bool member_ended_ = false;
  std::int64_t compressed_size_ = 0;
  std::int64_t consumed_ = 0;  // bytes read from the file so far
  std::vector<unsigned char> in_;
};

GzipFile::GzipFile(const fs::path& path) : name_(path.string()), in_(std::size_t{1} << 20) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (error) {
    throw DataError("cannot open " + name_ + ": " + error.message() +
                        " (the Debian package dataset-fashion-mnist installs the files in " +
                        default_fashion_mnist_dir().string() + ")",
                    name_);
  }
  compressed_size_ = static_cast<std::int64_t>(size);
  file_.reset(std::fopen(name_.c_str(), "rb"));
  if (file_ == nullptr) {
    throw DataError("cannot open " + name_ + ": " + std::generic_category().message(errno), name_);
  }
  if (!refill()) fail(" is empty; expected a gzip file");
  if (zs_.avail_in < 2 || zs_.next_in[0] != 0x1f || zs_.next_in[1] != 0x8b) {
    std::array<char, 8> start{};
    std::snprintf(start.data(), start.size(), "%02x %02x", zs_.next_in[0],
                  zs_.avail_in < 2 ? 0u : zs_.next_in[1]);
    fail(" is not a gzip file: it starts with bytes " + std::string(start.data()) +
         " instead of the gzip magic 1f 8b");
  }
  // 16 + MAX_WBITS: gzip framing only, checked CRC and length.
  if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) fail(": zlib could not start inflating");
  inflate_ready_ = true;
}

GzipFile::~GzipFile() {
  if (inflate_ready_) inflateEnd(&zs_);
}

bool GzipFile::refill() {
  const std::size_t got = std::fread(in_.data(), 1, in_.size(), file_.get());
  if (got == 0 && std::ferror(file_.get())) {
    fail(" cannot be read: " + std::generic_category().message(errno));
  }
  consumed_ += static_cast<std::int64_t>(got);
  zs_.next_in = in_.data();
  zs_.avail_in = static_cast<uInt>(got);
  return got > 0;
}

std::int64_t GzipFile::read(void* out, std::int64_t n) {
  auto* dst = static_cast<unsigned char*>(out);
  std::int64_t done = 0;
  while (done < n) {
    if (member_ended_) {
      if (zs_.avail_in == 0 && !refill()) break;  // the clean end of the file
      if (zs_.next_in[0] != 0x1f) {
        fail(" has " + std::to_string(compressed_size_ - compressed_offset()) +
             " bytes of trailing garbage after its gzip stream");
      }
      // gzip allows concatenated members; inflate checks the next member's header.
      inflateReset(&zs_);
      member_ended_ = false;
    }
    if (zs_.avail_in == 0 && !refill()) {
      fail(" is a truncated gzip stream: the file ends after " + std::to_string(compressed_size_) +
           " bytes, inside compressed data");
    }
    const auto chunk = std::min<std::int64_t>(n - done, std::numeric_limits<uInt>::max());
    zs_.next_out = dst + done;
    zs_.avail_out = static_cast<uInt>(chunk);
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    done += chunk - zs_.avail_out;
    if (rc == Z_STREAM_END) {
      member_ended_ = true;
    } else if (rc != Z_OK) {
      fail(" is a corrupt gzip stream: zlib reports \"" +
           std::string(zs_.msg != nullptr ? zs_.msg : zError(rc)) + "\" near compressed byte " +
           std::to_string(compressed_offset()));
    }
  }
  return done;
}

std::int64_t GzipFile::skip_rest() {
  std::vector<unsigned char> scratch(std::size_t{1} << 16);
  std::int64_t total = 0;
  for (;;) {
    const auto got = read(scratch.data(), static_cast<std::int64_t>(scratch.size()));
    total += got;
    if (got < static_cast<std::int64_t>(scratch.size())) return total;
  }
}

// Reads the IDX header of `file` into `header`; throws unless it is complete and has `magic`.
void read_header(GzipFile& file, unsigned char* header, std::int64_t header_bytes,
                 std::uint32_t magic, const char* kind) {
  const auto got = file.read(header, header_bytes);
  if (got < header_bytes) {
    file.fail(" is truncated: it holds " + std::to_string(got) + " bytes, fewer than the " +
              std::to_string(header_bytes) + "-byte IDX header of " + kind + " file");
  }
  const auto found = big_endian32(header);
  if (found != magic) {
    file.fail(" has IDX magic " + hex32(found) + " where " + kind + " file has " + hex32(magic));
  }
}

// Inflates exactly `payload` bytes into `out` (which holds them if file.can_hold(payload),
// else nothing), or throws naming `promise` (what the header promised) and the size the file
// really holds.
void read_payload(GzipFile& file, void* out, std::int64_t header_bytes, std::int64_t payload,
                  const std::string& promise) {
  const std::int64_t expected = header_bytes + payload;
  std::int64_t got = 0;
  if (file.can_hold(payload)) {
    got = file.read(out, payload);
  } else {
    got = file.skip_rest();  // cannot hold the promise: count without allocating
  }
  if (got < payload) {
    file.fail(" is truncated: the header promises " + promise + " (" + std::to_string(expected) +
              " bytes) but the file holds " + std::to_string(header_bytes + got));
  }
  const auto extra = file.skip_rest();
  if (extra > 0) {
    file.fail(" has " + std::to_string(extra) + " bytes of trailing data: the header promises " +
              promise + " (" + std::to_string(expected) + " bytes) but the file holds " +
              std::to_string(expected + extra));
  }
}

// An IDX labels file: magic 0x00000801, count, then `count` bytes in 0..9. Returns int64.
::torch::Tensor read_labels(const fs::path& path) {
  GzipFile file(path);
  std::array<unsigned char, kLabelsHeaderBytes> header{};
  read_header(file, header.data(), kLabelsHeaderBytes, kLabelsMagic, "a labels");
  const std::int64_t count = big_endian32(header.data() + 4);
  auto bytes = ::torch::empty({file.can_hold(count) ? count : 0}, ::torch::kUInt8);
  read_payload(file, bytes.data_ptr(), kLabelsHeaderBytes, count,
               std::to_string(count) + " labels");
  const auto* label = bytes.data_ptr<std::uint8_t>();
  for (std::int64_t i = 0; i < count; ++i) {
    if (label[i] >= kNumClasses) {
      file.fail(" holds label " + std::to_string(label[i]) + " at index " + std::to_string(i) +
                "; expected 0..9");
    }
  }
  return bytes.to(::torch::kInt64);
}

// An IDX images file: magic 0x00000803, count, rows, cols, then count·rows·cols bytes.
// `labels` names the labels file of the same split, which holds `expected_count` labels.
::torch::Tensor read_images(const fs::path& path, std::int64_t expected_count,
                            const fs::path& labels) {
  GzipFile file(path);
  std::array<unsigned char, kImagesHeaderBytes> header{};
  read_header(file, header.data(), kImagesHeaderBytes, kImagesMagic, "an images");
  const std::int64_t count = big_endian32(header.data() + 4);
  const std::int64_t rows = big_endian32(header.data() + 8);
  const std::int64_t cols = big_endian32(header.data() + 12);
  if (rows != kImageSide || cols != kImageSide) {
    file.fail(" holds images of " + std::to_string(rows) + "×" + std::to_string(cols) +
              "; expected 28×28");
  }
  if (count != expected_count) {
    file.fail(" holds " + std::to_string(count) + " images but " + labels.string() + " holds " +
              std::to_string(expected_count) + " labels; expected one label per image");
  }
  const std::int64_t payload = count * kImageBytes;
  auto images =
      ::torch::empty({file.can_hold(payload) ? count : 0, kImageSide, kImageSide}, ::torch::kUInt8);
  read_payload(file, images.data_ptr(), kImagesHeaderBytes, payload,
               std::to_string(count) + " images of 28×28");
  return images;
}

}  // namespace

fs::path default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

Examples read_fashion_mnist(const fs::path& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto images_path = dir / (prefix + "-images-idx3-ubyte.gz");
  const auto labels_path = dir / (prefix + "-labels-idx1-ubyte.gz");
  Examples examples;
  examples.labels = read_labels(labels_path);
  examples.images = read_images(images_path, examples.labels.size(0), labels_path);
  return examples;
}

}  // namespace replicator::data
