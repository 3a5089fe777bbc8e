#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "replicator/errors.h"
#include "replicator/launch/diagnose.h"
#include "replicator/launch/elastic.h"
#include "replicator/launch/workers.h"
#include "replicator/rendezvous/store.h"
#include "src/base/launch_env.h"
#include "src/launch/common.h"

namespace replicator::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kKillGrace{2000};
constexpr milliseconds kDrainGrace{1000};
// How often the agent looks at its workers and at the store.
constexpr milliseconds kTick{100};

std::string gen(int g) { return "gen" + std::to_string(g); }

std::string seconds_text(milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

std::optional<long long> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str()) return std::nullopt;
  return value;
}

// A key some process rewrites while it lives; stale once its value stays the same too long.
struct Beat {
  std::optional<std::string> value;
  Clock::time_point changed;
  bool seen = false;

  // Reads `key`; returns how long the value has not changed.
  milliseconds look(rendezvous::Store& store, const std::string& key, Clock::time_point now) {
    auto current = store.get(key);
    if (current && (!seen || current != value)) {
      value = std::move(current);
      changed = now;
      seen = true;
    }
    return std::chrono::duration_cast<milliseconds>(now - changed);
  }
};

struct Membership {
  int generation = 0;
  int slot = 0;
  int members = 0;
  int restarts = 0;
};

enum class Outcome { kDone, kEnded, kInterrupted, kGaveUp };

class Agent {
 public:
  Agent(const ElasticOptions& options, const std::string& rdzv)
      : options_(options),
        url_(rendezvous::parse_store_url(rdzv)),
        store_(rendezvous::open_store(url_)),
        job_(rendezvous::root_name(url_)) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    describe_ = std::string(name) + " (agent pid " + std::to_string(getpid()) + ")";
  }

  int run();

 private:
  // Joins generations from `g` on until one takes this host in; nothing when the job is over.
  std::optional<Membership> rendezvous(int g);
  Outcome run_generation(const Membership& m);
  std::vector<std::string> worker_env(const Membership& m, int rank) const;
  void beat(const std::string& key, Clock::time_point now, bool force = false);
  // Ends generation g for every agent, unless it has ended already. `failure`: counts as
  // a restart.
  void end(int g, bool failure, const std::string& why);
  // REPLICATOR_TRACE_DIR/generation<g> when the agent has REPLICATOR_TRACE_DIR, else "".
  static std::string generation_dumps(int g);
  // What the dumps of generation g's processes tell (diagnose.h), if any: those written
  // since `since_unix_us` (when the generation began here), not those of an earlier run
  // of the job that used the same REPLICATOR_TRACE_DIR.
  static void say_verdict(int g, std::int64_t since_unix_us);
  std::optional<std::string> over() { return store_->get("over"); }
  // Whether the agents of generation g (its first `members` slots) have all been silent
  // for the heartbeat timeout, as watched through `beats` from the first look on.
  bool all_silent(int g, int members, std::map<int, Beat>& beats, Clock::time_point now);
  // Whether every member of generation g-1 (`previous_members` of them) has joined
  // generation g, whose first `joined` slots are taken.
  bool all_rejoined(int g, int previous_members, long long joined);

  const ElasticOptions& options_;
  const rendezvous::StoreUrl url_;
  std::unique_ptr<rendezvous::Store> store_;
  const std::string job_;
  std::string describe_;
  Workers workers_;
  std::uint64_t beats_ = 0;
  Clock::time_point next_beat_{};
  std::string end_reason_;
};

void Agent::beat(const std::string& key, Clock::time_point now, bool force) {
  if (!force && now < next_beat_) return;
  store_->put(key, std::to_string(++beats_));
  next_beat_ = now + options_.heartbeat;
}

void Agent::end(int g, bool failure, const std::string& why) {
  if (store_->create(gen(g) + "/end", (failure ? "failure " : "change ") + why)) {
    detail::say("generation " + std::to_string(g) + ": " + why);
  }
}

std::string Agent::generation_dumps(int g) {
  const char* dir = replicator::detail::env("REPLICATOR_TRACE_DIR");
  if (dir == nullptr || *dir == '\0') return {};
  return std::string(dir) + "/generation" + std::to_string(g);
}

