// TensorBoard event files, written without TensorFlow or a protobuf library: scalars and
// PNG images that `tensorboard --logdir DIR` shows. No LibTorch here.
//
// A file is a sequence of TFRecords (the length as a little-endian uint64, the masked
// CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data), each holding one
// Event protocol buffer encoded by hand: first {wall_time, file_version "brain.Event:2"},
// then one {wall_time, step, summary {value {tag, simple_value | image}}} per scalar or image,
// and {wall_time, step, session_log {status START}} per restart.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace replicator::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, continuing from `crc` (the
// CRC of the bytes before; 0 to start). crc32c("123456789") == 0xE3069283. Never throws.
std::uint32_t crc32c(std::span<const std::uint8_t> data, std::uint32_t crc = 0);

// The CRC that TFRecord stores: ((c >> 15) | (c << 17)) + 0xa282ead8 for c = crc32c(data).
std::uint32_t masked_crc32c(std::span<const std::uint8_t> data);

// Appends `data` to `out` as one TFRecord (16 bytes of framing around it). Never throws but
// std::bad_alloc.
void append_tfrecord(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> data);

// One event file in a TensorBoard log folder. Each call writes one event and flushes it, so
// a run that crashes keeps what it wrote. Every run (a resumed one too) starts a new file;
// TensorBoard reads a folder's files in name order, which is the order they were made in.
// Not thread-safe: one thread writes.
class TensorBoardWriter {
 public:
  // Creates `dir` if missing and the file events.out.tfevents.<unix seconds>.<hostname> in it
  // (with a ".<n>" suffix when that name is taken), and writes the file_version event. BLOCKS
  // on file I/O. Throws DataError when the folder or the file cannot be written.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // The scalar `value` (stored as a float) of `tag` at `step`. BLOCKS on file I/O. Throws
  // DataError when the event cannot be written.
  void scalar(const std::string& tag, std::int64_t step, double value);
  // The PNG file `png` of height x width pixels with `channels` 1 (grey), 3 (RGB) or
  // 4 (RGBA) as the image `tag` at `step` (replicator/train/png.h encodes one). BLOCKS on file
  // I/O. Throws InvalidArgument on a non-positive size or another channel count, DataError
  // when the event cannot be written.
  void image(const std::string& tag, std::int64_t step, std::span<const std::uint8_t> png,
             int height, int width, int channels);

  // Marks a restart at `step`: TensorBoard drops what the earlier files of the folder hold
  // for `step` and later (a resumed run's newer values replace those an earlier run logged
  // past its last checkpoint). BLOCKS on file I/O. Throws DataError when the event cannot be
  // written.
  void restart(std::int64_t step);

  // The event file.
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(std::span<const std::uint8_t> event);

  std::filesystem::path path_;
  std::ofstream file_;
};

}  // namespace replicator::train
