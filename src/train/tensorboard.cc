#include "replicator/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <system_error>

#include "replicator/errors.h"

namespace replicator::train {
namespace {

using Bytes = std::vector<std::uint8_t>;

// One table of 256 entries, byte at a time: the event files here are small, and this keeps
// the code short (no slicing-by-8, no SSE4.2 instruction).
constexpr std::array<std::uint32_t, 256> kCrc32cTable = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}();

// The fields of tensorboard/compat/proto/{event,summary}.proto that are written here.
namespace field {
constexpr int kEventWallTime = 1;     // double
constexpr int kEventStep = 2;         // int64
constexpr int kEventFileVersion = 3;  // string
constexpr int kEventSummary = 5;      // Summary
constexpr int kEventSessionLog = 7;   // SessionLog
constexpr int kSessionLogStatus = 1;  // enum SessionStatus
constexpr int kSummaryValue = 1;      // repeated Summary.Value
constexpr int kValueTag = 1;          // string
constexpr int kValueSimpleValue = 2;  // float
constexpr int kValueImage = 4;        // Summary.Image
constexpr int kImageHeight = 1;       // int32
constexpr int kImageWidth = 2;        // int32
constexpr int kImageColorspace = 3;   // int32
constexpr int kImageEncoded = 4;      // bytes
}  // namespace field
constexpr std::int64_t kSessionStart = 1;  // SessionLog.START

// Protocol buffer wire types.
enum class Wire : std::uint8_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

void put_varint(Bytes& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}

void put_little_endian(Bytes& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put_key(Bytes& out, int number, Wire wire) {
  put_varint(out, static_cast<std::uint64_t>(number) << 3 | static_cast<std::uint64_t>(wire));
}

// int32 and int64 alike: a negative value is the 10-byte varint of its two's complement.
void put_int(Bytes& out, int number, std::int64_t v) {
  put_key(out, number, Wire::kVarint);
  put_varint(out, static_cast<std::uint64_t>(v));
}

void put_double(Bytes& out, int number, double v) {
  put_key(out, number, Wire::kFixed64);
  put_little_endian(out, std::bit_cast<std::uint64_t>(v), 8);
}

void put_float(Bytes& out, int number, float v) {
  put_key(out, number, Wire::kFixed32);
  put_little_endian(out, std::bit_cast<std::uint32_t>(v), 4);
}

void put_bytes(Bytes& out, int number, std::span<const std::uint8_t> data) {
  put_key(out, number, Wire::kLength);
  put_varint(out, data.size());
  out.insert(out.end(), data.begin(), data.end());
}

void put_string(Bytes& out, int number, const std::string& text) {
  put_bytes(out, number, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An Event's wall_time and step.
Bytes event_at(std::int64_t step) {
  Bytes event;
  put_double(event, field::kEventWallTime, wall_time());
  put_int(event, field::kEventStep, step);
  return event;
}

// An Event of one Summary.Value.
Bytes summary_event(std::int64_t step, const Bytes& value) {
  Bytes summary;
  put_bytes(summary, field::kSummaryValue, value);
  Bytes event = event_at(step);
  put_bytes(event, field::kEventSummary, summary);
  return event;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

std::uint32_t crc32c(std::span<const std::uint8_t> data, std::uint32_t crc) {
  crc = ~crc;
  for (const std::uint8_t byte : data) crc = kCrc32cTable[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t masked_crc32c(std::span<const std::uint8_t> data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void append_tfrecord(Bytes& out, std::span<const std::uint8_t> data) {
  const std::size_t length_at = out.size();
  put_little_endian(out, data.size(), 8);
  const std::uint32_t length_crc =
      masked_crc32c(std::span<const std::uint8_t>(out).subspan(length_at, 8));
  put_little_endian(out, length_crc, 4);
  out.insert(out.end(), data.begin(), data.end());
  put_little_endian(out, masked_crc32c(data), 4);
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw DataError("cannot create the TensorBoard folder " + dir.string() + ": " + ec.message(),
                    dir.string());
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const std::string name = "events.out.tfevents." + std::to_string(seconds) + "." + host_name();
  path_ = dir / name;
  // Two runs started within a second (a quick resume): the later file sorts after the first.
  for (int n = 1; std::filesystem::exists(path_, ec); ++n) {
    path_ = dir / (name + "." + std::to_string(n));
  }
  file_.open(path_, std::ios::binary | std::ios::trunc);
  if (!file_)
    throw DataError("cannot write the TensorBoard file " + path_.string(), path_.string());
  Bytes event;
  put_double(event, field::kEventWallTime, wall_time());
  put_string(event, field::kEventFileVersion, "brain.Event:2");
  write_event(event);
}

void TensorBoardWriter::scalar(const std::string& tag, std::int64_t step, double value) {
  Bytes v;
  put_string(v, field::kValueTag, tag);
  put_float(v, field::kValueSimpleValue, static_cast<float>(value));
  write_event(summary_event(step, v));
}

void TensorBoardWriter::image(const std::string& tag, std::int64_t step,
                              std::span<const std::uint8_t> png, int height, int width,
                              int channels) {
  if (height < 1 || width < 1 || (channels != 1 && channels != 3 && channels != 4)) {
    throw InvalidArgument("a TensorBoard image needs a positive size and 1, 3 or 4 channels, got " +
                          std::to_string(height) + " x " + std::to_string(width) + " x " +
                          std::to_string(channels));
  }
  // The colorspace is the channel count: 1 grey, 3 RGB, 4 RGBA.
  Bytes image;
  put_int(image, field::kImageHeight, height);
  put_int(image, field::kImageWidth, width);
  put_int(image, field::kImageColorspace, channels);
  put_bytes(image, field::kImageEncoded, png);
  Bytes v;
  put_string(v, field::kValueTag, tag);
  put_bytes(v, field::kValueImage, image);
  write_event(summary_event(step, v));
}

void TensorBoardWriter::restart(std::int64_t step) {
  Bytes session_log;
  put_int(session_log, field::kSessionLogStatus, kSessionStart);
  Bytes event = event_at(step);
  put_bytes(event, field::kEventSessionLog, session_log);
  write_event(event);
}

void TensorBoardWriter::write_event(std::span<const std::uint8_t> event) {
  Bytes record;
  record.reserve(event.size() + 16);
  append_tfrecord(record, event);
  file_.write(reinterpret_cast<const char*>(record.data()),
              static_cast<std::streamsize>(record.size()));
  if (!file_.flush()) {
    throw DataError("cannot write the TensorBoard file " + path_.string(), path_.string());
  }
}

}  // namespace replicator::train
