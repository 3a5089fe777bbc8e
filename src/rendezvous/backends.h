// The two kinds of rendezvous store behind replicator::rendezvous::Store, and what they share.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "replicator/rendezvous/store.h"

namespace replicator::rendezvous::detail {

// Whether `text` is a root or key: names of [A-Za-z0-9._-] joined by '/', none empty, "."
// or "..". Never throws.
bool valid_path(std::string_view text) noexcept;

// `key` when valid_path(key); otherwise throws InvalidArgument naming it.
const std::string& checked_key(const std::string& key);

// What an errno value says.
std::string errno_text(int error);

// Opens a store on a folder (file_store.cc) or on Redis (redis_store.cc): see open_store.
std::unique_ptr<Store> open_file_store(const StoreUrl& url);
std::unique_ptr<Store> open_redis_store(const StoreUrl& url);

}  // namespace replicator::rendezvous::detail
