// TensorBoard event files (replicator/train/tensorboard.h): CRC-32C against published vectors, the
// TFRecord framing against TensorBoard's own masked CRCs, the events decoded here field by
// field, and what the job reporter writes there (replicator/train/reporter.h). TensorBoard's reader
// checks the same files in tensorboard_read.py.
#include "replicator/train/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/train/png.h"
#include "replicator/train/reporter.h"
#include "tests/harness/temp_dir.h"

namespace replicator::train {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;
using Bytes = std::vector<std::uint8_t>;

Bytes bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files(fs::directory_iterator(dir), fs::directory_iterator{});
  std::sort(files.begin(), files.end());
  return files;
}

std::uint64_t little_endian(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The records of a TFRecord file, each CRC checked.
std::vector<Bytes> read_records(const fs::path& path) {
  const Bytes file = read_bytes(path);
  std::vector<Bytes> records;
  std::size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size()) << "a torn length";
    if (at + 12 > file.size()) break;
    const std::uint64_t length = little_endian(&file[at], 8);
    EXPECT_EQ(little_endian(&file[at + 8], 4),
              masked_crc32c(std::span<const std::uint8_t>(file).subspan(at, 8)));
    EXPECT_LE(at + 16 + length, file.size()) << "a torn record";
    if (at + 16 + length > file.size()) break;
    const Bytes data(file.begin() + static_cast<long>(at + 12),
                     file.begin() + static_cast<long>(at + 12 + length));
    EXPECT_EQ(little_endian(&file[at + 12 + length], 4), masked_crc32c(data));
    records.push_back(data);
    at += 16 + length;
  }
  return records;
}

// One field of a protocol buffer: its number, and its varint (wire types 0, 1, 5: the bits)
// or its bytes (wire type 2).
struct Field {
  int number = 0;
  std::uint64_t value = 0;
  Bytes bytes;
};

std::uint64_t read_varint(const Bytes& data, std::size_t& at) {
  std::uint64_t v = 0;
  for (int shift = 0; at < data.size(); shift += 7) {
    const std::uint8_t byte = data[at++];
    v |= std::uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return v;
  }
  ADD_FAILURE() << "a varint past the end";
  return v;
}

