#include "apps/timeline_summary.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "replicator/errors.h"

namespace replicator::apps {
namespace {

using Json = nlohmann::json;

// The text as a JSON array; a file cut off before its closing bracket gets one.
Json parse_trace(const std::string& text, const std::string& source) {
  Json events = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (events.is_discarded()) {
    std::string closed = text;
    while (!closed.empty() &&
           (std::isspace(static_cast<unsigned char>(closed.back())) != 0 || closed.back() == ',')) {
      closed.pop_back();
    }
    events = Json::parse(closed + "]", nullptr, /*allow_exceptions=*/false);
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

}  // namespace

TimelineSummary summarize_timelines(const std::vector<std::string>& texts,
                                    const std::vector<std::string>& sources) {
  using Track = std::pair<int, int>;  // pid, tid
  std::map<Track, ReplicaTime> replicas;
  std::map<Track, std::pair<double, double>> bounds;  // first start, last end of collectives
  // (step, seq) -> each track's call.
  std::map<std::pair<std::int64_t, std::int64_t>, std::map<Track, Call>> calls;
  for (std::size_t f = 0; f < texts.size(); ++f) {
    const std::string source = f < sources.size() ? sources[f] : "timeline " + std::to_string(f);
    const Json events = parse_trace(texts[f], source);
    try {
      for (const Json& e : events) {
        if (!e.is_object() || !e.contains("pid") || !e.contains("tid")) continue;
        const Track track{e.value("pid", 0), e.value("tid", 0)};
        const std::string ph = e.value("ph", "");
        const std::string cat = e.value("cat", "");
        if (ph == "M" && e.value("name", "") == "thread_name") {
          if (e.contains("args") && e["args"].is_object()) {
            replicas[track].name = e["args"].value("name", "");
          }
          continue;
        }
        if (ph != "X" || !e.contains("ts") || !e.contains("dur")) continue;
        const double ts = e["ts"].get<double>();
        const double dur = e["dur"].get<double>();
        ReplicaTime& r = replicas[track];
        if (cat == "step") {
          r.span_us += dur;
        } else if (cat == "collective" && e.contains("args") && e["args"].is_object()) {
          const Json& args = e["args"];
          ++r.collectives;
          r.collective_us += dur;
          auto [it, fresh] = bounds.try_emplace(track, ts, ts + dur);
          if (!fresh) {
            it->second.first = std::min(it->second.first, ts);
            it->second.second = std::max(it->second.second, ts + dur);
          }
          calls[{args.value("step", std::int64_t{0}), args.value("seq", std::int64_t{0})}][track] =
              {ts, ts + dur};
        }
      }
    } catch (const Json::exception& error) {
      // A field of another type than the timeline writes (a string pid, a text ts).
      throw ConfigError(source +
                        " holds an event that is not as a timeline writes it: " + error.what());
    }
  }
  TimelineSummary summary;
  for (auto& [track, r] : replicas) {
    if (r.collectives == 0 && r.span_us == 0) continue;
    r.process = track.first;
    r.thread = track.second;
    if (r.name.empty()) {
      r.name = "process " + std::to_string(track.first) + " thread " + std::to_string(track.second);
    }
    if (r.span_us == 0 && bounds.contains(track)) {
      r.span_us = bounds[track].second - bounds[track].first;
    }
  }
  std::erase_if(replicas, [](const auto& kv) {
    return kv.second.collectives == 0 && kv.second.span_us == 0;
  });
  if (bounds.empty()) throw ConfigError("the timeline holds no collective");
  for (const auto& [key, tracks] : calls) {
    if (tracks.size() != bounds.size()) {
      ++summary.unmatched;
      continue;
    }
    ++summary.matched;
    double last_arrival = tracks.begin()->second.start;
    Track last = tracks.begin()->first;
    for (const auto& [track, call] : tracks) {
      if (call.start > last_arrival) {
        last_arrival = call.start;
        last = track;
      }
    }
    for (const auto& [track, call] : tracks) {
      ReplicaTime& r = replicas[track];
      r.waiting_us += std::clamp(last_arrival - call.start, 0.0, call.end - call.start);
    }
    ++replicas[last].last;
  }
  for (auto& [track, r] : replicas) summary.replicas.push_back(std::move(r));
  return summary;
}

}  // namespace replicator::apps
