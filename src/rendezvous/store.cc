#include "replicator/rendezvous/store.h"

#include <system_error>

#include "src/base/text.h"
#include "src/rendezvous/backends.h"
#include "src/rendezvous/redis_address.h"

namespace replicator::rendezvous {
namespace {

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw ConfigError("rendezvous URL " + replicator::detail::quoted(url) + " is not valid (" + why +
                    "); expected file:///shared/folder/job or redis://host:port/job");
}

}  // namespace

namespace detail {

bool valid_path(std::string_view text) noexcept {
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

const std::string& checked_key(const std::string& key) {
  if (!valid_path(key)) {
    throw InvalidArgument("rendezvous store: invalid key " + replicator::detail::quoted(key) +
                          " (names of letters, digits, '.', '_' and '-' joined by '/')");
  }
  return key;
}

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

}  // namespace detail

StoreUrl parse_store_url(const std::string& url) {
  StoreUrl parsed;
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
    if (folder.size() == 1 || !detail::valid_path(folder.substr(1))) {
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
  if (!detail::valid_path(prefix)) {
    bad_url(url,
            "the job name is empty or holds characters other than letters, digits, '.', "
            "'_', '-' and '/'");
  }
  parsed.prefix = std::string(prefix);
  if (const auto why =
          replicator::detail::read_redis_address(rest.substr(0, slash), parsed.host, parsed.port)) {
    bad_url(url, *why);
  }
  return parsed;
}

std::string child_url(const StoreUrl& url, std::string_view name) {
  if (!url.redis) return "file://" + url.folder + "/" + std::string(name);
  const bool v6 = url.host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port) +
         "/" + url.prefix + "/" + std::string(name);
}

std::string root_name(const StoreUrl& url) {
  const std::string& root = url.redis ? url.prefix : url.folder;
  return root.substr(root.rfind('/') + 1);
}

std::unique_ptr<Store> open_store(const StoreUrl& url) {
  return url.redis ? detail::open_redis_store(url) : detail::open_file_store(url);
}

std::unique_ptr<Store> open_store(const std::string& url) {
  return open_store(parse_store_url(url));
}

}  // namespace replicator::rendezvous
