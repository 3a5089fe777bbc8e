// The Fashion-MNIST reader's parser (src/data/idx.h) on the bytes of one gzipped IDX file.
//
// Input: byte 0 is the mode: bit 0 picks an images file (else labels); bit 1 says the rest
// is an IDX file that the target gzips first (so the fuzzer reaches the IDX header and
// payload past gzip's checksums), else the rest is the gzip file itself. Bytes 1-4 (big
// endian) are the label count an images file must match.
// Promises: DataError naming the file, or a payload of exactly what the header promised
// (the count, 28·28 bytes an image, every label in 0..9), allocated once and never more
// than the stream can inflate to.
#include <zlib.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "src/data/idx.h"
#include "tests/fuzz/fuzz.h"

namespace rd = replicator::data::detail;
using replicator::fuzz::require;

namespace {

constexpr std::uint8_t kImages = 1;
constexpr std::uint8_t kGzipHere = 2;
constexpr std::size_t kPrefixBytes = 5;
// What idx.cc allows: deflate expands at most 1032:1.
constexpr std::int64_t kMaxInflateRatio = 1032;

// `bytes` as one gzip member.
std::vector<std::uint8_t> gzip(std::span<const std::uint8_t> bytes) {
  z_stream zs{};
  require(deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
          "zlib starts deflating");
  std::vector<std::uint8_t> out(deflateBound(&zs, bytes.size()));
  zs.next_in = const_cast<std::uint8_t*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  require(deflate(&zs, Z_FINISH) == Z_STREAM_END, "zlib deflates the input at once");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kPrefixBytes) return 0;
  const std::uint8_t mode = data[0];
  const std::int64_t expected_count = (std::int64_t{data[1]} << 24) |
                                      (std::int64_t{data[2]} << 16) | (std::int64_t{data[3]} << 8) |
                                      std::int64_t{data[4]};
  std::span<const std::uint8_t> rest(data + kPrefixBytes, size - kPrefixBytes);
  std::vector<std::uint8_t> zipped;
  if ((mode & kGzipHere) != 0) {
    zipped = gzip(rest);
    rest = zipped;
  }
  std::vector<std::uint8_t> payload;
  int allocations = 0;
  const rd::Allocate allocate = [&](std::int64_t bytes) {
    ++allocations;
    require(bytes >= 0 && bytes <= kMaxInflateRatio * static_cast<std::int64_t>(rest.size()),
            "no allocation beyond what the stream can inflate to");
    payload.resize(static_cast<std::size_t>(bytes));
    return payload.data();
  };
  const std::string name = (mode & kImages) != 0 ? "images.gz" : "labels.gz";
  try {
    if ((mode & kImages) != 0) {
      const auto count = rd::parse_idx_images(rest, name, expected_count, "labels.gz", allocate);
      require(count == expected_count, "as many images as labels");
      require(static_cast<std::int64_t>(payload.size()) ==
                  count * rd::kIdxImageSide * rd::kIdxImageSide,
              "28·28 bytes an image");
    } else {
      const auto count = rd::parse_idx_labels(rest, name, allocate);
      require(static_cast<std::int64_t>(payload.size()) == count, "one byte a label");
      for (const std::uint8_t label : payload) require(label <= 9, "every label in 0..9");
    }
    require(allocations == 1, "one allocation for the payload");
  } catch (const replicator::DataError& e) {
    require(e.path() == name, "the error names the file");
    require(allocations <= 1, "at most one allocation");
  }
  return 0;
}
