#include "replicator/train/timeline_summary.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "replicator/errors.h"

namespace replicator::train {
namespace {

using Json = nlohmann::json;
using Track = std::pair<int, int>;  // pid, tid

// `text` without trailing white space and commas, closed with a bracket.
std::string closed(std::string text) {
  while (!text.empty() &&
         (std::isspace(static_cast<unsigned char>(text.back())) != 0 || text.back() == ',')) {
    text.pop_back();
  }
  return text + "]";
}

// The text as a JSON array. A file whose job was killed may lack its closing bracket, and
// may end in half a line (a chunk the writer had not finished): that line is dropped.
Json parse_trace(const std::string& text, const std::string& source) {
  Json events = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (events.is_discarded()) events = Json::parse(closed(text), nullptr, false);
  if (events.is_discarded()) {
    const std::size_t last_line = text.find_last_of('\n');
    if (last_line != std::string::npos) {
      events = Json::parse(closed(text.substr(0, last_line)), nullptr, false);
    }
  }
  if (events.is_discarded() || !events.is_array()) {
    throw ConfigError(source + " is not a timeline (a JSON array of trace events)");
  }
  return events;
}

struct Call {
  double start = 0;
  double end = 0;
};

struct Tally {
  std::map<Track, ReplicaTime> replicas;
  std::map<Track, std::string> source_of;             // the file each track came from
  std::map<Track, std::pair<double, double>> bounds;  // first start, last end of collectives
  // (step, seq) -> each track's call.
  std::map<std::pair<std::int64_t, std::int64_t>, std::map<Track, Call>> calls;
};

// One event of `source` into `t`; throws ConfigError where a track shows up in two files
// or repeats a call, and nlohmann::json's errors where a field has another type.
void add_event(const Json& e, const std::string& source, Tally& t) {
  if (!e.is_object() || !e.contains("pid") || !e.contains("tid")) return;
  const Track track{e.value("pid", 0), e.value("tid", 0)};
  const auto [at, fresh] = t.source_of.try_emplace(track, source);
  if (!fresh && at->second != source) {
    throw ConfigError("process " + std::to_string(track.first) + " thread " +
                      std::to_string(track.second) + " is in both " + at->second + " and " +
                      source + ": pass each process's timeline of one run once");
  }
  const std::string ph = e.value("ph", "");
  const std::string cat = e.value("cat", "");
  if (ph == "M" && e.value("name", "") == "thread_name") {
    if (e.contains("args") && e["args"].is_object()) {
      t.replicas[track].name = e["args"].value("name", "");
    }
    return;
  }
  if (ph != "X" || !e.contains("ts") || !e.contains("dur")) return;
  const double ts = e["ts"].get<double>();
  const double dur = std::max(0.0, e["dur"].get<double>());
  ReplicaTime& r = t.replicas[track];
  if (cat == "step") {
    r.span_us += dur;
    return;
  }
  if (cat != "collective" || !e.contains("args") || !e["args"].is_object()) return;
  const Json& args = e["args"];
  if (!args.contains("step") || !args.contains("seq")) return;
  const std::pair<std::int64_t, std::int64_t> key{args["step"].get<std::int64_t>(),
                                                  args["seq"].get<std::int64_t>()};
  if (!t.calls[key].try_emplace(track, Call{ts, ts + dur}).second) {
    throw ConfigError(source + " holds step " + std::to_string(key.first) + "'s collective " +
                      std::to_string(key.second) + " of process " + std::to_string(track.first) +
                      " thread " + std::to_string(track.second) +
                      " twice: pass each process's timeline of one run once");
  }
  ++r.collectives;
  r.collective_us += dur;
  auto [bound, first] = t.bounds.try_emplace(track, ts, ts + dur);
  if (!first) {
    bound->second.first = std::min(bound->second.first, ts);
    bound->second.second = std::max(bound->second.second, ts + dur);
  }
}

}  // namespace

TimelineSummary summarize_timelines(const std::vector<std::string>& texts,
                                    const std::vector<std::string>& sources) {
  Tally t;
  std::string names;
  for (std::size_t f = 0; f < texts.size(); ++f) {
    const std::string source = f < sources.size() ? sources[f] : "timeline " + std::to_string(f);
    names += (names.empty() ? "" : ", ") + source;
    const Json events = parse_trace(texts[f], source);
    try {
      for (const Json& e : events) add_event(e, source, t);
    } catch (const Json::exception& error) {
      // A field of another type than the timeline writes (a string pid, a text ts).
      throw ConfigError(source +
                        " holds an event that is not as a timeline writes it: " + error.what());
    }
  }
  if (t.bounds.empty()) {
    throw ConfigError("no collective in " + names +
                      " (files a job wrote with REPLICATOR_TIMELINE set hold every collective "
                      "its replicas made)");
  }
  TimelineSummary summary;
  for (const auto& [key, tracks] : t.calls) {
    if (tracks.size() != t.bounds.size()) {
      ++summary.unmatched;
      continue;
    }
    ++summary.matched;
    double last_arrival = tracks.begin()->second.start;
    for (const auto& [track, call] : tracks) last_arrival = std::max(last_arrival, call.start);
    int last_ones = 0;
    const Track* last = nullptr;
    for (const auto& [track, call] : tracks) {
      ReplicaTime& r = t.replicas[track];
      r.waiting_us += std::max(0.0, std::min(last_arrival - call.start, call.end - call.start));
      r.matched_us += call.end - call.start;
      if (call.start == last_arrival) {
        ++last_ones;
        last = &track;
      }
    }
    if (last_ones == 1) ++t.replicas[*last].last;  // a tie credits no one
  }
  for (auto& [track, r] : t.replicas) {
    if (!t.bounds.contains(track)) continue;  // steps without collectives: not a replica's
    r.process = track.first;
    r.thread = track.second;
    if (r.name.empty()) {
      r.name = "process " + std::to_string(track.first) + " thread " + std::to_string(track.second);
    }
    if (r.span_us == 0) r.span_us = t.bounds[track].second - t.bounds[track].first;
    summary.replicas.push_back(std::move(r));
  }
  return summary;
}

}  // namespace replicator::train
