// Gzipped IDX files inflated with zlib's inflate.
//
// inflate rather than gzread: gzread passes a file that is not gzip through unchanged and
// ignores garbage after the last gzip member, and both must be errors here. Each payload is
// inflated straight into the memory `allocate` gives, after the header's promise has been
// checked against what the compressed size can possibly hold, so a corrupt count cannot
// trigger a huge allocation.
#include "src/data/idx.h"

// next_in as a pointer to const: the input is the caller's, read only.
#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "replicator/errors.h"

namespace replicator::data::detail {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr std::int64_t kImagesHeaderBytes = 16;     // magic, count, rows, cols
constexpr std::int64_t kLabelsHeaderBytes = 8;      // magic, count
constexpr std::int64_t kImageBytes = kIdxImageSide * kIdxImageSide;
constexpr int kNumClasses = 10;
// Deflate expands at most 1032:1, so a gzip stream holds at most this many bytes per
// compressed byte.
constexpr std::int64_t kMaxInflateRatio = 1032;
// zlib counts input in uInt: a larger buffer is fed in pieces of this size.
constexpr std::size_t kMaxInput = std::size_t{1} << 30;

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
class GzipStream {
 public:
  GzipStream(std::span<const std::uint8_t> bytes, std::string name);
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Inflates up to `n` bytes into `out`; returns fewer only at the end of the data.
  std::int64_t read(void* out, std::int64_t n);
  // Inflates the rest of the data, discarding it; returns how many bytes that was.
  std::int64_t skip_rest();

  // Whether the stream can possibly inflate to `bytes` bytes.
  bool can_hold(std::int64_t bytes) const {
    return bytes <= kMaxInflateRatio * static_cast<std::int64_t>(bytes_.size());
  }
  [[noreturn]] void fail(const std::string& what) const { throw DataError(name_ + what, name_); }

 private:
  bool refill();  // false at the end of the bytes
  std::int64_t compressed_offset() const {
    return static_cast<std::int64_t>(consumed_) - zs_.avail_in;
  }

  std::span<const std::uint8_t> bytes_;
  std::string name_;
  z_stream zs_{};
  bool inflate_ready_ = false;
  bool member_ended_ = false;
  std::size_t consumed_ = 0;  // bytes handed to zlib so far
};

GzipStream::GzipStream(std::span<const std::uint8_t> bytes, std::string name)
    : bytes_(bytes), name_(std::move(name)) {
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

GzipStream::~GzipStream() {
  if (inflate_ready_) inflateEnd(&zs_);
}

bool GzipStream::refill() {
  const std::size_t got = std::min(bytes_.size() - consumed_, kMaxInput);
  zs_.next_in = bytes_.data() + consumed_;
  zs_.avail_in = static_cast<uInt>(got);
  consumed_ += got;
  return got > 0;
}

std::int64_t GzipStream::read(void* out, std::int64_t n) {
  auto* dst = static_cast<unsigned char*>(out);
  std::int64_t done = 0;
  while (done < n) {
    if (member_ended_) {
      if (zs_.avail_in == 0 && !refill()) break;  // the clean end of the file
      if (zs_.next_in[0] != 0x1f) {
        fail(" has " + std::to_string(bytes_.size() - compressed_offset()) +
             " bytes of trailing garbage after its gzip stream");
      }
      // gzip allows concatenated members; inflate checks the next member's header.
      inflateReset(&zs_);
      member_ended_ = false;
    }
    if (zs_.avail_in == 0 && !refill()) {
      fail(" is a truncated gzip stream: the file ends after " + std::to_string(bytes_.size()) +
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

std::int64_t GzipStream::skip_rest() {
  std::vector<unsigned char> scratch(std::size_t{1} << 16);
  std::int64_t total = 0;
  for (;;) {
    const auto got = read(scratch.data(), static_cast<std::int64_t>(scratch.size()));
    total += got;
    if (got < static_cast<std::int64_t>(scratch.size())) return total;
  }
}

// Reads the IDX header of `file` into `header`; throws unless it is complete and has `magic`.
void read_header(GzipStream& file, unsigned char* header, std::int64_t header_bytes,
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

// Inflates exactly `payload` bytes into allocate(payload) when the stream can hold them (else
// counts them without allocating), or throws naming `promise` (what the header promised) and
// the size the file really holds. Returns the payload's memory.
std::uint8_t* read_payload(GzipStream& file, const Allocate& allocate, std::int64_t header_bytes,
                           std::int64_t payload, const std::string& promise) {
  const std::int64_t expected = header_bytes + payload;
  const bool fits = file.can_hold(payload);
  std::uint8_t* out = fits ? allocate(payload) : nullptr;
  const std::int64_t got = fits ? file.read(out, payload) : file.skip_rest();
  if (!fits || got < payload) {
    file.fail(" is truncated: the header promises " + promise + " (" + std::to_string(expected) +
              " bytes) but the file holds " + std::to_string(header_bytes + got));
  }
  const auto extra = file.skip_rest();
  if (extra > 0) {
    file.fail(" has " + std::to_string(extra) + " bytes of trailing data: the header promises " +
              promise + " (" + std::to_string(expected) + " bytes) but the file holds " +
              std::to_string(expected + extra));
  }
  return out;
}

}  // namespace

std::int64_t parse_idx_labels(std::span<const std::uint8_t> gz, const std::string& name,
                              const Allocate& allocate) {
  GzipStream file(gz, name);
  std::array<unsigned char, kLabelsHeaderBytes> header{};
  read_header(file, header.data(), kLabelsHeaderBytes, kLabelsMagic, "a labels");
  const std::int64_t count = big_endian32(header.data() + 4);
  const std::uint8_t* label =
      read_payload(file, allocate, kLabelsHeaderBytes, count, std::to_string(count) + " labels");
  for (std::int64_t i = 0; i < count; ++i) {
    if (label[i] >= kNumClasses) {
      file.fail(" holds label " + std::to_string(label[i]) + " at index " + std::to_string(i) +
                "; expected 0..9");
    }
  }
  return count;
}

std::int64_t parse_idx_images(std::span<const std::uint8_t> gz, const std::string& name,
                              std::int64_t expected_count, const std::string& labels_name,
                              const Allocate& allocate) {
  GzipStream file(gz, name);
  std::array<unsigned char, kImagesHeaderBytes> header{};
  read_header(file, header.data(), kImagesHeaderBytes, kImagesMagic, "an images");
  const std::int64_t count = big_endian32(header.data() + 4);
  const std::int64_t rows = big_endian32(header.data() + 8);
  const std::int64_t cols = big_endian32(header.data() + 12);
  if (rows != kIdxImageSide || cols != kIdxImageSide) {
    file.fail(" holds images of " + std::to_string(rows) + "×" + std::to_string(cols) +
              "; expected 28×28");
  }
  if (count != expected_count) {
    file.fail(" holds " + std::to_string(count) + " images but " + labels_name + " holds " +
              std::to_string(expected_count) + " labels; expected one label per image");
  }
  read_payload(file, allocate, kImagesHeaderBytes, count * kImageBytes,
               std::to_string(count) + " images of 28×28");
  return count;
}

}  // namespace replicator::data::detail
