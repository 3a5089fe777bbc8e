// The flags `replicator eval real` and `replicator eval gan` share: how the CAS is trained.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "apps/eval/gan_quality.h"

namespace replicator::apps {

// --cas (with `cas_help`), --cas-epochs and --cas-augment into `o`.
inline void add_cas_flags(CLI::App* app, EvalOptions& o, const std::string& cas_help) {
  app->add_flag("--cas", o.cas, cas_help);
  app->add_option("--cas-epochs", o.cas_training.epochs, "Epochs of each CAS classifier")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app->add_flag("--cas-augment", o.cas_training.augment,
                "Train the CAS classifiers with the train job's random flips and shifts");
}

// Says on stderr, before the minutes it takes, that the CAS's two classifiers are trained
// (`what`: whose CAS); nothing without --cas.
inline void announce_cas(const EvalOptions& o, const char* what) {
  if (!o.cas) return;
  std::fprintf(stderr, "training 2 classifiers for the CAS%s (%d epochs each%s)...\n", what,
               o.cas_training.epochs, o.cas_training.augment ? ", augmented" : "");
}

}  // namespace replicator::apps
