// `replicator timeline`: where each replica's time went, from a job's timeline files
// (replicator/train/timeline_summary.h).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/command.h"
#include "replicator/errors.h"
#include "replicator/train/timeline_summary.h"

namespace replicator::apps {
namespace {

struct TimelineFlags {
  std::vector<std::string> files;
  bool json = false;
};

double percent(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

int run_timeline(const TimelineFlags& f) {
  std::vector<std::string> texts;
  for (const std::string& file : f.files) {
    std::ifstream in(file);
    if (!in) throw ConfigError("cannot read " + file);
    std::ostringstream text;
    text << in.rdbuf();
    texts.push_back(text.str());
  }
  const train::TimelineSummary s = train::summarize_timelines(texts, f.files);
  if (f.json) {
    for (const train::ReplicaTime& r : s.replicas) {
      nlohmann::json j{{"type", "replica"},
                       {"replica", r.name},
                       {"process", r.process},
                       {"thread", r.thread},
                       {"span_us", r.span_us},
                       {"collectives", r.collectives},
                       {"collective_us", r.collective_us},
                       {"matched_us", r.matched_us},
                       {"waiting_us", r.waiting_us},
                       {"last_to_arrive", r.last},
                       {"matched", s.matched},
                       {"unmatched", s.unmatched}};
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }
  std::set<int> processes;
  for (const train::ReplicaTime& r : s.replicas) processes.insert(r.process);
  std::printf(
      "# %zu replica%s in %zu process%s; %lld collectives made by every replica "
      "(matched by step and sequence number)%s\n",
      s.replicas.size(), s.replicas.size() == 1 ? "" : "s", processes.size(),
      processes.size() == 1 ? "" : "es", static_cast<long long>(s.matched),
      s.unmatched > 0 ? (", " + std::to_string(s.unmatched) + " not made by every replica").c_str()
                      : "");
  std::printf("%-22s %10s %11s %14s %9s %9s %12s %14s\n", "replica", "span_s", "collectives",
              "in_collectives", "waiting", "rest", "rest/call_us", "last_to_arrive");
  for (const train::ReplicaTime& r : s.replicas) {
    const double rest = r.matched_us - r.waiting_us;
    std::printf("%-22s %10.3f %11lld %13.1f%% %8.1f%% %8.1f%% %12.2f %13.0f%%\n", r.name.c_str(),
                r.span_us * 1e-6, static_cast<long long>(r.collectives),
                percent(r.collective_us, r.span_us), percent(r.waiting_us, r.span_us),
                percent(rest, r.span_us),
                s.matched > 0 ? rest / static_cast<double>(s.matched) : 0.0,
                percent(static_cast<double>(r.last), static_cast<double>(s.matched)));
  }
  std::printf(
      "# in_collectives: share of the replica's time inside collectives; waiting: of that, "
      "from its arrival to the last replica's (what uneven work between collectives costs); "
      "rest: the collectives themselves once every replica is there; last_to_arrive: share "
      "of the collectives at which it alone came last (waiting, rest and last_to_arrive count "
      "the collectives every replica made)\n");
  return 0;
}

}  // namespace

Command add_timeline(CLI::App& app) {
  auto flags = std::make_shared<TimelineFlags>();
  CLI::App* timeline = app.add_subcommand(
      "timeline",
      "Where each replica's time went, from a job's timeline files (REPLICATOR_TIMELINE): "
      "time in collectives, waiting for the other replicas, who came last");
  timeline
      ->add_option("files", flags->files,
                   "The job's timeline files, one per process (run.json, or run.rank*.json)")
      ->required()
      ->check(CLI::ExistingFile);
  timeline->add_flag("--json", flags->json, "One JSON object per replica");
  return {timeline, [flags] { return run_timeline(*flags); }};
}

}  // namespace replicator::apps
