#include "src/base/text.h"

#include <algorithm>
#include <array>
#include <cstdio>

namespace replicator::detail {
namespace {

bool is_control(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte < 0x20 || byte == 0x7f;
}

}  // namespace

std::string quoted(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    if (!is_control(c)) {
      out += c;
      continue;
    }
    std::array<char, 5> escaped{};
    std::snprintf(escaped.data(), escaped.size(), "\\x%02x", static_cast<unsigned char>(c));
    out += escaped.data();
  }
  return out + "'";
}

bool has_control(std::string_view text) {
  return std::any_of(text.begin(), text.end(), is_control);
}

}  // namespace replicator::detail
