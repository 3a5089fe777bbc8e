// CallSite: where in the user's code a collective was called (file and line).
//
// Every public collective takes one as its last argument, defaulted to the caller's line
// (`CallSite::here()` in a default argument is evaluated where the call is written), so
// mismatch and timeout messages, the flight recorder, the timeline and `replicator
// diagnose` can say "replica 3 called all_reduce(f32 x 1024, op=sum) at train.cc:120". A
// layer that wraps a collective (the torch layer's tensor collectives, the gradient
// reducer) takes one the same way and passes it on, so the line named is the user's.
// Costs two words per call; nothing is formatted unless a message is written.
#pragma once

#include <cstdint>
#include <string>

namespace replicator {

struct CallSite {
  const char* file = nullptr;  // as the compiler saw it (a static string); null: not known
  std::uint32_t line = 0;

  // The caller's file and line when used as a default argument. Never throws.
  static constexpr CallSite here(const char* file = __builtin_FILE(),
                                 std::uint32_t line = __builtin_LINE()) noexcept {
    return CallSite{file, line};
  }
  bool known() const noexcept { return file != nullptr && *file != '\0'; }
};

// "train.cc:120": the file's last path component and the line; "" when not known. Never
// throws but std::bad_alloc.
std::string to_string(CallSite site);

// The file's last path component ("train.cc"); "" for null. Never throws.
const char* base_name(const char* file) noexcept;

}  // namespace replicator
