#include "replicator/launch/diagnose.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <tuple>

#include "replicator/errors.h"
#include "src/base/text.h"

namespace replicator::launch {
namespace {

using nlohmann::json;

// A replica's latest collective in a dump.
struct Last {
  std::uint64_t step = 0;
  std::uint64_t seq = 0;
  std::string op;
  std::string at;  // call site, or empty
  std::string state;

  std::pair<std::uint64_t, std::uint64_t> where() const { return {step, seq}; }
  bool waiting() const { return state == "issued" || state == "in_progress"; }
  // "all_reduce #1 at train.cc:120 (step 2)"
  std::string call() const {
    return op + " #" + std::to_string(seq) + (at.empty() ? "" : " at " + at) + " (step " +
           std::to_string(step) + ")";
  }
};

struct Dump {
  std::string name;
  int rank = 0;
  int processes = 1;
  int local = 1;
  long pid = 0;
  double time_us = 0;
  std::string reason;
  std::string error;
  std::map<int, std::optional<Last>> replicas;  // by global id
};

std::optional<Dump> parse_dump(const std::string& text, const std::string& name, std::string& why) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != "replicator-flight-recorder") {
    why = "not a flight-recorder dump";
    return std::nullopt;
  }
  try {
    Dump d;
    d.name = name;
    d.rank = j.at("rank").get<int>();
    d.processes = j.at("processes").get<int>();
    d.local = j.at("local_replicas").get<int>();
    d.pid = j.value("pid", 0L);
    d.time_us = j.value("unix_time_us", 0.0);
    d.reason = j.value("reason", "");
    d.error = j.value("error", "");
    if (d.processes < 1 || d.local < 1 || d.rank < 0 || d.rank >= d.processes) {
      why = "rank, processes or local_replicas out of range";
      return std::nullopt;
    }
    for (const json& r : j.at("replicas")) {
      std::optional<Last> last;
      const json& entries = r.at("entries");
      if (!entries.empty()) {
        const json& e = entries.back();
        last = Last{.step = e.at("step").get<std::uint64_t>(),
                    .seq = e.at("seq").get<std::uint64_t>(),
                    .op = e.at("op").get<std::string>(),
                    .at = e.value("at", ""),
                    .state = e.at("state").get<std::string>()};
      }
      d.replicas[r.at("replica").get<int>()] = last;
    }
    return d;
  } catch (const json::exception& e) {
    why = std::string("malformed: ") + e.what();
    return std::nullopt;
  }
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// What one replica's dump says of it.
std::string describe(const std::optional<Last>& last, bool have_dump) {
  if (!have_dump) return "no dump from its process (killed or stopped before it could write one)";
  if (!last) return "no collective recorded";
  if (last->waiting()) return "waiting at " + last->call() + ", " + last->state;
  if (last->state == "failed") return "failed at " + last->call();
  return "last " + last->call() + ", done";
}

json last_json(const std::optional<Last>& last) {
  if (!last) return nullptr;
  return json{{"step", last->step},
              {"seq", last->seq},
              {"op", last->op},
              {"at", last->at},
              {"state", last->state}};
}

struct View {
  int replica = 0;
  int process = 0;
  bool have_dump = false;
  std::optional<Last> last;
};

std::string verdict_of(const std::vector<View>& views, const std::vector<Dump>& dumps,
                       const std::vector<int>& no_dump, std::vector<int>& first,
                       std::vector<int>& waited, std::optional<Last>& front) {
  for (const View& v : views) {
    if (v.last && (!front || v.last->where() > front->where())) front = v.last;
  }
  for (const Dump& d : dumps) {
    if (d.reason == "CollectiveMismatch") {
      return "replicas called different collectives: " + first_line(d.error);
    }
  }
  std::optional<std::pair<std::uint64_t, std::uint64_t>> behind;
  for (const View& v : views) {
    if (!v.have_dump) continue;
    if (front && v.last && v.last->where() == front->where() && v.last->state != "done") {
      waited.push_back(v.replica);
      continue;
    }
    const auto at = v.last ? v.last->where() : std::make_pair<std::uint64_t, std::uint64_t>(0, 0);
    if (front && at < front->where() && (!behind || at < *behind)) behind = at;
  }
  for (const View& v : views) {
    if (!v.have_dump || !behind) continue;
    const auto at = v.last ? v.last->where() : std::make_pair<std::uint64_t, std::uint64_t>(0, 0);
    if (at == *behind) first.push_back(v.replica);
  }
  const std::string waiting =
      waited.empty() || !front
          ? ""
          : "; " + replicator::detail::replicas_text(waited) + " waited at " + front->call();
  if (!first.empty()) {
    const View& v = views[static_cast<std::size_t>(first.front())];
    return replicator::detail::replicas_text(first) +
           " fell behind first: " + describe(v.last, true) + waiting;
  }
  if (!no_dump.empty()) {
    std::string processes;
    for (const int q : no_dump) processes += (processes.empty() ? "" : ", ") + std::to_string(q);
    return std::string(no_dump.size() == 1 ? "process " : "processes ") + processes +
           " wrote no dump (killed or stopped before it could)" + waiting;
  }
  for (const Dump& d : dumps) {
    if (!d.error.empty()) {
      return "no replica fell behind; process " + std::to_string(d.rank) + " says " + d.reason +
             ": " + first_line(d.error);
    }
  }
  return front ? "no replica fell behind: every one is at " + front->call()
               : "no replica has issued a collective";
}

}  // namespace

