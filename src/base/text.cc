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

std::string replicas_text(const std::vector<int>& ids) {
  if (ids.empty()) return "no replica";
  std::string runs;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i > 0) runs += ", ";
    runs += std::to_string(ids[i]);
    if (j > i) {
      runs += '-';
      runs += std::to_string(ids[j]);
    }
    i = j + 1;
  }
  return (ids.size() == 1 ? "replica " : "replicas ") + runs;
}

}  // namespace replicator::detail
