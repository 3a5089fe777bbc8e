#include "src/comm/descriptor.h"

#include <vector>

#include "replicator/errors.h"
#include "src/comm/site_files.h"

namespace replicator::detail {

std::uint64_t mix_hash(std::uint64_t h, std::uint64_t value) {
  h ^= value + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

std::string Descriptor::describe() const {
  if (traits && !traits->phrase.empty()) return std::string(traits->phrase);
  std::string s(name());
  if (traits && !traits->shows_shape) return s + "()";
  s += '(';
  s += to_string(dtype);
  s += " x " + std::to_string(count);
  if (memory != MemoryKind::kHost) s += " on " + std::string(to_string(memory));
  if (traits && traits->shows_op) s += ", op=" + std::string(to_string(op));
  if (traits && traits->shows_root) s += ", root=" + std::to_string(root);
  if (num_buffers > 1) {
    s += ", " + std::to_string(num_buffers) + " fused buffers, layout " +
         std::to_string(layout % 100000);
  } else if (traits && traits->shows_pairs) {
    s += ", " + std::to_string(call.pairs.size()) + " pairs #" + std::to_string(layout % 100000);
  } else if (layout != 0) {
    s += ", signature #" + std::to_string(layout % 100000);
  }
  return s + ")";
}

void check_match(int first, int me, std::span<const Descriptor* const> calls) {
  bool same = true;
  for (const Descriptor* other : calls) same = same && other->matches(*calls[0]);
  if (same) return;
  std::vector<std::string> described;
  for (const Descriptor* other : calls) {
    described.push_back(other->describe() + site_suffix(other->call.where));
  }
  const Descriptor& d = *calls[static_cast<std::size_t>(me - first)];
  std::string message =
      "collective #" + std::to_string(d.sequence) + " does not match across replicas: ";
  for (std::size_t j = 0; j < described.size();) {
    std::size_t k = j;
    while (k + 1 < described.size() && described[k + 1] == described[j]) ++k;
    if (j > 0) message += "; ";
    message += k > j ? "replicas " : "replica ";
    message += std::to_string(first + static_cast<int>(j));
    if (k > j) {
      message += '-';
      message += std::to_string(first + static_cast<int>(k));
    }
    message += " called " + described[j];
    j = k + 1;
  }
  message +=
      ". Every replica must issue the same collectives in the same order, with the "
      "same dtype, size, root and reduce op (seen by replica " +
      std::to_string(me) + ").";
  throw CollectiveMismatch(message, d.sequence, std::move(described));
}

}  // namespace replicator::detail