Diagnosis diagnose_dumps(const std::vector<std::string>& texts,
                         const std::vector<std::string>& names, std::int64_t since_unix_us) {
  Diagnosis out;
  std::map<int, Dump> latest;  // by rank: its latest dump speaks for it
  for (std::size_t i = 0; i < texts.size(); ++i) {
    std::string why;
    std::optional<Dump> d = parse_dump(texts[i], names[i], why);
    if (!d) {
      out.skipped.push_back(names[i] + ": " + why);
      continue;
    }
    if (d->time_us < static_cast<double>(since_unix_us)) {
      out.skipped.push_back(names[i] + ": written before " + std::to_string(since_unix_us) +
                            " us since 1970 (another run)");
      continue;
    }
    const auto it = latest.find(d->rank);
    if (it == latest.end() ||
        std::tie(d->time_us, d->name) > std::tie(it->second.time_us, it->second.name)) {
      latest[d->rank] = std::move(*d);
    }
  }
  if (latest.empty()) {
    throw ConfigError(since_unix_us == 0 ? "no flight-recorder dump among the files given"
                                         : "no flight-recorder dump written since " +
                                               std::to_string(since_unix_us) +
                                               " us since 1970 among the files given");
  }
  std::vector<Dump> dumps;
  int processes = 1;
  int local = 1;
  for (auto& [rank, d] : latest) {
    processes = std::max(processes, d.processes);
    local = d.local;
    dumps.push_back(std::move(d));
  }
  std::vector<View> views;
  std::vector<int> no_dump;
  for (int q = 0; q < processes; ++q) {
    const auto d =
        std::find_if(dumps.begin(), dumps.end(), [&](const Dump& x) { return x.rank == q; });
    if (d == dumps.end()) no_dump.push_back(q);
    for (int l = 0; l < local; ++l) {
      View v{.replica = q * local + l, .process = q, .have_dump = d != dumps.end()};
      if (v.have_dump) {
        const auto r = d->replicas.find(v.replica);
        if (r != d->replicas.end()) v.last = r->second;
      }
      views.push_back(v);
    }
  }
  std::vector<int> first;
  std::vector<int> waited;
  std::optional<Last> front;
  out.verdict = verdict_of(views, dumps, no_dump, first, waited, front);

  json replicas = json::array();
  for (std::size_t i = 0; i < views.size();) {
    const View& v = views[i];
    const std::string said = describe(v.last, v.have_dump);
    std::size_t j = i;
    while (j + 1 < views.size() && views[j + 1].process == v.process &&
           describe(views[j + 1].last, views[j + 1].have_dump) == said) {
      ++j;
    }
    std::vector<int> ids;
    for (std::size_t k = i; k <= j; ++k) ids.push_back(views[k].replica);
    const auto d = std::find_if(dumps.begin(), dumps.end(),
                                [&](const Dump& x) { return x.rank == v.process; });
    const std::string pid = d != dumps.end() ? ", pid " + std::to_string(d->pid) : "";
    std::string line = replicator::detail::replicas_text(ids);
    line += " (process " + std::to_string(v.process);
    line += pid;
    line += "): ";
    line += said;
    out.lines.push_back(std::move(line));
    i = j + 1;
  }
  for (const View& v : views) {
    replicas.push_back(json{{"replica", v.replica},
                            {"process", v.process},
                            {"dump", v.have_dump},
                            {"last", last_json(v.last)}});
  }
  json errors = json::array();
  json files = json::array();
  for (const Dump& d : dumps) {
    if (!d.error.empty()) {
      out.lines.push_back("process " + std::to_string(d.rank) + ": " + d.reason + ": " +
                          first_line(d.error));
    }
    errors.push_back(json{{"process", d.rank}, {"reason", d.reason}, {"error", d.error}});
    files.push_back(d.name);
  }
  std::string names_read;
  for (const Dump& d : dumps) names_read += (names_read.empty() ? "" : ", ") + d.name;
  out.lines.push_back("dumps read: " + names_read);
  out.json = json{{"verdict", out.verdict}, {"processes", processes}, {"local_replicas", local},
                  {"first", first},         {"waited", waited},       {"front", last_json(front)},
                  {"no_dump", no_dump},     {"replicas", replicas},   {"errors", errors},
                  {"files", files}}
                 .dump();
  return out;
}

Diagnosis diagnose(const std::string& dir, std::int64_t since_unix_us) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) throw ConfigError("cannot read the folder " + dir + ": " + error.message());
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with("flight_recorder.") &&
        name.ends_with(".json")) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    throw ConfigError("no flight-recorder dump (flight_recorder.*.json) in " + dir +
                      "; a job writes them to REPLICATOR_TRACE_DIR when run() fails, and on "
                      "SIGUSR1");
  }
  std::vector<std::string> texts;
  for (const std::string& name : names) {
    std::ifstream in(fs::path(dir) / name);
    std::ostringstream text;
    text << in.rdbuf();
    texts.push_back(text.str());
  }
  return diagnose_dumps(texts, names, since_unix_us);
}

}  // namespace replicator::launch
