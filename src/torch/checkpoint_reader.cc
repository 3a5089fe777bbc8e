// A checkpoint is LibTorch's zip archive (torch::serialize::OutputArchive). LibTorch's reader
// is not ours to fix, so what can be told from the outside is checked before the bytes reach
// it (check_zip): the zip records, where every entry lies, and every entry's CRC-32 (over its
// content inflated, for the entries LibTorch deflates).
#include "src/torch/checkpoint_reader.h"

#include <caffe2/serialize/versions.h>
#include <torch/torch.h>
// next_in as a pointer to const: the checkpoint's bytes are only read.
#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "replicator/errors.h"
#include "src/base/text.h"

namespace replicator::torch::detail {
namespace {

constexpr std::uint32_t kLocalHeader = 0x04034b50;
constexpr std::uint32_t kCentralHeader = 0x02014b50;
constexpr std::uint32_t kEndOfDirectory = 0x06054b50;
constexpr std::uint32_t kZip64Locator = 0x07064b50;
constexpr std::uint32_t kZip64End = 0x06064b50;
constexpr std::size_t kLocalHeaderBytes = 30;
constexpr std::size_t kCentralHeaderBytes = 46;
constexpr std::size_t kEndBytes = 22;  // without a comment, as LibTorch writes it
constexpr std::size_t kZip64LocatorBytes = 20;
constexpr std::size_t kZip64EndBytes = 56;
constexpr std::uint64_t kZip64Marker = 0xffffffff;
constexpr std::uint64_t kStored = 0;
constexpr std::uint64_t kDeflated = 8;
// General purpose flags: encrypted, strong encryption, masked local header.
constexpr std::uint64_t kEncrypted = (1u << 0) | (1u << 6) | (1u << 13);
// External attributes: the MS-DOS folder bit.
constexpr std::uint64_t kDosFolder = 0x10;
// zlib counts in uInt: larger spans go in pieces of this size.
constexpr std::uint64_t kMaxChunk = std::uint64_t{1} << 30;
// A version record longer than this is not one LibTorch writes ("3\n").
constexpr std::uint64_t kMaxVersionBytes = 32;

// The first bytes of `bytes`, as hex: "50 4b 03 04".
std::string hex_start(std::string_view bytes) {
  std::string text;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 4); ++i) {
    std::array<char, 4> hex{};
    std::snprintf(hex.data(), hex.size(), "%02x", static_cast<unsigned char>(bytes[i]));
    if (i > 0) text += ' ';
    text += hex.data();
  }
  return text;
}

// Reads the zip archive's little-endian fields, every read bounds-checked; `fail` throws the
// DataError of the checkpoint.
class ZipReader {
 public:
  ZipReader(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError("checkpoint " + name_ + " " + what, name_);
  }
  // The `width`-byte field at `at`; fails naming `what` when it lies past the end.
  std::uint64_t field(std::uint64_t at, int width, const char* what) const {
    if (at > bytes_.size() || bytes_.size() - at < static_cast<std::uint64_t>(width)) {
      fail(std::string("is torn: its ") + what + " lies past its end (" +
           std::to_string(bytes_.size()) + " bytes)");
    }
    std::uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) {
      value = (value << 8) | static_cast<unsigned char>(bytes_[at + static_cast<unsigned>(i)]);
    }
    return value;
  }
  std::string_view bytes() const { return bytes_; }

 private:
  std::string_view bytes_;
  const std::string& name_;
};

// Where the central directory lies, and how many entries it holds.
struct Directory {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t entries = 0;
  std::uint64_t end = 0;  // where the end records start: nothing of an entry lies past it
};

