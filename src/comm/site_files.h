// The files of call sites as 32-bit names, for the frame headers that carry a call site to
// other processes, and the way back from a name to a file this process has called from.
// Processes of one job run the same program (or programs built from the same sources), so
// the file a peer names is almost always one this process has called from too.
#pragma once

#include <cstdint>
#include <string>

#include "replicator/call_site.h"

namespace replicator::detail {

// The name of `file` (a hash of its last path component, never 0), remembered so that
// file_of() can turn it back; 0 for null. Thread-safe; never blocks but on the first call
// from a file, briefly; never throws.
std::uint32_t file_id(const char* file) noexcept;

// The file named `id` if this process has called from it (file_id), else null. Thread-safe.
const char* file_of(std::uint32_t id) noexcept;

// " at train.cc:120" for a site sent as (file id, line); " at line 120 of a file this process
// never called from" when the id is not known here; "" when there is no site.
std::string site_suffix(std::uint32_t file, std::uint32_t line);
// " at train.cc:120", or "" when `site` is not known.
std::string site_suffix(CallSite site);

}  // namespace replicator::detail
