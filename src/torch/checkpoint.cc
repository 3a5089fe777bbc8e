#include "replicator/torch/checkpoint.h"

#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "replicator/errors.h"

namespace replicator::torch {
namespace {

void write_all(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw DataError("cannot write checkpoint " + path + ": " + std::strerror(errno), path);
    done += static_cast<std::size_t>(n);
  }
}

// Writes `bytes` to `path` through a temporary file, fsync and rename.
void write_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  const std::string tmp =
      (dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw DataError("cannot create checkpoint " + tmp + ": " + std::strerror(errno), path.string());
  }
  try {
    write_all(fd, bytes, tmp);
    if (::fsync(fd) != 0) {
      throw DataError("cannot flush checkpoint " + tmp + ": " + std::strerror(errno), tmp);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
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

std::int64_t read_scalar(::torch::serialize::InputArchive& archive, const char* key) {
  ::torch::Tensor t;
  archive.read(key, t);
  return t.item<std::int64_t>();
}

// Module::load replaces each tensor by the stored one whatever its shape (Tensor::set_), so
// a checkpoint of another architecture with the same names would load silently: compare
// every parameter and buffer (names, shapes, dtypes) before anything is changed.
void check_fits(const ::torch::nn::Module& module, ::torch::serialize::InputArchive& archive,
                const std::string& prefix, const std::filesystem::path& path) {
  const auto check = [&](const std::string& name, const ::torch::Tensor& tensor, bool buffer) {
    ::torch::Tensor stored;
    if (!archive.try_read(name, stored, buffer)) {
      throw DataError("checkpoint " + path.string() + " does not fit the model: it has no " +
                          (buffer ? "buffer " : "parameter ") + prefix + name,
                      path.string());
    }
    if (stored.sizes() != tensor.sizes() || stored.scalar_type() != tensor.scalar_type()) {
      throw DataError("checkpoint " + path.string() + " does not fit the model: " + prefix + name +
                          " is " + c10::toString(stored.scalar_type()) + c10::str(stored.sizes()) +
                          " in the checkpoint and " + c10::toString(tensor.scalar_type()) +
                          c10::str(tensor.sizes()) + " in the model",
                      path.string());
    }
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) check(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false)) check(b.key(), b.value(), true);
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    ::torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive)) {
      throw DataError("checkpoint " + path.string() + " does not fit the model: it has no " +
                          "module " + prefix + child.key(),
                      path.string());
    }
    check_fits(*child.value(), child_archive, prefix + child.key() + ".", path);
  }
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, ::torch::nn::Module& model,
                     ::torch::optim::Optimizer& optimizer, const TrainingPosition& position) {
  ::torch::serialize::OutputArchive archive;
  ::torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  ::torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("step", scalar(position.step));
  archive.write("epoch", scalar(position.epoch));
  archive.write("batch", scalar(position.batch));
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
                                 ::torch::optim::Optimizer& optimizer) {
  if (!std::filesystem::exists(path)) {
    throw DataError("checkpoint " + path.string() + " does not exist", path.string());
  }
  TrainingPosition position;
  try {
    ::torch::serialize::InputArchive archive;
    archive.load_from(path.string());
    ::torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    check_fits(model, model_archive, "", path);
    model.load(model_archive);
    ::torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
    position.step = read_scalar(archive, "step");
    position.epoch = read_scalar(archive, "epoch");
    position.batch = read_scalar(archive, "batch");
    ::torch::Tensor rng;
    archive.read("rng", rng);
    auto generator = at::detail::getDefaultCPUGenerator();
    const std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  } catch (const c10::Error& e) {
    throw DataError("checkpoint " + path.string() +
                        " is corrupt or does not fit the model: " + e.what_without_backtrace(),
                    path.string());
  }
  return position;
}

}  // namespace replicator::torch