void Agent::say_verdict(int g, std::int64_t since_unix_us) {
  const std::string dumps = generation_dumps(g);
  std::error_code error;
  if (dumps.empty() || !std::filesystem::is_directory(dumps, error)) return;
  try {
    detail::say("generation " + std::to_string(g) +
                ", from the dumps on this host: " + diagnose(dumps, since_unix_us).verdict);
  } catch (const ConfigError&) {
    // No dump: the workers ended without a collective error.
  }
}

bool Agent::all_silent(int g, int members, std::map<int, Beat>& beats, Clock::time_point now) {
  bool silent = members > 0;
  for (int s = 0; s < members; ++s) {
    auto [it, fresh] = beats.try_emplace(s);
    if (fresh) it->second.changed = now;
    const milliseconds quiet =
        it->second.look(*store_, gen(g) + "/agent/" + std::to_string(s), now);
    silent = silent && quiet >= options_.heartbeat_timeout;
  }
  return silent;
}

bool Agent::all_rejoined(int g, int previous_members, long long joined) {
  std::vector<std::string> present;
  for (long long s = 0; s < joined; ++s) {
    if (auto who = store_->get(gen(g) + "/member/" + std::to_string(s))) {
      present.push_back(std::move(*who));
    }
  }
  for (int s = 0; s < previous_members; ++s) {
    const auto who = store_->get(gen(g - 1) + "/member/" + std::to_string(s));
    if (!who || std::find(present.begin(), present.end(), *who) == present.end()) return false;
  }
  return true;
}

std::optional<Membership> Agent::rendezvous(int g) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (over()) return std::nullopt;
    const std::string base = gen(g);
    const int slot = static_cast<int>(store_->add(base + "/slots", 1) - 1);
    store_->put(base + "/member/" + std::to_string(slot),
                describe_ + " nproc " + std::to_string(options_.processes));
    const std::string my_beat = base + "/agent/" + std::to_string(slot);
    beat(my_beat, Clock::now(), true);
    Clock::time_point min_reached{};  // when MIN hosts had joined; epoch: not yet
    bool waiting_said = false;
    std::map<int, Beat> previous_agents;  // the agents of generation g-1, while it runs
    for (;;) {
      const Clock::time_point now = Clock::now();
      beat(my_beat, now);
      if (const auto closed = store_->get(base + "/closed")) {
        int members = 0;
        int restarts = 0;
        std::sscanf(closed->c_str(), "%d %d", &members, &restarts);
        if (slot < members) return Membership{g, slot, members, restarts};
        detail::say("generation " + std::to_string(g) + " started with " + std::to_string(members) +
                    (members == 1 ? " host" : " hosts") +
                    " without this one; this host joins the next");
        ++g;
        break;
      }
      if (over()) return std::nullopt;
      const long long count = number(store_->get(base + "/slots")).value_or(0);
      // A generation starts only once the one before has ended.
      const bool previous_ended = g == 0 || store_->get(gen(g - 1) + "/end").has_value();
      const auto previous = g == 0 ? std::nullopt : store_->get(gen(g - 1) + "/closed");
      int previous_members = 0;
      int previous_restarts = 0;
      if (previous) std::sscanf(previous->c_str(), "%d %d", &previous_members, &previous_restarts);
      if (previous && !previous_ended &&
          all_silent(g - 1, previous_members, previous_agents, now)) {
        // Every agent of the generation before is gone (killed with their hosts, say) and
        // none could end it: end it here, so that the job goes on.
        end(g - 1, true,
            "no agent of it answers (all silent for " + seconds_text(options_.heartbeat_timeout) +
                " or more)");
        continue;
      }
      if (count >= options_.min_hosts && previous_ended) {
        if (min_reached == Clock::time_point{}) min_reached = now;
        const bool all_back = previous && all_rejoined(g, previous_members, count);
        if (count >= options_.max_hosts || all_back || now - min_reached >= options_.last_call) {
          const int members = static_cast<int>(std::min<long long>(count, options_.max_hosts));
          int restarts = 0;
          if (g > 0) {
            const auto why = store_->get(gen(g - 1) + "/end");
            restarts = previous_restarts + (why && why->starts_with("failure") ? 1 : 0);
          }
          if (store_->create(base + "/closed",
                             std::to_string(members) + " " + std::to_string(restarts))) {
            store_->put("current", std::to_string(g));
            if (g > 0) store_->remove_tree(gen(g - 1));  // a fresh key space for each generation
          }
          continue;  // read what was decided
        }
      } else {
        min_reached = Clock::time_point{};
      }
      if (now - start >= options_.rdzv_timeout) {
        detail::say("only " + std::to_string(count) + " of at least " +
                    std::to_string(options_.min_hosts) + " hosts joined generation " +
                    std::to_string(g) + " within " + seconds_text(options_.rdzv_timeout) +
                    " (--rdzv-timeout); giving up");
        return std::nullopt;
      }
      if (!waiting_said && now - start >= std::chrono::seconds(5)) {
        detail::say("waiting for hosts to join generation " + std::to_string(g) + ": " +
                    std::to_string(count) + " of at least " + std::to_string(options_.min_hosts) +
                    (previous_ended ? "" : " (the generation before still runs)"));
        waiting_said = true;
      }
      workers_.pump(kTick);
      if (const int signal = workers_.interrupted()) {
        detail::say("interrupted by signal " + std::to_string(signal) + " while waiting to join");
        end_reason_ = "interrupted";
        return std::nullopt;
      }
    }
  }
}

