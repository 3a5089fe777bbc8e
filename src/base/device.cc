#include "replicator/device.h"

#include <charconv>

#include "replicator/errors.h"
#include "src/base/text.h"

namespace replicator {

std::string_view to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kCuda:
      return "cuda";
    case MemoryKind::kFake:
      return "fake";
  }
  return "?";
}

std::string to_string(Device device) {
  if (device.is_host()) return "host";
  return std::string(to_string(device.kind)) + ":" + std::to_string(device.index);
}

DeviceSet parse_devices(std::string_view text) {
  const auto bad = [&] {
    return ConfigError("devices: expected host, cuda, cuda:N or fake:N (N devices, 1 to 64), got " +
                       detail::quoted(text));
  };
  if (text.empty() || text == "host") return {};
  if (text == "cuda") return {.kind = MemoryKind::kCuda, .count = 0};  // every visible GPU
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) throw bad();
  const std::string_view kind = text.substr(0, colon);
  const std::string_view number = text.substr(colon + 1);
  int count = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), count);
  if (ec != std::errc() || end != number.data() + number.size() || count < 1 || count > 64) {
    throw bad();
  }
  if (kind == "cuda") return {.kind = MemoryKind::kCuda, .count = count};
  if (kind == "fake") return {.kind = MemoryKind::kFake, .count = count};
  throw bad();
}

}  // namespace replicator
