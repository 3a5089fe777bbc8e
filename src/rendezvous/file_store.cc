// The rendezvous store on a folder: a key is a file; put writes a temporary file and renames
// it over the key, create links one (link(2) fails on a taken name, so one creator wins),
// add holds a record lock on the key's lock file.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "src/rendezvous/backends.h"

namespace replicator::rendezvous::detail {
namespace {

namespace fs = std::filesystem;

// A file name no other writer uses: the process id and a counter of this process.
std::string temp_name(const fs::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp.";
  name += std::to_string(::getpid());
  name += '.';
  name += std::to_string(++counter);
  return (target.parent_path() / name).string();
}

std::optional<std::string> read_file(const std::string& name) {
  std::ifstream in(name, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class FileStore final : public Store {
 public:
  explicit FileStore(const StoreUrl& url) : Store(url) {
    std::error_code ec;
    fs::create_directories(url.folder, ec);
    if (!fs::is_directory(url.folder)) {
      throw StoreError("rendezvous store: the folder '" + url.folder +
                           "' does not exist and cannot be created" +
                           (ec ? " (" + ec.message() + ")" : std::string()) +
                           "; give a writable folder that every host sees, as file:///dir/job",
                       url.text);
    }
  }

  void put(const std::string& key, std::string_view value) override {
    const std::string target = path(key);
    const std::string temp = write_temp(target, value);
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      const int error = errno;
      ::unlink(temp.c_str());
      fail("cannot write " + target, error);
    }
  }

  bool create(const std::string& key, std::string_view value) override {
    const std::string target = path(key);
    const std::string temp = write_temp(target, value);
    const int rc = ::link(temp.c_str(), target.c_str());
    const int error = errno;
    ::unlink(temp.c_str());
    if (rc == 0) return true;
    if (error == EEXIST) return false;
    fail("cannot create " + target, error);
  }

  std::optional<std::string> get(const std::string& key) override { return read_file(path(key)); }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    const std::string target = path(key);
    std::error_code ec;
    fs::create_directories(fs::path(target).parent_path(), ec);
    const std::string lock_name = target + ".lock";
    const int fd = ::open(lock_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot open " + lock_name, errno);
    // An open-file-description lock: a record lock, which network file systems honour
    // across hosts, owned by this open file rather than by the process, so that threads of
    // one process exclude each other too.
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_pid = 0;
    while (::fcntl(fd, F_OFD_SETLKW, &lock) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      fail("cannot lock " + lock_name, error);
    }
    std::int64_t value = 0;
    try {
      if (const auto text = read_file(target)) {
        const auto [ptr, parse] = std::from_chars(text->data(), text->data() + text->size(), value);
        if (parse != std::errc()) value = 0;
      }
      value += delta;
      put(key, std::to_string(value));
    } catch (...) {
      ::close(fd);  // releases the lock
      throw;
    }
    ::close(fd);
    return value;
  }

  void remove_tree(const std::string& key) override {
    const std::string root = path(key);
    std::error_code ec;
    fs::remove_all(root, ec);
    fs::remove(root + ".lock", ec);
  }

 private:
  std::string path(const std::string& key) const { return url().folder + "/" + checked_key(key); }

  [[noreturn]] void fail(const std::string& what, int error) const {
    throw StoreError("rendezvous store " + url().text + ": " + what + ": " + errno_text(error),
                     url().text);
  }

  // Writes `value` to a file of its own next to `target` and returns its name.
  std::string write_temp(const fs::path& target, std::string_view value) const {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    std::string temp = temp_name(target);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot write " + temp, errno);
    std::size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int error = errno;
        ::close(fd);
        ::unlink(temp.c_str());
        fail("cannot write " + temp, error);
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return temp;
  }
};

}  // namespace

std::unique_ptr<Store> open_file_store(const StoreUrl& url) {
  return std::make_unique<FileStore>(url);
}

}  // namespace replicator::rendezvous::detail