std::vector<std::string> Agent::worker_env(const Membership& m, int rank) const {
  const std::string base = gen(m.generation);
  std::string store;
  std::string job;
  if (url_.redis) {
    const bool v6 = url_.host.find(':') != std::string::npos;
    store = "redis://" + (v6 ? "[" + url_.host + "]" : url_.host) + ":" + std::to_string(url_.port);
    job = url_.prefix + "/" + base + "/gloo";
  } else {
    store = "file://" + url_.folder + "/" + base + "/gloo";
    job = job_;
  }
  std::vector<std::pair<std::string, std::string>> ours = {
      {"REPLICATOR_ENGINE", "gloo"},
      {"REPLICATOR_RANK", std::to_string(rank)},
      {"REPLICATOR_WORLD_SIZE", std::to_string(m.members * options_.processes)},
      {"REPLICATOR_STORE", store},
      {"REPLICATOR_JOB", job},
      {"REPLICATOR_HOST_PROCESSES", std::to_string(options_.processes)},
      {"REPLICATOR_GENERATION", std::to_string(m.generation)},
      {"REPLICATOR_RESTART_COUNT", std::to_string(m.restarts)},
      {"REPLICATOR_HEARTBEAT", std::to_string(options_.heartbeat.count()) + "ms"},
      {"REPLICATOR_HEARTBEAT_STORE", store_->child(base)},
  };
  if (options_.local_replicas) {
    ours.emplace_back("REPLICATOR_LOCAL_REPLICAS", std::to_string(*options_.local_replicas));
  }
  if (!options_.host.empty()) ours.emplace_back("REPLICATOR_HOST", options_.host);
  // Each generation's flight-recorder dumps in a folder of its own, read when it ends.
  if (const std::string dumps = generation_dumps(m.generation); !dumps.empty()) {
    ours.emplace_back("REPLICATOR_TRACE_DIR", dumps);
  }
  return child_environment(ours);
}