std::vector<Field> decode(const Bytes& data) {
  std::vector<Field> fields;
  std::size_t at = 0;
  while (at < data.size()) {
    const std::uint64_t key = read_varint(data, at);
    Field f{.number = static_cast<int>(key >> 3)};
    switch (key & 7) {
      case 0:
        f.value = read_varint(data, at);
        break;
      case 1:
      case 5: {
        const int bytes = (key & 7) == 1 ? 8 : 4;
        if (at + static_cast<std::size_t>(bytes) > data.size()) {
          ADD_FAILURE() << "a fixed field past the end";
          return fields;
        }
        f.value = little_endian(&data[at], bytes);
        at += static_cast<std::size_t>(bytes);
        break;
      }
      case 2: {
        const std::uint64_t length = read_varint(data, at);
        if (at + length > data.size()) {
          ADD_FAILURE() << "bytes past the end";
          return fields;
        }
        f.bytes.assign(data.begin() + static_cast<long>(at),
                       data.begin() + static_cast<long>(at + length));
        at += length;
        break;
      }
      default:
        ADD_FAILURE() << "wire type " << (key & 7);
        return fields;
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

// The only field `number` of `fields`.
const Field& one(const std::vector<Field>& fields, int number) {
  static const Field kNone;
  const auto n = std::count_if(fields.begin(), fields.end(),
                               [&](const Field& f) { return f.number == number; });
  EXPECT_EQ(n, 1) << "field " << number;
  const auto it = std::find_if(fields.begin(), fields.end(),
                               [&](const Field& f) { return f.number == number; });
  return it == fields.end() ? kNone : *it;
}

// What one summary event holds.
struct Value {
  std::int64_t step = 0;
  std::string tag;
  std::vector<Field> fields;  // of the Summary.Value
};

Value summary_value(const Bytes& event) {
  const std::vector<Field> e = decode(event);
  EXPECT_GT(std::bit_cast<double>(one(e, 1).value), 1.6e9) << "wall_time";
  const std::vector<Field> summary = decode(one(e, 5).bytes);
  Value v{.step = static_cast<std::int64_t>(one(e, 2).value),
          .fields = decode(one(summary, 1).bytes)};
  const Bytes& tag = one(v.fields, 1).bytes;
  v.tag.assign(tag.begin(), tag.end());
  return v;
}

float simple_value(const Value& v) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(one(v.fields, 2).value));
}

TEST(TensorBoardCrc32c, PublishedVectors) {
  // RFC 3720 (iSCSI), B.4, and the usual check value.
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
  EXPECT_EQ(crc32c(Bytes(32, 0x00)), 0x8A9136AAu);
  EXPECT_EQ(crc32c(Bytes(32, 0xff)), 0x62A8AB43u);
  Bytes ascending(32);
  std::iota(ascending.begin(), ascending.end(), 0);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  Bytes descending(ascending.rbegin(), ascending.rend());
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
  // Continuing from the CRC of the bytes before.
  const Bytes text = bytes_of("123456789");
  const std::span<const std::uint8_t> all(text);
  EXPECT_EQ(crc32c(all.subspan(4), crc32c(all.first(4))), 0xE3069283u);
}

TEST(TensorBoardCrc32c, MaskedAsTensorBoardMasksIt) {
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c gives these.
  EXPECT_EQ(masked_crc32c({}), 0xa282ead8u);
  EXPECT_EQ(masked_crc32c(bytes_of("123456789")), 0xc78ab0e5u);
  EXPECT_EQ(masked_crc32c(bytes_of("hello")), 0x191c1fbbu);
}

TEST(TensorBoardRecord, Framing) {
  Bytes out = {0xaa};  // appended after what is there
  append_tfrecord(out, bytes_of("hello"));
  const Bytes expected = {0xaa, 5,    0,   0,   0,   0,   0,   0,    0,    0xea, 0xb2,
                          0x04, 0x3e, 'h', 'e', 'l', 'l', 'o', 0xbb, 0x1f, 0x1c, 0x19};
  EXPECT_EQ(out, expected);
  Bytes empty;
  append_tfrecord(empty, {});
  EXPECT_EQ(empty.size(), 16u);
  EXPECT_EQ(little_endian(&empty[12], 4), 0xa282ead8u);
}

TEST(TensorBoardWriter, WritesFramedEventsFlushedAsTheyGo) {
  TempDir dir;
  const fs::path logdir = dir.path() / "logs" / "run";  // made, parents too
  TensorBoardWriter writer(logdir);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string name = writer.path().filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find(std::string(".") + host), std::string::npos) << name;
  EXPECT_EQ(files_in(logdir), std::vector<fs::path>{writer.path()});

  const std::int64_t big_step = std::int64_t{1} << 40;  // a 6-byte varint
  writer.scalar("train/loss", 7, 0.1);
  writer.scalar("neg", big_step, -2.5);
  const Bytes png = encode_png(2, 3, 4, Bytes(24, 9));
  writer.image("pic", 8, png, 3, 2, 4);
  writer.restart(5);
  // Each event is on disk before the writer is gone.
  const std::vector<Bytes> records = read_records(writer.path());
  ASSERT_EQ(records.size(), 5u);

  const std::vector<Field> first = decode(records[0]);
  EXPECT_GT(std::bit_cast<double>(one(first, 1).value), 1.6e9) << "wall_time";
  EXPECT_EQ(one(first, 3).bytes, bytes_of("brain.Event:2"));

  const Value loss = summary_value(records[1]);
  EXPECT_EQ(loss.step, 7);
  EXPECT_EQ(loss.tag, "train/loss");
  EXPECT_EQ(simple_value(loss), 0.1f);
  const Value neg = summary_value(records[2]);
  EXPECT_EQ(neg.step, big_step);
  EXPECT_EQ(simple_value(neg), -2.5f);

  const Value pic = summary_value(records[3]);
  EXPECT_EQ(pic.step, 8);
  EXPECT_EQ(pic.tag, "pic");
  const std::vector<Field> image = decode(one(pic.fields, 4).bytes);
  EXPECT_EQ(one(image, 1).value, 3u);  // height
  EXPECT_EQ(one(image, 2).value, 2u);  // width
  EXPECT_EQ(one(image, 3).value, 4u);  // colorspace RGBA
  EXPECT_EQ(one(image, 4).bytes, png);

  const std::vector<Field> restart = decode(records[4]);
  EXPECT_EQ(one(restart, 2).value, 5u);
  EXPECT_EQ(one(decode(one(restart, 7).bytes), 1).value, 1u);  // SessionLog.START
}

