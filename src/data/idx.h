// Gzipped IDX files (the format of MNIST and Fashion-MNIST) parsed from their bytes in
// memory: what read_fashion_mnist does with each file once it has read it, and what the
// fuzzer (tests/fuzz) feeds. No LibTorch here: a payload goes where `allocate` says.
//
// Both functions throw replicator::DataError whose path() is `name` when the bytes are not
// gzip, a corrupt or truncated gzip stream, or hold trailing garbage; when the IDX magic or
// image size is wrong; when the payload is shorter or longer than the header promises; and,
// for labels, when one is outside 0..9. They never allocate more than the gzip stream can
// inflate to (deflate expands at most 1032:1). Never block; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace replicator::data::detail {

// Memory for a payload of `bytes` bytes: called once, after the header's promise has been
// checked against what the stream can hold; the payload is inflated there.
using Allocate = std::function<std::uint8_t*(std::int64_t bytes)>;

// Side of the images of an IDX images file, in pixels.
inline constexpr std::int64_t kIdxImageSide = 28;

// An IDX labels file: magic 0x00000801, count, then `count` bytes in 0..9. Returns the count;
// the labels are in allocate(count)'s memory.
std::int64_t parse_idx_labels(std::span<const std::uint8_t> gz, const std::string& name,
                              const Allocate& allocate);

// An IDX images file: magic 0x00000803, count, 28, 28, then count·28·28 bytes; `count` must be
// `expected_count`, the number of labels in `labels_name`. Returns the count; the pixels are
// in allocate(count·28·28)'s memory.
std::int64_t parse_idx_images(std::span<const std::uint8_t> gz, const std::string& name,
                              std::int64_t expected_count, const std::string& labels_name,
                              const Allocate& allocate);

}  // namespace replicator::data::detail
