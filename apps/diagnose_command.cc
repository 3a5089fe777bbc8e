// `replicator diagnose DIR`: one verdict for a job from its processes' flight-recorder dumps
// (replicator/launch/diagnose.h).
#include <cstdio>
#include <memory>
#include <string>

#include "apps/command.h"
#include "replicator/launch/diagnose.h"

namespace replicator::apps {
namespace {

struct DiagnoseFlags {
  std::string dir;
  bool json = false;
};

int run_diagnose(const DiagnoseFlags& f) {
  const launch::Diagnosis d = launch::diagnose(f.dir);
  for (const std::string& skipped : d.skipped)
    std::fprintf(stderr, "skipped %s\n", skipped.c_str());
  if (f.json) {
    std::printf("%s\n", d.json.c_str());
    return 0;
  }
  std::printf("verdict: %s\n", d.verdict.c_str());
  for (const std::string& line : d.lines) std::printf("  %s\n", line.c_str());
  return 0;
}

}  // namespace

Command add_diagnose(CLI::App& app) {
  auto flags = std::make_shared<DiagnoseFlags>();
  CLI::App* diagnose = app.add_subcommand(
      "diagnose", "What happened to a job, from the flight-recorder dumps in REPLICATOR_TRACE_DIR");
  diagnose->add_option("dir", flags->dir, "The folder of the dumps (flight_recorder.*.json)")
      ->required();
  diagnose->add_flag("--json", flags->json, "One JSON object, for tools");
  return {diagnose, [flags] { return run_diagnose(*flags); }};
}

}  // namespace replicator::apps