Directory find_directory(const ZipReader& zip) {
  const std::uint64_t size = zip.bytes().size();
  if (size < kEndBytes || zip.field(size - kEndBytes, 4, "end record") != kEndOfDirectory) {
    zip.fail("is torn: its " + std::to_string(size) +
             " bytes do not end with a zip archive's end-of-directory record");
  }
  const std::uint64_t end = size - kEndBytes;
  Directory dir;
  dir.offset = zip.field(end + 16, 4, "end record");
  dir.size = zip.field(end + 12, 4, "end record");
  dir.entries = zip.field(end + 10, 2, "end record");
  dir.end = end;
  // A zip64 locator before the end record names the zip64 end record, whose fields count
  // instead (LibTorch writes both; its reader, miniz, reads the zip64 one whenever the
  // locator is there): read the same, or a forged zip64 record shows LibTorch another
  // directory than the one checked here.
  const bool zip64 = end >= kZip64LocatorBytes &&
                     zip.field(end - kZip64LocatorBytes, 4, "zip64 locator") == kZip64Locator;
  if (zip64) {
    const std::uint64_t at = zip.field(end - kZip64LocatorBytes + 8, 8, "zip64 locator");
    if (at > end || end - at < kZip64EndBytes ||
        zip.field(at, 4, "zip64 end record") != kZip64End) {
      zip.fail("is corrupt: its zip64 locator names no zip64 end record (at byte " +
               std::to_string(at) + ")");
    }
    dir.offset = zip.field(at + 48, 8, "zip64 end record");
    dir.size = zip.field(at + 40, 8, "zip64 end record");
    dir.entries = zip.field(at + 32, 8, "zip64 end record");
    dir.end = at;
  } else if (dir.offset == kZip64Marker || dir.size == kZip64Marker || dir.entries == 0xffff) {
    zip.fail("is corrupt: its end record points to a zip64 record that is not there");
  }
  if (dir.offset > dir.end || dir.end - dir.offset < dir.size) {
    zip.fail("is corrupt: its central directory (" + std::to_string(dir.size) + " bytes at " +
             std::to_string(dir.offset) + ") does not lie before its end record");
  }
  return dir;
}

// The CRC-32 of an entry's content: `data` as it is, or inflated (`deflated`), which must
// come to `original` bytes. The content is appended to `content` unless it is null.
std::uint32_t entry_crc(const ZipReader& zip, std::string_view data, bool deflated,
                        std::uint64_t original, const std::string& entry, std::string* content) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto add = [&crc, content](const Bytef* p, std::uint64_t n) {
    if (content != nullptr) content->append(reinterpret_cast<const char*>(p), n);
    for (std::uint64_t done = 0; done < n;) {
      const auto chunk = static_cast<uInt>(std::min<std::uint64_t>(n - done, kMaxChunk));
      crc = crc32(crc, p + done, chunk);
      done += chunk;
    }
  };
  if (!deflated) {
    if (data.size() != original) {
      zip.fail("is corrupt: entry " + entry + " holds " + std::to_string(data.size()) +
               " bytes where its directory says " + std::to_string(original));
    }
    add(reinterpret_cast<const Bytef*>(data.data()), data.size());
    return static_cast<std::uint32_t>(crc);
  }
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) zip.fail("cannot be checked: zlib did not start");
  std::array<Bytef, 1 << 16> out{};
  std::uint64_t consumed = 0;
  std::uint64_t produced = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (zs.avail_in == 0 && consumed < data.size()) {
      zs.next_in = reinterpret_cast<const Bytef*>(data.data() + consumed);
      zs.avail_in = static_cast<uInt>(std::min<std::uint64_t>(data.size() - consumed, kMaxChunk));
      consumed += zs.avail_in;
    }
    zs.next_out = out.data();
    zs.avail_out = out.size();
    rc = inflate(&zs, Z_NO_FLUSH);
    const std::size_t got = out.size() - zs.avail_out;
    add(out.data(), got);
    produced += got;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && consumed == data.size()) break;  // cut short
    if (rc == Z_BUF_ERROR) rc = Z_OK;  // no progress this round only: go on
    if (produced > original) break;
  }
  const std::string why = zs.msg != nullptr ? zs.msg : "";
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || produced != original) {
    zip.fail("is corrupt: entry " + entry + " does not inflate to its " + std::to_string(original) +
             " bytes" + (why.empty() ? "" : " (zlib: " + why + ")"));
  }
  return static_cast<std::uint32_t>(crc);
}

