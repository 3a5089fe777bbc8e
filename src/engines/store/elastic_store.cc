#include "src/engines/store/elastic_store.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "replicator/errors.h"
#include "src/base/text.h"
#include "src/engines/store/redis_address.h"

namespace replicator::detail {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw ConfigError("rendezvous URL " + detail::quoted(url) + " is not valid (" + why +
                    "); expected file:///shared/folder/job or redis://host:port/job");
}

// A root or key: components of [A-Za-z0-9._-], joined by '/', none empty, "." or "..".
bool valid_path(std::string_view text) {
  if (text.empty()) return false;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find('/', begin), text.size());
    const std::string_view part = text.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    for (const char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
      if (!ok) return false;
    }
    begin = end + 1;
  }
  return true;
}

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

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

}  // namespace

ElasticUrl parse_elastic_url(const std::string& url) {
  ElasticUrl parsed;
  parsed.text = url;
  const std::string_view text = url;
  constexpr std::string_view kFile = "file://";
  constexpr std::string_view kRedis = "redis://";
  if (text.starts_with(kFile)) {
    std::string_view folder = text.substr(kFile.size());
    while (folder.size() > 1 && folder.back() == '/') folder.remove_suffix(1);
    if (folder.empty() || folder[0] != '/') {
      bad_url(url, "a file store names an absolute folder, with three slashes: file:///dir/job");
    }
    if (folder.size() == 1 || !valid_path(folder.substr(1))) {
      bad_url(url,
              "the folder must be below / and its names may hold only letters, digits, '.', "
              "'_' and '-'");
    }
    parsed.folder = std::string(folder);
    return parsed;
  }
  if (!text.starts_with(kRedis)) bad_url(url, url.empty() ? "it is empty" : "unknown scheme");
  parsed.redis = true;
  std::string_view rest = text.substr(kRedis.size());
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos)
    bad_url(url, "no job name after the host: redis://host:port/job");
  std::string_view prefix = rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (!valid_path(prefix)) {
    bad_url(url,
            "the job name is empty or holds characters other than letters, digits, '.', "
            "'_', '-' and '/'");
  }
  parsed.prefix = std::string(prefix);
  if (const auto why = read_redis_address(rest.substr(0, slash), parsed.host, parsed.port)) {
    bad_url(url, *why);
  }
  return parsed;
}

std::string child_url(const ElasticUrl& url, std::string_view name) {
  if (!url.redis) return "file://" + url.folder + "/" + std::string(name);
  const bool v6 = url.host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port) +
         "/" + url.prefix + "/" + std::string(name);
}

std::string root_name(const ElasticUrl& url) {
  const std::string& root = url.redis ? url.prefix : url.folder;
  return root.substr(root.rfind('/') + 1);
}

struct ElasticStore::Redis {
  redisContext* context = nullptr;
  ~Redis() {
    if (context != nullptr) redisFree(context);
  }

  // Runs one command; throws ConfigError naming the store and the command on failure.
  std::unique_ptr<redisReply, void (*)(void*)> command(const ElasticUrl& url,
                                                       const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const std::string& arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    void* raw =
        redisCommandArgv(context, static_cast<int>(args.size()), argv.data(), lengths.data());
    if (raw == nullptr) {
      throw ConfigError("rendezvous store " + url.text + ": " + args[0] + " failed: " +
                        (context->errstr[0] != '\0' ? context->errstr : "connection lost"));
    }
    auto reply = std::unique_ptr<redisReply, void (*)(void*)>(static_cast<redisReply*>(raw),
                                                              freeReplyObject);
    if (reply->type == REDIS_REPLY_ERROR) {
      throw ConfigError("rendezvous store " + url.text + ": " + args[0] +
                        " failed: " + std::string(reply->str, reply->len));
    }
    return reply;
  }
};

ElasticStore::ElasticStore(ElasticUrl url) : url_(std::move(url)) {
  if (url_.redis) {
    redis_ = std::make_unique<Redis>();
    const timeval connect_timeout{5, 0};
    redis_->context = redisConnectWithTimeout(url_.host.c_str(), url_.port, connect_timeout);
    if (redis_->context == nullptr || redis_->context->err != 0) {
      const std::string why =
          redis_->context != nullptr ? redis_->context->errstr : "out of memory";
      throw ConfigError("rendezvous store: cannot reach the Redis server at " + url_.host + ":" +
                        std::to_string(url_.port) + " (" + why +
                        "); start redis-server there, or "
                        "fix the URL '" +
                        url_.text + "'");
    }
    const timeval command_timeout{30, 0};
    redisSetTimeout(redis_->context, command_timeout);
    return;
  }
  std::error_code ec;
  fs::create_directories(url_.folder, ec);
  if (!fs::is_directory(url_.folder)) {
    throw ConfigError("rendezvous store: the folder '" + url_.folder +
                      "' does not exist and cannot be created" +
                      (ec ? " (" + ec.message() + ")" : std::string()) +
                      "; give a writable folder that every host sees, as file:///dir/job");
  }
}

