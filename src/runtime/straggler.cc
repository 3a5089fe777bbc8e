#include "src/runtime/straggler.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "src/base/launch_env.h"
#include "src/base/text.h"

namespace replicator::detail {
namespace {

using Clock = FlightRecorder::Clock;

bool running(CallState state) {
  return state == CallState::kIssued || state == CallState::kInProgress;
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// Fields of one line are separated by spaces: in a site or op, '%', spaces and line breaks
// are written as %25, %20 and %0A; "-" is the empty text.
std::string no_spaces(const std::string& text) {
  if (text.empty()) return "-";
  std::string out;
  for (const char c : text) {
    if (c == '%') {
      out += "%25";
    } else if (c == ' ') {
      out += "%20";
    } else if (c == '\n') {
      out += "%0A";
    } else {
      out += c;
    }
  }
  return out;
}
std::string with_spaces(const std::string& text) {
  if (text == "-") return {};
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const std::string code = text.substr(i + 1, 2);
      out += code == "20" ? ' ' : code == "0A" ? '\n' : '%';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// "replica 2" or "replicas 2-3".
std::string range_of(int first, int last) {
  std::vector<int> ids;
  for (int r = first; r <= last; ++r) ids.push_back(r);
  return replicas_text(ids);
}

std::string ago(std::int64_t from_ns, std::int64_t to_ns) {
  return human_duration(std::chrono::nanoseconds(std::max<std::int64_t>(to_ns - from_ns, 0)));
}

// "barrier #40 at train.cc:118".
std::string call_of(const ReplicaStatus& r) {
  return r.op + " #" + std::to_string(r.sequence) + (r.site.empty() ? "" : " at " + r.site);
}

// What a replica that has not arrived is doing, as of `now`; `state` is its process's
// ("alive", "stopped", "gone", or where it cannot be seen, empty).
std::string doing(const ReplicaStatus& r, const std::string& state, std::int64_t now) {
  if (!r.any) return "no collective yet";
  const bool alive = state.empty() || state == "alive";
  switch (r.state) {
    case CallState::kIssued:
    case CallState::kInProgress:
      return "waiting at " + call_of(r) + " for " + ago(r.start_unix_ns, now);
    case CallState::kFailed:
      return "failed at " + call_of(r);
    case CallState::kDone:
      break;
  }
  if (alive)
    return "in compute for " + ago(r.end_unix_ns, now) + " since its collective " + call_of(r);
  return "last " + call_of(r) + ", done " + ago(r.end_unix_ns, now) + " ago";
}

// Whether `r` has arrived at the collective (step, sequence) that `target` waits at.
bool arrived(const ReplicaStatus& r, const CallRecord& target) {
  return r.any && running(r.state) && r.step == target.step && r.sequence == target.sequence;
}

// What the line says of one replica that has not arrived: its id, what it is doing, its last
// collective.
struct Said {
  int replica = 0;
  std::string doing;
  std::string last_call;
};

// Runs of consecutive replicas that `said` says the same of, each with `process`'s fields.
void add_runs(const std::vector<Said>& said, const MissingRun& process,
              std::vector<MissingRun>& runs) {
  for (std::size_t i = 0; i < said.size();) {
    std::size_t j = i;
    while (j + 1 < said.size() && said[j + 1].doing == said[i].doing &&
           said[j + 1].replica == said[j].replica + 1) {
      ++j;
    }
    MissingRun run = process;
    run.first = said[i].replica;
    run.last = said[j].replica;
    run.doing = said[i].doing;
    run.last_call = said[i].last_call;
    runs.push_back(std::move(run));
    i = j + 1;
  }
}

// What the watch says of replica status `s`, which has not arrived.
Said said_of(const ReplicaStatus& s, const std::string& state, std::int64_t now) {
  return {
      .replica = s.replica, .doing = doing(s, state, now), .last_call = s.any ? call_of(s) : ""};
}

// The line for replicas `waiting` of this process, waiting at `r` for `waited`.
std::string line_of(const CallRecord& r, const std::vector<int>& waiting,
                    std::chrono::nanoseconds waited, const std::vector<MissingRun>& missing) {
  std::string line = "replicator: " + replicas_text(waiting);
  line += waiting.size() > 1 ? " have waited " : " has waited ";
  line += human_duration(waited) + " at " + std::string(r.op) + " #" + std::to_string(r.sequence);
  if (r.where.known()) line += " at " + to_string(r.where);
  line += " for ";
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const MissingRun& m = missing[i];
    if (i) line += "; ";
    if (m.state == "not visible") {
      line += "process " + std::to_string(m.process) + " (" + range_of(m.first, m.last) +
              "): not visible from this host";
    } else {
      line += range_of(m.first, m.last) + " (" + m.where + "): " + m.doing;
    }
  }
  return line;
}

std::uint64_t fnv(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string status_text(const ProcessStatus& s) {
  std::string out = "replicator-status 1\nrank " + std::to_string(s.rank) + "\npid " +
                    std::to_string(s.pid) + "\nhost " + no_spaces(s.host) + "\nwritten " +
                    std::to_string(s.written_unix_ns) + "\n";
  for (const ReplicaStatus& r : s.replicas) {
    out += "replica " + std::to_string(r.replica) + " " + (r.any ? "1" : "0") + " " +
           std::to_string(r.step) + " " + std::to_string(r.sequence) + " " +
           std::to_string(static_cast<int>(r.state)) + " " + std::to_string(r.start_unix_ns) + " " +
           std::to_string(r.end_unix_ns) + " " + no_spaces(r.site) + " " + no_spaces(r.op) + "\n";
  }
  return out;
}

std::optional<ProcessStatus> parse_status(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  int version = 0;
  if (!(in >> word >> version) || word != "replicator-status" || version != 1) return {};
  ProcessStatus s;
  std::string key;
  if (!(in >> key >> s.rank) || key != "rank") return {};
  if (!(in >> key >> s.pid) || key != "pid") return {};
  if (!(in >> key >> s.host) || key != "host") return {};
  if (!(in >> key >> s.written_unix_ns) || key != "written") return {};
  while (in >> key) {
    if (key != "replica") return {};
    ReplicaStatus r;
    int any = 0;
    int state = 0;
    if (!(in >> r.replica >> any >> r.step >> r.sequence >> state >> r.start_unix_ns >>
          r.end_unix_ns >> r.site >> r.op)) {
      return {};
    }
    if (state < 0 || state > static_cast<int>(CallState::kFailed)) return {};
    r.any = any != 0;
    r.state = static_cast<CallState>(state);
    r.site = with_spaces(r.site);
    r.op = with_spaces(r.op);
    s.replicas.push_back(std::move(r));
  }
  s.host = with_spaces(s.host);
  return s;
}

std::string process_state(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return "gone";
  // pid (comm) state ...: comm may hold spaces and parentheses; the state follows the last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return "alive";
  const char state = stat[close + 2];
  if (state == 'T' || state == 't') return "stopped";
  if (state == 'Z' || state == 'X' || state == 'x') return "gone";
  return "alive";
}

std::string status_board(const std::string& job, const std::string& store, int generation) {
  std::string launch = store + "\n" + std::to_string(generation);
  for (const char* var : {"REPLICATOR_STORE", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                          "OMPI_MCA_orte_ess_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID"}) {
    if (const char* value = env(var)) launch += std::string("\n") + var + "=" + value;
  }
  std::error_code error;
  std::filesystem::path dir = "/dev/shm";
  if (!std::filesystem::is_directory(dir, error)) {
    dir = std::filesystem::temp_directory_path(error);
    if (error) dir = "/tmp";
  }
  std::string name = job;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  char hash[20];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv(launch)));
  return (dir / ("replicator-status-" + std::to_string(::getuid()) + "-" + name + "-" + hash))
      .string();
}

StragglerWatch::StragglerWatch(const FlightRecorders& recorders, StragglerOptions options)
    : recorders_(recorders), options_(std::move(options)), host_(hostname()) {
  thread_ = std::thread([this] { loop(); });
}

StragglerWatch::~StragglerWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (!options_.board.empty()) {
    std::error_code ignored;
    std::filesystem::remove(options_.board + ".rank" + std::to_string(options_.rank), ignored);
  }
}

void StragglerWatch::loop() {
  using std::chrono::milliseconds;
  const milliseconds period =
      std::clamp<milliseconds>(options_.limit / 4, milliseconds(10), milliseconds(500));
  // The first look at once: it publishes this process's status, so that a process stopped
  // before its first period is seen by the others as stopped, not as not visible.
  std::unique_lock lock(mu_);
  do {
    lock.unlock();
    try {
      check(Clock::now());
    } catch (...) {
      // Out of memory, or the board unwritable: the watch is advice; the job goes on.
    }
    lock.lock();
  } while (!cv_.wait_for(lock, period, [this] { return stop_; }));
}

ProcessStatus StragglerWatch::my_status(std::int64_t unix_offset_ns) const {
  ProcessStatus s{.rank = options_.rank, .pid = static_cast<long>(::getpid()), .host = host_};
  for (int l = 0; l < recorders_.size(); ++l) {
    ReplicaStatus r{.replica = recorders_[l].replica()};
    if (const std::optional<CallRecord> c = recorders_[l].last()) {
      r.any = true;
      r.step = c->step;
      r.sequence = c->sequence;
      r.state = c->state;
      r.op = std::string(c->op);
      r.site = to_string(c->where);
      r.start_unix_ns = c->start_ns + unix_offset_ns;
      r.end_unix_ns = c->end_ns == 0 ? 0 : c->end_ns + unix_offset_ns;
    }
    s.replicas.push_back(std::move(r));
  }
  return s;
}

void StragglerWatch::publish(const ProcessStatus& status) {
  ProcessStatus unstamped = status;
  unstamped.written_unix_ns = 0;
  std::string text = status_text(unstamped);
  if (text == published_) return;
  published_ = std::move(text);
  const std::string path = options_.board + ".rank" + std::to_string(options_.rank);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << status_text(status);
    if (!out) return;
  }
  std::error_code ignored;
  std::filesystem::rename(temporary, path, ignored);
}