// LibTorch's reader needs a version record, a decimal number of a format version it reads;
// without one it throws from its constructor and leaks what its zip reader allocated (found
// by the fuzzer), so the record is checked here first.
void check_version(const ZipReader& zip, const std::string& version) {
  std::uint64_t value = 0;
  std::size_t digits = 0;
  while (digits < version.size() && version[digits] >= '0' && version[digits] <= '9' &&
         digits < 10) {
    value = value * 10 + static_cast<std::uint64_t>(version[digits] - '0');
    ++digits;
  }
  const std::string_view rest = std::string_view(version).substr(digits);
  if (digits == 0 || (!rest.empty() && rest != "\n") ||
      value < caffe2::serialize::kMinSupportedFileFormatVersion ||
      value > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    zip.fail("is corrupt: its version record holds " + ::replicator::detail::quoted(version) +
             " where LibTorch reads format versions " +
             std::to_string(caffe2::serialize::kMinSupportedFileFormatVersion) + " to " +
             std::to_string(caffe2::serialize::kMaxSupportedFileFormatVersion));
  }
}

// Whether `path` names `record` of `folder` as LibTorch's reader looks it up (miniz compares
// names without case).
bool names_record(std::string_view path, const std::string& folder, std::string_view record) {
  const auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  return path.size() == folder.size() + record.size() &&
         std::equal(folder.begin(), folder.end(), path.begin(),
                    [&](char a, char b) { return lower(a) == lower(b); }) &&
         std::equal(record.begin(), record.end(),
                    path.begin() + static_cast<std::ptrdiff_t>(folder.size()),
                    [&](char a, char b) { return lower(a) == lower(b); });
}