ElasticStore::~ElasticStore() = default;

std::string ElasticStore::path(const std::string& key) const {
  if (!valid_path(key)) throw InvalidArgument("rendezvous store: invalid key '" + key + "'");
  return url_.folder + "/" + key;
}

std::string ElasticStore::redis_key(const std::string& key) const {
  if (!valid_path(key)) throw InvalidArgument("rendezvous store: invalid key '" + key + "'");
  return url_.prefix + "/" + key;
}

namespace {

// Writes `value` to a file of its own next to `target` and returns its name.
std::string write_temp(const ElasticUrl& url, const fs::path& target, std::string_view value) {
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  std::string temp = temp_name(target);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError("rendezvous store " + url.text + ": cannot write " + temp + ": " +
                      errno_text(errno));
  }
  std::size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw ConfigError("rendezvous store " + url.text + ": cannot write " + temp + ": " +
                        errno_text(error));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return temp;
}

std::optional<std::string> read_file(const std::string& name) {
  std::ifstream in(name, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void ElasticStore::put(const std::string& key, std::string_view value) {
  if (redis_) {
    redis_->command(url_, {"SET", redis_key(key), std::string(value)});
    return;
  }
  const std::string target = path(key);
  const std::string temp = write_temp(url_, target, value);
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw ConfigError("rendezvous store " + url_.text + ": cannot write " + target + ": " +
                      errno_text(error));
  }
}

bool ElasticStore::create(const std::string& key, std::string_view value) {
  if (redis_) {
    auto reply = redis_->command(url_, {"SET", redis_key(key), std::string(value), "NX"});
    return reply->type == REDIS_REPLY_STATUS;
  }
  const std::string target = path(key);
  const std::string temp = write_temp(url_, target, value);
  // link() fails with EEXIST when the name is taken: one creator wins, and the file it
  // makes appears whole.
  const int rc = ::link(temp.c_str(), target.c_str());
  const int error = errno;
  ::unlink(temp.c_str());
  if (rc == 0) return true;
  if (error == EEXIST) return false;
  throw ConfigError("rendezvous store " + url_.text + ": cannot create " + target + ": " +
                    errno_text(error));
}

std::optional<std::string> ElasticStore::get(const std::string& key) {
  if (redis_) {
    auto reply = redis_->command(url_, {"GET", redis_key(key)});
    if (reply->type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(reply->str, reply->len);
  }
  return read_file(path(key));
}

std::int64_t ElasticStore::add(const std::string& key, std::int64_t delta) {
  if (redis_) {
    auto reply = redis_->command(url_, {"INCRBY", redis_key(key), std::to_string(delta)});
    return reply->integer;
  }
  const std::string target = path(key);
  std::error_code ec;
  fs::create_directories(fs::path(target).parent_path(), ec);
  const std::string lock_name = target + ".lock";
  const int fd = ::open(lock_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ConfigError("rendezvous store " + url_.text + ": cannot open " + lock_name + ": " +
                      errno_text(errno));
  }
  // An open-file-description lock: a record lock, which network file systems honour across
  // hosts, owned by this open file rather than by the process, so that threads of one
  // process exclude each other too.
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_pid = 0;
  while (::fcntl(fd, F_OFD_SETLKW, &lock) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    ::close(fd);
    throw ConfigError("rendezvous store " + url_.text + ": cannot lock " + lock_name + ": " +
                      errno_text(error));
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

void ElasticStore::remove_tree(const std::string& key) {
  if (redis_) {
    const std::string root = redis_key(key);
    redis_->command(url_, {"DEL", root});
    std::string cursor = "0";
    do {
      auto reply = redis_->command(url_, {"SCAN", cursor, "MATCH", root + "/*", "COUNT", "1000"});
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) break;
      cursor.assign(reply->element[0]->str, reply->element[0]->len);
      const redisReply* keys = reply->element[1];
      for (std::size_t i = 0; i < keys->elements; ++i) {
        redis_->command(url_, {"DEL", std::string(keys->element[i]->str, keys->element[i]->len)});
      }
    } while (cursor != "0");
    return;
  }
  std::error_code ec;
  fs::remove_all(path(key), ec);
  fs::remove(path(key) + ".lock", ec);
}

}  // namespace replicator::detail