void StragglerWatch::check(Clock::time_point now) {
  using namespace std::chrono;
  const std::int64_t now_unix =
      duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
  const std::int64_t offset = now_unix - duration_cast<nanoseconds>(now.time_since_epoch()).count();
  const ProcessStatus mine = my_status(offset);
  if (!options_.board.empty()) publish(mine);
  // The first local replica that has waited `limit` at a collective.
  std::optional<CallRecord> target;
  for (int l = 0; l < recorders_.size() && !target; ++l) {
    const std::optional<CallRecord> r = recorders_[l].last();
    if (r && running(r->state) &&
        now.time_since_epoch() - nanoseconds(r->start_ns) >= options_.limit) {
      target = r;
    }
  }
  if (!target) return;
  const auto key = std::make_pair(target->step, target->sequence);
  if (reported_ == key) return;
  std::vector<int> waiting;
  for (const ReplicaStatus& r : mine.replicas) {
    if (arrived(r, *target)) waiting.push_back(r.replica);
  }
  const std::vector<MissingRun> missing = missing_at(*target, mine, now_unix);
  if (missing.empty()) return;
  reported_ = key;
  const nanoseconds waited = now.time_since_epoch() - nanoseconds(target->start_ns);
  const std::string line = line_of(*target, waiting, waited, missing);
  if (options_.timeline) mark(*target, waiting, waited, missing, line, now);
  if (options_.print) {
    options_.print(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
}

std::vector<MissingRun> StragglerWatch::missing_at(const CallRecord& r, const ProcessStatus& mine,
                                                   std::int64_t now_unix) const {
  std::vector<MissingRun> runs;
  std::vector<Said> said;
  for (const ReplicaStatus& s : mine.replicas) {
    if (!arrived(s, r)) said.push_back(said_of(s, "", now_unix));
  }
  add_runs(said,
           {.process = options_.rank, .pid = mine.pid, .state = "alive", .where = "this process"},
           runs);
  for (int q = 0; q < options_.processes; ++q) {
    if (q == options_.rank) continue;
    std::optional<ProcessStatus> theirs;
    if (!options_.board.empty()) {
      std::ifstream in(options_.board + ".rank" + std::to_string(q));
      std::stringstream text;
      text << in.rdbuf();
      if (in) theirs = parse_status(text.str());
    }
    if (!theirs) {
      const int first = q * options_.num_local;
      runs.push_back({.first = first,
                      .last = first + options_.num_local - 1,
                      .process = q,
                      .state = "not visible"});
      continue;
    }
    const bool here = theirs->host == host_;
    const std::string state = here ? process_state(theirs->pid) : std::string();
    const std::string where = "process " + std::to_string(q) + ", pid " +
                              std::to_string(theirs->pid) +
                              (here ? ", " + state : ", on " + theirs->host);
    said.clear();
    for (const ReplicaStatus& s : theirs->replicas) {
      if (!arrived(s, r)) said.push_back(said_of(s, state, now_unix));
    }
    add_runs(said,
             {.process = q,
              .pid = theirs->pid,
              .state = here ? state : "on another host",
              .where = where},
             runs);
  }
  return runs;
}

void StragglerWatch::mark(const CallRecord& r, const std::vector<int>& waiting,
                          std::chrono::nanoseconds waited, const std::vector<MissingRun>& missing,
                          const std::string& line, Clock::time_point now) const {
  std::string args = R"({"op":)" + json_string(r.op) + R"(,"step":)" + std::to_string(r.step) +
                     R"(,"seq":)" + std::to_string(r.sequence);
  if (r.where.known()) args += R"(,"at":)" + json_string(to_string(r.where));
  args += R"(,"waited_us":)" + json_micros(waited.count()) + R"(,"missing":[)";
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const MissingRun& m = missing[i];
    args += std::string(i ? "," : "") + R"({"replicas":)" + json_string(range_of(m.first, m.last)) +
            R"(,"process":)" + std::to_string(m.process) + R"(,"state":)" + json_string(m.state);
    if (m.pid != 0) args += R"(,"pid":)" + std::to_string(m.pid);
    if (!m.last_call.empty()) args += R"(,"last":)" + json_string(m.last_call);
    if (!m.doing.empty()) args += R"(,"doing":)" + json_string(m.doing);
    args += "}";
  }
  args += R"(],"line":)" + json_string(line) + "}";
  const std::int64_t at =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  for (const int replica : waiting)
    options_.timeline->mark(replica, "straggler", "straggler", at, args);
}

}  // namespace replicator::detail