// Checks each entry of the zip archive against the CRC-32 its central directory holds.
// LibTorch's reader checks no checksum, and its TorchScript importer, which compiles the
// archive's code/ entries, can crash on a corrupt source (a SEGV, found by the fuzzer): a
// checkpoint torn or changed since it was written is named here instead, before LibTorch
// reads it. What is left is a file forged to pass these checks: LibTorch's to read.
void check_zip(std::string_view bytes, const std::string& name) {
  if (bytes.empty()) {
    throw DataError("checkpoint " + name + " is empty; expected a zip archive", name);
  }
  const ZipReader zip(bytes, name);
  if (zip.field(0, 4, "first record") != kLocalHeader) {
    zip.fail(std::string("is not a checkpoint: it starts with bytes ") + hex_start(bytes) +
             " instead of the zip signature 50 4b 03 04");
  }
  const Directory dir = find_directory(zip);
  if (dir.entries == 0) zip.fail("is corrupt: its zip archive holds no entry");
  std::string folder;  // the first entry's, with its slash
  bool has_version = false;
  std::uint64_t at = dir.offset;
  const std::uint64_t dir_end = dir.offset + dir.size;
  for (std::uint64_t i = 0; i < dir.entries; ++i) {
    if (dir_end - at < kCentralHeaderBytes || zip.field(at, 4, "directory") != kCentralHeader) {
      zip.fail("is corrupt: its central directory ends after " + std::to_string(i) + " of " +
               std::to_string(dir.entries) + " entries");
    }
    const auto flags = zip.field(at + 8, 2, "directory");
    const auto method = zip.field(at + 10, 2, "directory");
    const auto crc = static_cast<std::uint32_t>(zip.field(at + 16, 4, "directory"));
    std::uint64_t stored = zip.field(at + 20, 4, "directory");
    std::uint64_t original = zip.field(at + 24, 4, "directory");
    const auto name_bytes = zip.field(at + 28, 2, "directory");
    const auto extra_bytes = zip.field(at + 30, 2, "directory");
    const auto comment_bytes = zip.field(at + 32, 2, "directory");
    const auto attributes = zip.field(at + 38, 4, "directory");
    std::uint64_t local = zip.field(at + 42, 4, "directory");
    const std::uint64_t next = at + kCentralHeaderBytes + name_bytes + extra_bytes + comment_bytes;
    if (next > dir_end) zip.fail("is corrupt: an entry runs past its central directory");
    const std::string_view path = bytes.substr(at + kCentralHeaderBytes, name_bytes);
    const std::string entry = ::replicator::detail::quoted(path);
    if (i == 0) {
      // LibTorch looks every record up in the folder of the first entry.
      const auto slash = path.find('/');
      if (slash == std::string_view::npos) {
        zip.fail("is corrupt: its first entry " + entry + " is not in a folder");
      }
      folder = std::string(path.substr(0, slash + 1));
    }
    // Zip64 sizes and offset: the extra field 0x0001 holds those marked 0xffffffff.
    for (std::uint64_t e = at + kCentralHeaderBytes + name_bytes;
         e + 4 <= at + kCentralHeaderBytes + name_bytes + extra_bytes;) {
      const auto id = zip.field(e, 2, "directory");
      const auto length = zip.field(e + 2, 2, "directory");
      std::uint64_t value = e + 4;
      if (id == 1) {
        for (std::uint64_t* v : {&original, &stored, &local}) {
          if (*v != kZip64Marker) continue;
          if (value + 8 > e + 4 + length) {
            zip.fail("is corrupt: entry " + entry + " lacks its zip64 sizes");
          }
          *v = zip.field(value, 8, "directory");
          value += 8;
        }
      }
      e += 4 + length;
    }
    // miniz hands out nothing for a folder, so LibTorch would read an empty buffer.
    if ((attributes & kDosFolder) != 0 || path.empty() || path.back() == '/') {
      zip.fail("is corrupt: entry " + entry + " is marked as a folder; LibTorch writes none");
    }
    if ((flags & kEncrypted) != 0) {
      zip.fail("is corrupt: entry " + entry + " is marked encrypted; LibTorch writes none");
    }
    if (method != kStored && method != kDeflated) {
      zip.fail("is corrupt: entry " + entry + " has compression method " + std::to_string(method) +
               "; LibTorch writes 0 (stored) or 8 (deflate)");
    }
    if (local > dir.offset || dir.offset - local < kLocalHeaderBytes ||
        zip.field(local, 4, "entry") != kLocalHeader) {
      zip.fail("is corrupt: entry " + entry + " has no local header at byte " +
               std::to_string(local));
    }
    const std::uint64_t data = local + kLocalHeaderBytes + zip.field(local + 26, 2, "entry") +
                               zip.field(local + 28, 2, "entry");
    if (data > dir.offset || dir.offset - data < stored) {
      zip.fail("is corrupt: entry " + entry + " (" + std::to_string(stored) +
               " bytes) runs into the central directory");
    }
    // Every record LibTorch may take for the version (".data/version" or "version") must be
    // one it reads.
    std::string version;
    const bool is_version =
        names_record(path, folder, "version") || names_record(path, folder, ".data/version");
    if (is_version && original > kMaxVersionBytes) {
      zip.fail("is corrupt: its version record " + entry + " holds " + std::to_string(original) +
               " bytes");
    }
    if (entry_crc(zip, bytes.substr(data, stored), method == kDeflated, original, entry,
                  is_version ? &version : nullptr) != crc) {
      zip.fail("is corrupt: entry " + entry +
               " fails its CRC-32 check (its bytes changed since it was written)");
    }
    if (is_version) {
      check_version(zip, version);
      has_version = true;
    }
    at = next;
  }
  if (!has_version) zip.fail("is corrupt: it has no record " + folder + "version");
}

std::int64_t read_scalar(::torch::serialize::InputArchive& archive, const char* key) {
  ::torch::Tensor t;
  archive.read(key, t);
  return t.item<std::int64_t>();
}

