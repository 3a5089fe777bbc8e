// What every fuzz target shares: the libFuzzer entry point each one defines, and `require`,
// the check of a promise beyond "no crash" (a broken one aborts, which libFuzzer reports as a
// crash and saves the input; replay_main.cc names the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace replicator::fuzz {

// Aborts with `what` (a sentence naming the broken promise) unless `ok`.
inline void require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: broken promise: %s\n", what.c_str());
  std::abort();
}

}  // namespace replicator::fuzz