Outcome Agent::run_generation(const Membership& m) {
  const int g = m.generation;
  // When the generation began here, less a second for the clocks of hosts that share the
  // dumps' folder.
  const std::int64_t began_unix_us =
      std::chrono::duration_cast<std::chrono::microseconds>(
          (std::chrono::system_clock::now() - std::chrono::seconds(1)).time_since_epoch())
          .count();
  const std::string base = gen(g);
  const int first = m.slot * options_.processes;
  detail::say("generation " + std::to_string(g) + ": " + std::to_string(m.members) + " host" +
              (m.members == 1 ? "" : "s") + ", " + std::to_string(m.members * options_.processes) +
              (m.members * options_.processes == 1 ? " process, ranks " : " processes, ranks ") +
              std::to_string(first) + "-" + std::to_string(first + options_.processes - 1) +
              " here; restarts so far " + std::to_string(m.restarts) + " of " +
              std::to_string(options_.max_restarts));
  for (int i = 0; i < options_.processes; ++i) {
    try {
      workers_.start(first + i, options_.command, worker_env(m, first + i));
    } catch (const Error& e) {
      end(g, true, "host " + describe_ + ": " + e.what());
      break;
    }
  }
  const std::string my_beat = base + "/agent/" + std::to_string(m.slot);
  std::map<int, Beat> worker_beats;  // by rank
  std::map<int, Beat> agent_beats;   // by slot
  const Clock::time_point started = Clock::now();
  for (int s = 0; s < m.members; ++s) {
    if (s != m.slot) agent_beats[s].changed = started;
  }
  for (int i = 0; i < options_.processes; ++i) worker_beats[first + i].changed = started;
  bool stopping = false;
  bool posted_finished = false;
  int exited_ok = 0;
  std::optional<Clock::time_point> drain_until;
  for (;;) {
    workers_.pump(kTick);
    const Clock::time_point now = Clock::now();
    beat(my_beat, now);
    for (const Workers::Exit& exit : workers_.take_exits()) {
      worker_beats.erase(exit.rank);
      if (Workers::failed(exit.status)) {
        end(g, true, Workers::describe(exit) + " on " + describe_);
      } else {
        ++exited_ok;
      }
    }
    if (const int signal = workers_.interrupted(); signal != 0 && end_reason_.empty()) {
      end_reason_ = "interrupted";
      end(g, true,
          "the agent on " + describe_ + " was interrupted by signal " + std::to_string(signal));
    }
    const auto ended = store_->get(base + "/end");
    if (ended && !stopping) {
      stopping = true;
      workers_.stop(kKillGrace);
    }
    if (stopping) {
      if (!workers_.any_running()) {
        if (!drain_until) drain_until = now + kDrainGrace;
        if (!workers_.any_open() || now >= *drain_until) {
          workers_.clear();
          say_verdict(g, began_unix_us);
          end_reason_ = end_reason_.empty() ? *ended : end_reason_;
          return end_reason_ == "interrupted" ? Outcome::kInterrupted : Outcome::kEnded;
        }
      }
      continue;
    }
    // The job is over: done, or another agent gave up.
    if (const auto result = over()) {
      workers_.stop(kKillGrace);
      while (workers_.any_running() || workers_.any_open()) workers_.pump(kTick);
      workers_.clear();
      return *result == "done" ? Outcome::kDone : Outcome::kGaveUp;
    }
    if (exited_ok == options_.processes && !posted_finished) {
      posted_finished = true;
      store_->add(base + "/finished", 1);
    }
    if (posted_finished && number(store_->get(base + "/finished")).value_or(0) >= m.members) {
      store_->create("over", "done");
      continue;
    }
    for (auto& [rank, b] : worker_beats) {
      const milliseconds silent = b.look(*store_, base + "/heartbeat/" + std::to_string(rank), now);
      if (b.seen && b.value != "stopped" && silent >= options_.heartbeat_timeout) {
        workers_.kill_rank(rank);
        end(g, true,
            "rank " + std::to_string(rank) + " on " + describe_ +
                " stopped making progress: no heartbeat for " + seconds_text(silent) +
                " (--heartbeat-timeout); killed it");
      }
    }
    for (auto& [slot, b] : agent_beats) {
      const milliseconds silent = b.look(*store_, base + "/agent/" + std::to_string(slot), now);
      if (silent >= options_.heartbeat_timeout) {
        const auto who = store_->get(base + "/member/" + std::to_string(slot));
        end(g, true,
            "the agent of host slot " + std::to_string(slot) + " (" + who.value_or("?") +
                ") stopped answering: no heartbeat for " + seconds_text(silent));
      }
    }
    if (m.members < options_.max_hosts &&
        number(store_->get(gen(g + 1) + "/slots")).value_or(0) > 0) {
      end(g, false,
          "a host asks to join (" + std::to_string(m.members) + " of at most " +
              std::to_string(options_.max_hosts) + " take part)");
    }
  }
}