// Module::load replaces each tensor by the stored one whatever its shape (Tensor::set_), so
// a checkpoint of another architecture with the same names would load silently: compare
// every parameter and buffer (names, shapes, dtypes) before anything is changed.
void check_fits(const ::torch::nn::Module& module, ::torch::serialize::InputArchive& archive,
                const std::string& prefix, const std::string& name) {
  const auto check = [&](const std::string& key, const ::torch::Tensor& tensor, bool buffer) {
    ::torch::Tensor stored;
    if (!archive.try_read(key, stored, buffer)) {
      throw DataError("checkpoint " + name + " does not fit the model: it has no " +
                          (buffer ? "buffer " : "parameter ") + prefix + key,
                      name);
    }
    if (stored.sizes() != tensor.sizes() || stored.scalar_type() != tensor.scalar_type()) {
      throw DataError("checkpoint " + name + " does not fit the model: " + prefix + key + " is " +
                          c10::toString(stored.scalar_type()) + c10::str(stored.sizes()) +
                          " in the checkpoint and " + c10::toString(tensor.scalar_type()) +
                          c10::str(tensor.sizes()) + " in the model",
                      name);
    }
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) check(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false)) check(b.key(), b.value(), true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    ::torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive)) {
      throw DataError("checkpoint " + name + " does not fit the model: it has no " + "module " +
                          prefix + child.key(),
                      name);
    }
    check_fits(*child.value(), child_archive, prefix + child.key() + ".", name);
  }
}

}  // namespace

std::string optimizer_key(std::size_t i) {
  return i == 0 ? std::string("optimizer") : "optimizer" + std::to_string(i);
}

TrainingPosition load_checkpoint_bytes(std::string_view bytes, const std::string& name,
                                       ::torch::nn::Module& model, const Optimizers& optimizers) {
  check_zip(bytes, name);
  TrainingPosition position;
  try {
    // Onto the device the model is on (a checkpoint of a GPU run resumes on the CPU too).
    const std::vector<::torch::Tensor> parameters = model.parameters();
    const c10::Device device =
        parameters.empty() ? c10::Device(c10::kCPU) : parameters.front().device();
    ::torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), device);
    ::torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    check_fits(model, model_archive, "", name);
    model.load(model_archive);
    for (std::size_t i = 0; i < optimizers.size(); ++i) {
      ::torch::serialize::InputArchive optimizer_archive;
      if (!archive.try_read(optimizer_key(i), optimizer_archive)) {
        throw DataError("checkpoint " + name + " holds " + std::to_string(i) +
                            " optimizer(s), the run has " + std::to_string(optimizers.size()),
                        name);
      }
      optimizers[i]->load(optimizer_archive);
    }
    ::torch::serialize::InputArchive extra;
    if (archive.try_read(optimizer_key(optimizers.size()), extra)) {
      throw DataError("checkpoint " + name + " holds more optimizers than the run's " +
                          std::to_string(optimizers.size()),
                      name);
    }
    position.step = read_scalar(archive, "step");
    position.epoch = read_scalar(archive, "epoch");
    position.batch = read_scalar(archive, "batch");
    if (c10::IValue conditions; archive.try_read("conditions", conditions)) {
      if (conditions.isString()) position.conditions = conditions.toStringRef();
    }
    ::torch::Tensor rng;
    archive.read("rng", rng);
    auto generator = at::detail::getDefaultCPUGenerator();
    const std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng.to(::torch::kCPU));
  } catch (const Error&) {
    throw;  // ours: what does not fit the model
  } catch (const c10::Error& e) {
    throw DataError("checkpoint " + name +
                        " is corrupt or does not fit the model: " + e.what_without_backtrace(),
                    name);
  } catch (const std::exception& e) {
    // LibTorch's TorchScript importer and unpickler throw types of their own besides
    // c10::Error (torch::jit::ErrorReport for a type name they cannot resolve, ...).
    std::string_view what = e.what();
    const auto first = what.find_first_not_of(" \n");
    what = first == std::string_view::npos ? "" : what.substr(first);
    throw DataError("checkpoint " + name + " is corrupt: " + std::string(what), name);
  }
  return position;
}

}  // namespace replicator::torch::detail