TEST(TensorBoardWriter, EachWriterStartsAFileThatSortsAfterTheLast) {
  TempDir dir;
  std::vector<fs::path> made(3);
  for (fs::path& path : made) path = TensorBoardWriter(dir.path()).path();
  EXPECT_EQ(files_in(dir.path()), made);
  for (const fs::path& path : made) EXPECT_EQ(read_records(path).size(), 1u);
}

TEST(TensorBoardWriter, BadImagesAndUnwritableFoldersThrow) {
  TempDir dir;
  TensorBoardWriter writer(dir.path());
  const Bytes png = encode_png(1, 1, 1, Bytes(1, 0));
  EXPECT_THROW(writer.image("x", 0, png, 1, 1, 2), InvalidArgument);
  EXPECT_THROW(writer.image("x", 0, png, 0, 1, 1), InvalidArgument);
  std::ofstream(dir.path() / "file") << "not a folder";
  try {
    TensorBoardWriter under_a_file(dir.path() / "file" / "logs");
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(e.path(), (dir.path() / "file" / "logs").string());
  }
}

// Where a reporter's stderr lines go.
std::FILE* sink() {
  static const std::unique_ptr<std::FILE, int (*)(std::FILE*)> kFile(::tmpfile(), &std::fclose);
  return kFile.get();
}

TEST(JobReporterTensorBoard, NumbersOfRecordsWithAStepBecomeScalars) {
  TempDir dir;
  {
    JobReporter reporter({.tensorboard = dir.path() / "tb", .err = sink()});
    reporter.metric({{"type", "train"},
                     {"step", 3},
                     {"loss", 0.5},
                     {"epoch", 1},
                     {"count", 7u},
                     {"ok", true},
                     {"name", "x"},
                     {"list", {1, 2}}});
    reporter.metric({{"step", 4}, {"value", -1.5}});         // no type: the key alone
    reporter.metric({{"type", "eval"}, {"accuracy", 0.9}});  // no step: not in TensorBoard
    reporter.metric({{"type", "eval"}, {"step", 2.5}, {"accuracy", 0.9}});  // not an integer
    reporter.image("grid", 4, Image::filled(3, 2, 3, 128));
    reporter.finish();
    reporter.metric({{"step", 5}, {"late", 1}});  // after finish(): nothing
    EXPECT_TRUE(reporter.metrics_path().empty()) << "no metrics.jsonl without --out";
  }
  const std::vector<fs::path> files = files_in(dir.path() / "tb");
  ASSERT_EQ(files.size(), 1u);
  const std::vector<Bytes> records = read_records(files[0]);
  ASSERT_EQ(records.size(), 6u);
  std::vector<std::pair<std::string, std::int64_t>> tags;
  for (std::size_t i = 1; i < 5; ++i) {
    const Value v = summary_value(records[i]);
    tags.emplace_back(v.tag, v.step);
  }
  EXPECT_EQ(tags, (std::vector<std::pair<std::string, std::int64_t>>{
                      {"train/loss", 3}, {"train/epoch", 3}, {"train/count", 3}, {"value", 4}}));
  EXPECT_EQ(simple_value(summary_value(records[1])), 0.5f);
  EXPECT_EQ(simple_value(summary_value(records[4])), -1.5f);
  const Value grid = summary_value(records[5]);
  EXPECT_EQ(grid.tag, "grid");
  EXPECT_EQ(grid.step, 4);
  EXPECT_EQ(one(decode(one(grid.fields, 4).bytes), 4).bytes, encode_png(3, 2, 3, Bytes(18, 128)));
}