int Agent::run() {
  if (const auto result = over()) {
    throw ConfigError("launch: the job in " + url_.text + " is over already (" + *result +
                      "); give a fresh --rdzv (another folder or job name)");
  }
  int g = 0;
  if (const auto current = number(store_->get("current"))) g = static_cast<int>(*current) + 1;
  for (;;) {
    const auto m = rendezvous(g);
    if (!m) {
      if (end_reason_ == "interrupted") return 128 + workers_.interrupted();
      const auto result = over();
      if (result && *result == "done") {
        detail::say("the job is done");
        return 0;
      }
      return 1;
    }
    const Outcome outcome = run_generation(*m);
    switch (outcome) {
      case Outcome::kDone:
        detail::say("the job is done (generation " + std::to_string(m->generation) + ", " +
                    std::to_string(m->restarts) + (m->restarts == 1 ? " restart)" : " restarts)"));
        return 0;
      case Outcome::kGaveUp:
        detail::say("another agent gave up: " + over().value_or("?"));
        return 1;
      case Outcome::kInterrupted:
        return 128 + workers_.interrupted();
      case Outcome::kEnded:
        break;
    }
    const bool failure = end_reason_.starts_with("failure");
    if (failure && m->restarts + 1 > options_.max_restarts) {
      const std::string why = end_reason_.substr(std::string("failure ").size());
      store_->create("over", "failed after " + std::to_string(m->restarts) + " restarts: " + why);
      detail::say("giving up after " + std::to_string(m->restarts) + " restarts (--max-restarts " +
                  std::to_string(options_.max_restarts) + "): " + why);
      return 1;
    }
    end_reason_.clear();
    g = m->generation + 1;
  }
}

}  // namespace

int run_elastic(const ElasticOptions& options) {
  detail::check_job(options.processes, options.local_replicas, options.command);
  if (options.min_hosts < 1 || options.max_hosts < options.min_hosts) {
    throw ConfigError("launch: --nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got " +
                      std::to_string(options.min_hosts) + ":" + std::to_string(options.max_hosts));
  }
  if (options.max_restarts < 0) {
    throw ConfigError("launch: --max-restarts must be at least 0, got " +
                      std::to_string(options.max_restarts));
  }
  if (options.heartbeat.count() < 1 || options.rdzv_timeout.count() < 1 ||
      options.last_call.count() < 0) {
    throw ConfigError(
        "launch: --heartbeat and --rdzv-timeout must be at least 1ms, and "
        "--last-call not negative");
  }
  if (options.heartbeat_timeout <= 2 * options.heartbeat) {
    throw ConfigError("launch: --heartbeat-timeout (" + seconds_text(options.heartbeat_timeout) +
                      ") must be more than twice --heartbeat (" + seconds_text(options.heartbeat) +
                      ")");
  }
  if (replicator::detail::launched_by_mpi()) {
    throw ConfigError(
        "launch: an elastic job runs on the gloo engine and restarts its own processes; it "
        "cannot run under mpirun or srun. Start `replicator launch --nnodes ...` directly, "
        "one per host");
  }
  if (const char* engine = replicator::detail::env("REPLICATOR_ENGINE");
      engine != nullptr && std::string_view(engine) != "gloo") {
    throw ConfigError(std::string("launch: REPLICATOR_ENGINE=") + engine +
                      " asks for another engine, but elastic jobs run on the gloo engine only "
                      "(mpirun cannot replace a lost process); unset it");
  }
  TempFolder temp;
  std::string rdzv = options.rdzv;
  if (rdzv.empty()) {
    if (options.max_hosts > 1) {
      throw ConfigError(
          "launch: a job over several hosts needs --rdzv, where their agents meet: "
          "file:///shared/folder/job (a folder every host sees) or redis://host:port/job");
    }
    temp.make();
    rdzv = "file://" + temp.path.string() + "/job";
  }
  Agent agent(options, rdzv);
  return agent.run();
}

std::pair<int, int> parse_host_range(const std::string& text) {
  const auto bad = [&] {
    return ConfigError("launch: --nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got '" + text +
                       "'");
  };
  const auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 6 ||
        part.find_first_not_of("0123456789") != std::string::npos) {
      throw bad();
    }
    return std::stoi(part);
  };
  const auto colon = text.find(':');
  const int min = number(text.substr(0, colon));
  const int max = colon == std::string::npos ? min : number(text.substr(colon + 1));
  if (min < 1 || max < min) throw bad();
  return {min, max};
}

}  // namespace replicator::launch
