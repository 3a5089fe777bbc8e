// A program a user would write against the installed package. `consumer` runs 4 replicas and
// checks an all_reduce and a gather through the installed headers and libraries; then runs
// itself as the 2 workers of an elastic job through the launch layer's API, whose first
// generation fails on purpose, and checks that the agent restarted it and the job finished.
// Exit 0 when every result is right.
#include <replicator/launch/elastic.h>
#include <replicator/replicator.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

bool collectives() {
  replicator::Config config;
  config.local_replicas = 4;
  replicator::Replicator repl(config);
  const auto sums = repl.run([](replicator::ReplicaContext& ctx) {
    std::vector<double> v(1000, ctx.replica_id() + 1.0);
    ctx.all_reduce(v);
    std::vector<double> mine(2, ctx.replica_id()), all(ctx.replica_id() == 0 ? 8 : 0);
    ctx.gather(mine, all);
    return v[999] + (all.empty() ? 0.0 : all[7]);
  });
  // 1 + 2 + 3 + 4 = 10 everywhere, and replica 0 also holds replica 3's value last.
  return sums[0] == 13.0 && sums[1] == 10.0 && sums[3] == 10.0;
}

// A worker of the elastic job: rank 1 of the first generation fails; the others leave a
// file naming their rank and generation in `folder`.
int worker(const std::string& folder) {
  const char* rank = std::getenv("REPLICATOR_RANK");
  const char* generation = std::getenv("REPLICATOR_GENERATION");
  if (rank == nullptr || generation == nullptr) return 3;
  if (std::strcmp(generation, "0") == 0 && std::strcmp(rank, "1") == 0) return 4;
  const std::string name = folder + "/rank" + rank + ".gen" + generation;
  std::FILE* f = std::fopen(name.c_str(), "w");
  if (f == nullptr) return 5;
  std::fclose(f);
  return 0;
}

bool elastic(const char* self) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / "replicator-consumer-elastic";
  fs::remove_all(folder);
  fs::create_directories(folder);
  replicator::launch::ElasticOptions options;
  options.processes = 2;
  options.max_restarts = 1;
  options.last_call = std::chrono::milliseconds(0);
  options.rdzv = "file://" + (folder / "rdzv" / "job").string();
  options.command = {self, "worker", folder.string()};
  const int rc = replicator::launch::run_elastic(options);
  const bool ok = rc == 0 && fs::exists(folder / "rank0.gen1") && fs::exists(folder / "rank1.gen1");
  fs::remove_all(folder);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "worker") return worker(argv[2]);
  const bool ok_collectives = collectives();
  std::printf("consumer: collectives %s\n", ok_collectives ? "ok" : "wrong results");
  const bool ok_elastic = elastic(argv[0]);
  std::printf("consumer: elastic job %s\n",
              ok_elastic ? "restarted once and finished" : "did not finish as it should");
  return ok_collectives && ok_elastic ? 0 : 1;
}
