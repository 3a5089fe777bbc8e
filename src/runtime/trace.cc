#include "src/runtime/trace.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "replicator/errors.h"
#include "src/runtime/signal_dump.h"
#include "src/runtime/straggler.h"

namespace replicator::detail {
namespace {

// "replica 3" or "replicas 2-3".
std::string replicas_text(int first, int count) {
  if (count == 1) return "replica " + std::to_string(first);
  return "replicas " + std::to_string(first) + "-" + std::to_string(first + count - 1);
}

std::string error_kind(const std::exception& e) {
  if (dynamic_cast<const Timeout*>(&e)) return "Timeout";
  if (dynamic_cast<const CollectiveMismatch*>(&e)) return "CollectiveMismatch";
  if (dynamic_cast<const PeerLost*>(&e)) return "PeerLost";
  if (dynamic_cast<const Aborted*>(&e)) return "Aborted";
  return "";
}

// The same error with `message`.
std::exception_ptr remade(const std::exception& e, const std::string& message) {
  std::exception_ptr out;
  std::optional<int> replica;
  if (const auto* error = dynamic_cast<const Error*>(&e)) replica = error->replica();
  const auto keep_replica = [&](auto error) {
    if (replica) error.set_replica(*replica);
    return std::make_exception_ptr(std::move(error));
  };
  if (const auto* t = dynamic_cast<const Timeout*>(&e)) {
    return keep_replica(Timeout(message, t->op(), t->sequence(), t->deadline(), t->missing()));
  }
  if (const auto* m = dynamic_cast<const CollectiveMismatch*>(&e)) {
    return keep_replica(CollectiveMismatch(message, m->sequence(), m->calls()));
  }
  if (const auto* p = dynamic_cast<const PeerLost*>(&e)) {
    return keep_replica(PeerLost(message, p->peer()));
  }
  if (const auto* a = dynamic_cast<const Aborted*>(&e)) {
    return keep_replica(Aborted(message, a->cause_replica()));
  }
  return nullptr;
}

std::atomic<std::uint64_t> dumps_written{0};

}  // namespace

Tracer::Tracer(const Config& config, int rank, int processes, int num_local)
    : rank_(rank), processes_(processes), num_local_(num_local), trace_dir_(config.trace.dir) {
  if (!trace_dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(trace_dir_, ec);
    if (ec || access(trace_dir_.c_str(), W_OK | X_OK) != 0) {
      const std::string why = (ec ? ec : std::error_code(errno, std::generic_category())).message();
      throw ConfigError("trace dir '" + trace_dir_ + "' cannot be created or written: " + why +
                        " (REPLICATOR_TRACE_DIR names a folder for flight-recorder dumps)");
    }
  }
  std::vector<TimelineLane*> lanes;
  if (!config.trace.timeline.empty()) {
    timeline_ =
        std::make_unique<Timeline>(Timeline::path_for(config.trace.timeline, rank, processes), rank,
                                   rank * num_local, num_local);
    for (int l = 0; l < num_local; ++l) lanes.push_back(timeline_->lane(l));
  }
  recorders_ = std::make_unique<FlightRecorders>(
      rank * num_local, num_local, static_cast<std::size_t>(config.trace.flight_recorder_size),
      lanes);
  if (config.trace.signal) {
    signal_ = std::make_unique<SignalDump>([this] { dump_on_signal(); });
  }
  if (config.straggler_limit().count() > 0 && config.trace.flight_recorder_size > 0) {
    // Only processes of a real job share a board: several Replicators of one process (the
    // tests' in-memory transport) would all be one pid.
    const bool board = processes > 1 && config.engine != Engine::kLocal;
    straggler_ = std::make_unique<StragglerWatch>(
        *recorders_,
        StragglerOptions{.limit = config.straggler_limit(),
                         .rank = rank,
                         .processes = processes,
                         .num_local = num_local,
                         .board = board ? status_board(config.gloo.job, config.gloo.store,
                                                       config.elastic.generation)
                                        : "",
                         .timeline = timeline_.get()});
  }
}

Tracer::~Tracer() {
  straggler_.reset();  // no watch reads the recorders after this
  signal_.reset();     // no dump reads the recorders after this
  recorders_.reset();  // nothing writes to the timeline after this
  timeline_.reset();
}

std::string Tracer::json(std::string_view reason, std::string_view error,
                         const std::vector<std::string>& summary) const {
  using namespace std::chrono;
  const std::int64_t unix_now =
      duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
  const std::int64_t steady_now =
      duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
  const std::int64_t offset = unix_now - steady_now;
  std::string out = "{\"format\": \"replicator-flight-recorder\", \"version\": 1, \"reason\": " +
                    json_string(reason) + ", \"error\": " + json_string(error) +
                    ", \"rank\": " + std::to_string(rank_) +
                    ", \"processes\": " + std::to_string(processes_) +
                    ", \"local_replicas\": " + std::to_string(num_local_) +
                    ", \"pid\": " + std::to_string(getpid()) +
                    ", \"unix_time_us\": " + json_micros(unix_now) + ",\n \"summary\": [";
  for (std::size_t i = 0; i < summary.size(); ++i) {
    out += (i ? ",\n  " : "\n  ") + json_string(summary[i]);
  }
  out += "],\n \"replicas\": [";
  for (int l = 0; l < recorders_->size(); ++l) {
    const FlightRecorder& r = (*recorders_)[l];
    out += std::string(l ? "," : "") + "\n  {\"replica\": " + std::to_string(r.replica()) +
           ", \"capacity\": " + std::to_string(r.capacity()) +
           ", \"recorded\": " + std::to_string(r.recorded()) +
           ", \"step\": " + std::to_string(r.step()) + ", \"entries\": [";
    const std::vector<CallRecord> records = r.records();
    for (std::size_t i = 0; i < records.size(); ++i) {
      const CallRecord& c = records[i];
      const bool ended = c.state == CallState::kDone || c.state == CallState::kFailed;
      out += std::string(i ? "," : "") + "\n   {\"step\": " + std::to_string(c.step) +
             ", \"seq\": " + std::to_string(c.sequence) + ", \"op\": " + json_string(c.op) +
             ", \"dtype\": " + json_string(to_string(c.dtype)) +
             ", \"count\": " + std::to_string(c.count) + ", \"bytes\": " + std::to_string(c.bytes) +
             ", \"state\": " + json_string(to_string(c.state)) +
             ", \"start_unix_us\": " + json_micros(c.start_ns + offset) +
             ", \"end_unix_us\": " + (ended ? json_micros(c.end_ns + offset) : "null") +
             ", \"duration_us\": " + json_micros((ended ? c.end_ns : steady_now) - c.start_ns) +
             (c.where.known() ? ", \"at\": " + json_string(to_string(c.where)) : "") + "}";
    }
    out += "]}";
  }
  return out + "]}\n";
}

std::string Tracer::write_dump(const std::string& json) const {
  const std::uint64_t n = dumps_written.fetch_add(1) + 1;
  const std::string name = "flight_recorder.rank" + std::to_string(rank_) + ".pid" +
                           std::to_string(getpid()) + "." + std::to_string(n) + ".json";
  std::string path = (std::filesystem::path(trace_dir_) / name).string();
  const std::string temporary =
      (std::filesystem::path(trace_dir_) / ("." + name + ".tmp")).string();
  std::FILE* f = std::fopen(temporary.c_str(), "w");
  if (!f) throw std::system_error(errno, std::generic_category(), "cannot create " + temporary);
  const bool written = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(temporary.c_str());
    throw std::system_error(written ? errno : write_errno, std::generic_category(),
                            "cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(temporary.c_str());
    throw std::system_error(e, std::generic_category(), "cannot rename to " + path);
  }
  return path;
}

Tracer::Notes Tracer::notes(const std::exception& e) const {
  const int first = rank_ * num_local_;
  const int total = processes_ * num_local_;
  const auto is_local = [&](int id) { return id >= first && id < first + num_local_; };
  const auto process_of = [&](int id) { return id / num_local_; };
  std::map<int, std::string> said;  // by replica id: what the error tells of it
  if (const auto* t = dynamic_cast<const Timeout*>(&e)) {
    for (const int id : t->missing()) {
      said[id] = "never arrived at " + t->op() + " #" + std::to_string(t->sequence()) + " within " +
                 std::to_string(t->deadline().count()) + " ms";
    }
  } else if (const auto* p = dynamic_cast<const PeerLost*>(&e)) {
    for (int l = 0; l < num_local_; ++l) {
      said[p->peer() * num_local_ + l] = "lost: its process died or its connection broke";
    }
  } else if (const auto* a = dynamic_cast<const Aborted*>(&e)) {
    if (a->cause_replica())
      said[*a->cause_replica()] = "failed first; its failure released the others";
  } else if (const auto* m = dynamic_cast<const CollectiveMismatch*>(&e)) {
    if (static_cast<int>(m->calls().size()) == total) {
      for (int id = 0; id < total; ++id) {
        said[id] = "called " + m->calls()[static_cast<std::size_t>(id)] + " (collective #" +
                   std::to_string(m->sequence()) + ")";
      }
    }
  }
  Notes notes;
  std::vector<std::string>& lines = notes.remote;
  // Runs of replicas of one process that the error says the same of share a line.
  int unknown_first = -1;
  int unknown_count = 0;
  const auto flush_unknown = [&] {
    if (unknown_count == 0) return;
    const int p0 = process_of(unknown_first);
    const int p1 = process_of(unknown_first + unknown_count - 1);
    lines.push_back(replicas_text(unknown_first, unknown_count) + " (process" +
                    (p0 == p1 ? " " + std::to_string(p0)
                              : "es " + std::to_string(p0) + "-" + std::to_string(p1)) +
                    "): no record in this process (each process dumps its own)");
    unknown_count = 0;
  };
  for (int id = 0; id < total;) {
    if (is_local(id)) {
      flush_unknown();
      id = first + num_local_;
      continue;
    }
    const auto it = said.find(id);
    if (it == said.end()) {
      if (unknown_count == 0) unknown_first = id;
      ++unknown_count;
      ++id;
      continue;
    }
    flush_unknown();
    int n = 1;
    while (id + n < total && process_of(id + n) == process_of(id) && said.count(id + n) &&
           said.at(id + n) == it->second) {
      ++n;
    }
    lines.push_back(replicas_text(id, n) + " (process " + std::to_string(process_of(id)) +
                    "): " + it->second);
    id += n;
  }
  flush_unknown();
  for (auto& [id, text] : said) {
    if (is_local(id)) notes.local[id - first] = text;
  }
  return notes;
}

std::exception_ptr Tracer::with_summary(const std::exception& e) {
  const std::string kind = error_kind(e);
  if (kind.empty()) return nullptr;
  std::vector<std::string> local =
      recorders_->failure_lines().value_or(recorders_->summary_lines());
  const Notes told = notes(e);
  for (const auto& [l, text] : told.local) local[static_cast<std::size_t>(l)] += "; " + text;
  std::vector<std::string> lines = std::move(local);
  lines.insert(lines.end(), told.remote.begin(), told.remote.end());
  std::string where;
  if (!trace_dir_.empty()) {
    try {
      where = "; full record in " + write_dump(json(kind, e.what(), lines));
    } catch (const std::exception& failed) {
      where = "; the full record could not be written: " + std::string(failed.what());
    }
  }
  std::string message = std::string(e.what()) +
                        "\nflight recorder (each replica's latest collective when the first "
                        "one failed" +
                        where + "):";
  for (const std::string& line : lines) message += "\n  " + line;
  return remade(e, message);
}

void Tracer::dump_on_signal() {
  const std::string text = json("SIGUSR1", "", recorders_->summary_lines());
  if (!trace_dir_.empty()) {
    try {
      const std::string path = write_dump(text);
      std::fprintf(stderr, "replicator: flight recorder of process %d written to %s\n", rank_,
                   path.c_str());
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "replicator: flight recorder of process %d: %s; here instead:\n", rank_,
                   e.what());
    }
  }
  const std::string out =
      "replicator: flight recorder of process " + std::to_string(rank_) + " (SIGUSR1):\n" + text;
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
}

}  // namespace replicator::detail
