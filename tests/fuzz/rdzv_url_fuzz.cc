// The rendezvous store's URL parser (parse_store_url) on any text.
//
// Promises: ConfigError showing the URL (control bytes escaped), or a URL the agents can use:
// a file root is an absolute folder of plain names, a Redis root a plain key prefix, a Redis
// host without space, control byte or path, a port in 1..65535; the URL of a tree below the
// root (child_url) parses to the same store with that tree as its root, and the job's name
// (root_name) is the root's last name.
#include <string>

#include "replicator/errors.h"
#include "replicator/rendezvous/store.h"
#include "src/base/text.h"
#include "tests/fuzz/fuzz.h"

namespace rd = replicator::rendezvous;
using replicator::detail::has_control;
using replicator::detail::quoted;
using replicator::fuzz::require;

namespace {

// Letters, digits, '.', '_', '-' and '/', no empty, "." or ".." name.
bool plain_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  std::size_t begin = 0;
  while (begin <= path.size()) {
    const std::size_t end = std::min(path.find('/', begin), path.size());
    const std::string part = path.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    for (const char c : part) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
        return false;
      }
    }
    begin = end + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  rd::StoreUrl url;
  try {
    url = rd::parse_store_url(text);
  } catch (const replicator::ConfigError& e) {
    require(std::string(e.what()).find(quoted(text)) != std::string::npos,
            "the error shows the URL, control bytes escaped");
    return 0;
  }
  require(url.text == text, "the URL is kept as given");
  const std::string root = url.redis ? url.prefix : url.folder.substr(1);
  require(url.redis || (!url.folder.empty() && url.folder[0] == '/'),
          "a file root is an absolute folder");
  require(plain_path(root), "the root is a path of plain names: '" + root + "'");
  if (url.redis) {
    require(!url.host.empty() && !has_control(url.host) &&
                url.host.find_first_of(" /?#@[]") == std::string::npos,
            "a Redis host holds no space, control byte, path, query, password or bracket");
    require(url.port >= 1 && url.port <= 65535, "a Redis port is in 1..65535");
  }
  require(root_name(url) == root.substr(root.rfind('/') + 1), "the job is the root's last name");
  const std::string child = rd::child_url(url, "gen7");
  rd::StoreUrl again;
  try {
    again = rd::parse_store_url(child);
  } catch (const replicator::ConfigError& e) {
    require(false, "'" + text + "' parses, but its child '" + child + "' does not: " + e.what());
  }
  require(
      again.redis == url.redis && again.host == url.host && again.port == url.port &&
          (url.redis ? again.prefix == url.prefix + "/gen7" : again.folder == url.folder + "/gen7"),
      "the child of '" + text + "' is the tree gen7 below its root");
  return 0;
}
