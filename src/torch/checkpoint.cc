#include "replicator/torch/checkpoint.h"

#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "replicator/errors.h"
#include "src/torch/checkpoint_reader.h"

namespace replicator::torch {
namespace {

// strerror's text, from the thread-safe std::error_code.
std::string error_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError("cannot write checkpoint " + path + ": " + error_text(errno), path);
    done += static_cast<std::size_t>(n);
  }
}

// A temporary name next to `path` that no other writer uses: this host, process and a
// counter of this process (threads and hosts sharing a folder never meet).
std::string temp_path(const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  char host[64] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string name = ".";
  name += path.filename().string();
  name += ".tmp.";
  name += host;
  name += '.';
  name += std::to_string(::getpid());
  name += '.';
  name += std::to_string(++counter);
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  return (dir / name).string();
}

// Writes `bytes` to `path` through a temporary file, fsync and rename.
void write_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const std::string tmp = temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw DataError("cannot create checkpoint " + tmp + ": " + error_text(errno), path.string());
  }
  try {
    write_all(fd, bytes, tmp);
    if (::fsync(fd) != 0) {
      throw DataError("cannot flush checkpoint " + tmp + ": " + error_text(errno), tmp);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = error_text(errno);
    ::unlink(tmp.c_str());
    throw DataError("cannot rename " + tmp + " to " + path.string() + ": " + why, path.string());
  }
  // Make the rename itself durable.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

::torch::Tensor scalar(std::int64_t v) { return ::torch::tensor(v, ::torch::kLong); }

// The bytes of the file at `path`; throws DataError naming it when it cannot be read.
std::string read_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw DataError("cannot open checkpoint " + path.string() + ": " + error_text(errno),
                    path.string());
  }
  std::string bytes;
  std::array<char, 1 << 16> chunk{};
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = error_text(errno);
      ::close(fd);
      throw DataError("cannot read checkpoint " + path.string() + ": " + why, path.string());
    }
    if (n == 0) break;
    bytes.append(chunk.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                     const Optimizers& optimizers, const TrainingPosition& position) {
  ::torch::serialize::OutputArchive archive;
  ::torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  for (std::size_t i = 0; i < optimizers.size(); ++i) {
    ::torch::serialize::OutputArchive optimizer_archive;
    optimizers[i]->save(optimizer_archive);
    archive.write(detail::optimizer_key(i), optimizer_archive);
  }
  archive.write("step", scalar(position.step));
  archive.write("epoch", scalar(position.epoch));
  archive.write("batch", scalar(position.batch));
  archive.write("conditions", c10::IValue(position.conditions));
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    const std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write("rng", generator.get_state());
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  write_atomically(path, bytes.str());
}

TrainingPosition load_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                                 const Optimizers& optimizers) {
  if (!std::filesystem::exists(path)) {
    throw DataError("checkpoint " + path.string() + " does not exist", path.string());
  }
  return detail::load_checkpoint_bytes(read_file(path), path.string(), model, optimizers);
}

CheckpointFolder::CheckpointFolder(std::filesystem::path dir, int keep)
    : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1) {
    throw InvalidArgument("a checkpoint folder keeps at least 1 checkpoint, got " +
                          std::to_string(keep_));
  }
}

std::filesystem::path CheckpointFolder::path_for(std::int64_t step) const {
  char name[40];
  std::snprintf(name, sizeof name, "checkpoint-%09lld.pt", static_cast<long long>(step));
  return dir_ / name;
}

std::vector<std::filesystem::path> CheckpointFolder::list() const {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "checkpoint-";
    constexpr std::string_view kSuffix = ".pt";
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
        !name.ends_with(kSuffix)) {
      continue;
    }
    const std::string digits =
        name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    found.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::filesystem::path> out;
  out.reserve(found.size());
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

void CheckpointFolder::save(::torch::nn::Module& model, const Optimizers& optimizers,
                            const TrainingPosition& position) {
  std::filesystem::create_directories(dir_);
  save_checkpoint(path_for(position.step), model, optimizers, position);
  const std::vector<std::filesystem::path> all = list();
  for (std::size_t i = static_cast<std::size_t>(keep_); i < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);
  }
}

std::optional<std::pair<TrainingPosition, std::filesystem::path>> CheckpointFolder::resume(
    ::torch::nn::Module& model, const Optimizers& optimizers,
    const std::function<void(const std::string&)>& warn) {
  const std::vector<std::filesystem::path> all = list();
  if (all.empty()) return std::nullopt;
  std::string skipped;
  for (const std::filesystem::path& path : all) {
    try {
      return std::make_pair(load_checkpoint(path, model, optimizers), path);
    } catch (const DataError& e) {
      warn("skipping checkpoint " + path.string() + ": " + e.what());
      skipped += (skipped.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  throw DataError("no checkpoint in " + dir_.string() + " loads (" + skipped +
                      "); move them away to start afresh, or pass --resume FILE",
                  dir_.string());
}

}  // namespace replicator::torch
