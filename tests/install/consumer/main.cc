// Runs 4 replicas and checks an all_reduce and a gather through the installed headers and
// libraries. Exit 0 when the results are right.
#include <replicator/replicator.h>

#include <cstdio>
#include <vector>

int main() {
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
  const bool ok = sums[0] == 13.0 && sums[1] == 10.0 && sums[3] == 10.0;
  std::printf("consumer: %s\n", ok ? "ok" : "wrong results");
  return ok ? 0 : 1;
}
