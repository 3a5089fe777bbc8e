// Values in messages: what the parsers of the configuration and the store URL show of the
// text they reject.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace replicator::detail {

// `text` in single quotes, each control byte (NUL, newline, escape...) written as \xNN, so a
// bad value shown in an error message can neither cut it short (what() ends at a NUL) nor
// garble the terminal. Never throws but std::bad_alloc.
std::string quoted(std::string_view text);

// Whether `text` holds a control byte (below 0x20, or 0x7f).
bool has_control(std::string_view text);

// Replica ids (in increasing order) as messages say them: "replica 3", "replicas 0-1",
// "replicas 0-1, 3"; "no replica" for none. Never throws but std::bad_alloc.
std::string replicas_text(const std::vector<int>& ids);

}  // namespace replicator::detail
