#include "src/runtime/host_policy.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>
#include <system_error>

namespace replicator::detail {

HostPolicy host_policy(int local_replicas, int host_processes, unsigned cores,
                       std::chrono::microseconds spin) {
  const unsigned usable = std::max(1u, cores);
  const auto threads =
      static_cast<unsigned>(local_replicas) * static_cast<unsigned>(std::max(1, host_processes));
  HostPolicy policy;
  policy.oversubscribed = threads > usable;
  policy.collective_spin = policy.oversubscribed ? std::chrono::microseconds(0) : spin;
  // Every process of the host has a driving thread besides its replicas.
  const auto drivers = static_cast<unsigned>(std::max(1, host_processes));
  policy.step_spin =
      threads + drivers <= usable ? policy.collective_spin : std::chrono::microseconds(0);
  return policy;
}

bool cores_elsewhere(int cpu, std::span<const int> lower, const cpu_set_t& allowed,
                     cpu_set_t* elsewhere) {
  cpu_set_t taken;
  CPU_ZERO(&taken);
  bool shared = false;
  for (const int other : lower) {
    if (other < 0 || other >= CPU_SETSIZE) continue;
    CPU_SET(other, &taken);
    shared = shared || other == cpu;
  }
  if (!shared) return false;
  CPU_ZERO(elsewhere);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &taken)) CPU_SET(c, elsewhere);
  }
  return CPU_COUNT(elsewhere) > 0;
}

namespace {

std::string first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// "48K", "1024K", "32M", "2097152" → bytes; 0 for anything else.
std::size_t parse_size(const std::string& text) {
  std::size_t value = 0, i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0; ++i) {
    value = value * 10 + static_cast<std::size_t>(text[i] - '0');
  }
  if (i == 0) return 0;
  const std::string unit = text.substr(i);
  if (unit.empty()) return value;
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  return 0;
}

// "0-1", "0,2-3", "5" → how many CPUs the list names; 0 for anything else.
int count_cpus(const std::string& list) {
  int count = 0;
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string range = list.substr(at, comma - at);
    const std::size_t dash = range.find('-');
    try {
      if (dash == std::string::npos) {
        (void)std::stoi(range);
        ++count;
      } else {
        const int lo = std::stoi(range.substr(0, dash));
        const int hi = std::stoi(range.substr(dash + 1));
        if (hi < lo) return 0;
        count += hi - lo + 1;
      }
    } catch (const std::exception&) {
      return 0;
    }
    at = comma + 1;
  }
  return count;
}

}  // namespace

std::size_t CacheFacts::last_level_share() const {
  if (last_level_bytes == 0) return 0;
  return last_level_bytes / static_cast<std::size_t>(std::max(1, last_level_sharers));
}

CacheFacts read_cache_facts(const std::filesystem::path& dir) {
  CacheFacts facts;
  int last_level = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("index", 0) != 0) continue;
    const std::string type = first_line(it->path() / "type");
    if (type != "Unified" && type != "Data") continue;
    const std::size_t bytes = parse_size(first_line(it->path() / "size"));
    int level = 0;
    try {
      level = std::stoi(first_line(it->path() / "level"));
    } catch (const std::exception&) {
      continue;
    }
    if (bytes == 0) continue;
    if (level == 2) facts.level2_bytes = bytes;
    if (level > last_level) {
      last_level = level;
      facts.last_level_bytes = bytes;
      facts.last_level_sharers = count_cpus(first_line(it->path() / "shared_cpu_list"));
    }
  }
  return facts;
}

}  // namespace replicator::detail