TEST(JobReporterTensorBoard, AResumedRunMarksARestartAfterItsStep) {
  TempDir dir;
  {
    JobReporter reporter(
        {.out = dir.path(), .tensorboard = dir.path(), .resume_step = 40, .err = sink()});
    reporter.metric({{"type", "train"}, {"step", 41}, {"loss", 1.0}});
  }
  std::vector<fs::path> events;
  for (const fs::path& path : files_in(dir.path())) {
    if (path.filename() != "metrics.jsonl") events.push_back(path);
  }
  ASSERT_EQ(events.size(), 1u);
  const std::vector<Bytes> records = read_records(events[0]);
  ASSERT_EQ(records.size(), 3u);
  const std::vector<Field> restart = decode(records[1]);
  EXPECT_EQ(one(restart, 2).value, 41u);
  EXPECT_EQ(one(decode(one(restart, 7).bytes), 1).value, 1u);
  EXPECT_EQ(summary_value(records[2]).tag, "train/loss");
}

TEST(JobReporterTensorBoard, APictureIsAFileInOutAndAnImageInTensorBoard) {
  TempDir dir;
  const Image picture = Image::filled(4, 3, 1, 77);
  {
    JobReporter reporter(
        {.out = dir.path() / "out", .tensorboard = dir.path() / "tb", .err = sink()});
    reporter.picture("curves", 9, picture);
  }
  const Bytes png = encode_png(4, 3, 1, Bytes(12, 77));
  EXPECT_EQ(read_bytes(dir.path() / "out" / "curves.png"), png);
  const std::vector<fs::path> files = files_in(dir.path() / "tb");
  ASSERT_EQ(files.size(), 1u);
  const std::vector<Bytes> records = read_records(files[0]);
  ASSERT_EQ(records.size(), 2u);
  const Value image = summary_value(records[1]);
  EXPECT_EQ(image.tag, "curves");
  EXPECT_EQ(image.step, 9);
  EXPECT_EQ(one(decode(one(image.fields, 4).bytes), 4).bytes, png);

  JobReporter no_folders({.err = sink()});
  no_folders.picture("curves", 1, picture);  // nothing to write, nothing thrown
}

// image() goes to TensorBoard only: with an out folder and none for TensorBoard, nothing
// of it lands anywhere; given a TensorBoard folder, the same call writes its image event.
TEST(JobReporterTensorBoard, ImagesWithoutATensorBoardFolderAreDropped) {
  TempDir dir;
  const fs::path out = dir.path() / "out";
  const Image grid = Image::filled(2, 2, 1, 0);
  {
    JobReporter reporter({.out = out, .err = sink()});
    reporter.image("grid", 1, grid);
  }
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    EXPECT_NE(entry.path().extension(), ".png") << entry.path();
    EXPECT_EQ(entry.path().filename().string().find("tfevents"), std::string::npos) << entry.path();
  }
  {
    JobReporter reporter({.out = out, .tensorboard = dir.path() / "tb", .err = sink()});
    reporter.image("grid", 1, grid);
  }
  const std::vector<fs::path> files = files_in(dir.path() / "tb");
  ASSERT_EQ(files.size(), 1u);
  const std::vector<Bytes> records = read_records(files[0]);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(summary_value(records[1]).tag, "grid");
}

}  // namespace
}  // namespace replicator::train
