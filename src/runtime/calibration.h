// The job's calibration: what its transport, its engine's own all-reduce and this host's
// reductions cost, measured at start by every process together (tens of milliseconds) and
// kept in a file for a day, so that the chooser (src/collectives/plan.h) picks algorithms
// from this machine's figures on this day rather than from limits found on another. Every
// process plans with process 0's figures, so all of them pick the same algorithm.
//
// Measured only where a choice depends on it: two processes of one canonical subtree each
// whose engine has its own all-reduce (gathered through the transport or the engine's own;
// see choose_all_reduce). Elsewhere the costs stay zero and the chooser keeps its fixed
// limits.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "src/collectives/across/across.h"

namespace replicator::detail {

// How long a kept calibration stays good.
inline constexpr std::chrono::hours kCalibrationLifetime{24};

// What tells one job's calibration from another's: the engine, its traits, the layout and
// this host. Never throws but std::bad_alloc.
std::string calibration_key(const ProcessLayout& layout);

// The file that keeps the calibration of `key` in `folder` (Config::calibration; empty:
// $XDG_CACHE_HOME/replicator, else $HOME/.cache/replicator): calibration-<hash of key>.txt.
// Empty where `folder` is "off" or empty with neither variable set. Never throws but
// std::bad_alloc.
std::string calibration_path(const std::string& folder, const std::string& key);

// A calibration as the text of its file, and back: nullopt where `text` is not one, holds
// another key, a figure that is not finite and >= 0, or was measured more than
// kCalibrationLifetime before `now` (or after it). Pure; never throws but std::bad_alloc.
std::string format_calibration(const std::string& key, const TransportCosts& costs,
                               std::chrono::system_clock::time_point measured);
std::optional<TransportCosts> parse_calibration(std::string_view text, const std::string& key,
                                                std::chrono::system_clock::time_point now);

struct Calibration {
  TransportCosts costs;   // zero where nothing was measured
  bool measured = false;  // measured now (else read from `path`, or not needed)
  std::string path;       // the file kept (process 0; empty: none)
};

// Whether `layout` has a choice the calibration decides (see above). Pure.
bool needs_calibration(const ProcessLayout& layout);

// Collective over every process of `layout` (each calls it once, with the same `folder`):
// where needs_calibration(), process 0 reads the kept calibration; if there is none, or it
// is stale, every process measures (lane 0, at each of kCostBytes from 64 B to 64 MiB: an
// exchange between every pair, in one message and in the pipelined plan's steps, the
// engine's own all-reduce, and a reduction; about a second between two processes of one
// host), and process 0 keeps its figures. Process 0's
// figures then reach every process. A file that cannot be written is skipped. Blocks for the
// exchanges; throws what Transport::exchange throws (Timeout past `timeout` for each, PeerLost,
// Aborted) and what the engine's own all-reduce throws. `largest` shortens the measurement (a
// test's, where what is measured matters less than how it is kept and shared): sizes past it
// are not measured, and take the times of the largest one measured, scaled by bytes.
Calibration calibrate(const ProcessLayout& layout, const std::string& folder,
                      std::chrono::milliseconds timeout, std::size_t largest = kCostBytes.back());

}  // namespace replicator::detail
