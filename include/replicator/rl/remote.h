// Actors in other processes and hosts (IMPALA's and PolyBeast's remote actors over gRPC).
//
// Each learner process runs a LearnerServer beside its trajectory queue and parameter store.
// A remote actor process holds a RemoteLearner: it asks the learner what to play (Hello),
// then pumps parameters from the learner into a local ParameterStore and unrolls from a
// local TrajectoryQueue to the learner, so that the same rl::Actor plays in a thread of the
// learner or in a process of its own: one actor, two ways to reach the queue.
//
// - Flow control: an actor sends the unrolls it has ready in one message and keeps at most
//   16 unanswered; the server answers a message once its unrolls are in its queue. A full
//   queue pushes back on the stream and, through the actor's local queue, on the actor.
// - A message's unrolls are all checked before any is inserted; an unroll goes in whole or
//   not at all, never twice (nothing is re-sent). An actor that dies loses the unrolls in flight;
//   the learner goes on with the others. A restarted actor says hello again and is fed the newest
//   parameters.
// - Every call but the insert stream has a deadline; keepalive pings break a stream to a
//   learner that is gone. An actor that cannot reach its learner retries with backoff and,
//   past its timeout, throws PeerLost naming the learner's address.
// No LibTorch: parameters travel as the flat floats ParameterStore holds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "replicator/rl/env.h"
#include "replicator/rl/parameter_store.h"
#include "replicator/rl/trajectory_queue.h"
#include "replicator/rl/unroll.h"

namespace replicator::rl {

// What a learner tells an actor to play, and the actor's id.
struct ActorAssignment {
  int actor = 0;  // seeds its environments (Actor's id)
  std::string env;
  int envs = 0;    // M
  int unroll = 0;  // T
  int hidden = 0;  // the policy network's width
  std::uint64_t seed = 0;
  int learner_rank = 0;
  int observation_size = 0;
  int num_actions = 0;
  // For "gym:<id>" environments: the env servers (host:port) the actor's environments live
  // in (make_remote_env); empty otherwise.
  std::vector<std::string> env_servers;
};

struct LearnerServerOptions {
  // host:port to listen on; port 0 takes a free one (port() tells which).
  std::string address = "0.0.0.0:0";
  ActorAssignment play;  // its `actor` is ignored: ids come from next_actor below
  int next_actor = 0;    // the id given to the first actor that asks for any
  // Called for each episode an actor reports and the frames it played (from the server's
  // threads, concurrently): the learner's EpisodeLog and ActorCounters.
  std::function<void(double episode_return, std::int32_t length)> on_episode;
  std::function<void(std::int64_t frames)> on_frames;
};

// One actor as the server sees it (summed over its connections).
struct RemoteActorStats {
  int actor = 0;
  std::string peer;           // its newest connection's address
  std::int64_t unrolls = 0;   // unrolls it acknowledged: queued, or counted after finish()
  std::int64_t frames = 0;    // frames it reported
  std::int64_t episodes = 0;  // episodes it reported
  int streams = 0;            // insert streams opened (1 + reconnects)
  int broken_streams = 0;     // streams that ended without the actor closing them
  int open_streams = 0;       // of those, open now
  double seconds = 0;         // since its first hello
};

struct LearnerServerStats {
  std::vector<RemoteActorStats> actors;  // by id
  std::int64_t unrolls = 0;              // taken into the queue, all actors
  std::int64_t after_finish = 0;         // received after finish(), counted and dropped
  std::int64_t rejected = 0;             // malformed unrolls (their stream was ended)
  int hellos = 0;
};

// The address learner process `rank` of a job listens on when the job's learners are given
// `listen` (host:port): the same host, port + rank, so that the processes of one host do not
// collide; port 0 stays 0 (each takes a free one; LearnerServer::address() tells which).
// Pure. Throws InvalidArgument for an address without a port, a port outside [0, 65535], a
// rank below 0 or a port + rank past 65535.
std::string listen_address(const std::string& listen, int rank);

class LearnerServer {
 public:
  // Starts serving `store` and `queue` (which must outlive the server). Does not block.
  // Throws InvalidArgument for an assignment without env or sizes, ConfigError when the
  // address cannot be bound.
  LearnerServer(LearnerServerOptions options, const ParameterStore& store,
                TrajectoryQueue<Unroll>& queue);
  // Stops serving (finish() with no grace, if not done). Blocks until the calls in flight end.
  ~LearnerServer();
  LearnerServer(const LearnerServer&) = delete;
  LearnerServer& operator=(const LearnerServer&) = delete;

  int port() const;             // the port bound
  std::string address() const;  // host:port as bound

  // BLOCKS until `n` distinct actors joined (said hello, or streamed unrolls: an actor that
  // stayed through a restart of its learner says no new hello) or `timeout` passed; returns
  // how many did. Never throws.
  int wait_for_actors(int n, std::chrono::milliseconds timeout) const;

  // The learner is done: parameter polls answer `finished` and unrolls that still come are
  // counted, not queued. BLOCKS up to `grace` for the open streams to be closed by their
  // actors, then stops serving. Idempotent; never throws.
  void finish(std::chrono::milliseconds grace);

  // A consistent copy of the counts. Thread-safe; allocates.
  LearnerServerStats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct RemoteLearnerOptions {
  std::string address;  // the learner's host:port
  int actor = -1;       // the id to ask for; -1: the learner gives one
  // How long the learner may stay unreachable (no call succeeding) before the actor gives up.
  std::chrono::milliseconds timeout{30'000};
  std::chrono::milliseconds call_timeout{5'000};  // deadline of each call
  std::chrono::milliseconds poll_wait{500};       // how long a parameter poll may wait
};

// What a remote actor has done.
struct RemoteActorCounts {
  std::int64_t sent = 0;          // unrolls written to a stream
  std::int64_t acknowledged = 0;  // unrolls the learner said it took (streams closed cleanly)
  std::int64_t lost = 0;          // written to a stream that broke, or held when it broke
  int reconnects = 0;             // streams opened after the first
  std::int64_t versions = 0;      // parameter versions received
};

// The actor's side of the connection to one learner process.
class RemoteLearner {
 public:
  // Connects and says hello. BLOCKS, retrying with backoff, until the learner answers or
  // options.timeout passes: then throws PeerLost naming the address. InvalidArgument for an
  // address without ':'; InvalidArgument for a hello the learner refuses.
  explicit RemoteLearner(RemoteLearnerOptions options);
  ~RemoteLearner();
  RemoteLearner(const RemoteLearner&) = delete;
  RemoteLearner& operator=(const RemoteLearner&) = delete;

  const ActorAssignment& assignment() const;

  // What pump() reports with each unroll: the episodes finished and the frames played since
  // the last call. Called from pump()'s thread.
  struct Report {
    std::vector<std::pair<double, std::int32_t>> episodes;  // return, length
    std::int64_t frames = 0;
  };

  // BLOCKS: publishes the learner's newest parameters into `store` (from a thread of its
  // own) and streams the unrolls sampled from `queue` to the learner, each with report(),
  // until the learner says it has finished (returns normally, after closing the stream
  // cleanly), `stop` is set (the same), or the learner stays unreachable past the timeout
  // (throws PeerLost naming it). A broken stream loses what was in flight (counted) and is
  // opened again. The stream has no deadline of its own: a learner that holds it (a full
  // queue) holds the pump, until the learner finishes, the stream breaks, or `stop`; at the
  // end a stream that does not close within a call's deadline is cancelled. Throws DataError
  // for parameters that are not whole floats, what `report` throws, and what `queue` throws
  // except its Timeout.
  void pump(ParameterStore& store, TrajectoryQueue<Unroll>& queue,
            const std::function<Report()>& report, const std::atomic<bool>& stop);

  RemoteActorCounts counts() const;  // thread-safe

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A batch of `num_envs` environments living in an environment server at `address`
// (python/env_server.py, PolyBeast's model), with the batched environments' contract (env.h):
// gymnasium id `env` ("CartPole-v1", "ALE/Pong-v5" with Atari's standard preprocessing), the
// environments' seeds derived from `seed` (numpy's SeedSequence: independent streams), already
// reset; name() is "gym:" + env. Images arrive as bytes and become floats in [0, 1]. Unlike
// the C++ environments, reset() and step() BLOCK for one call each, with deadline `timeout`,
// and throw PeerLost naming the server when it fails or is gone, DataError for a malformed
// reply. Waits up to `timeout` for the server to answer at first. Throws InvalidArgument for
// an address without ':' or an id the server cannot make, PeerLost for a server that does not
// answer, DataError for a malformed reply.
std::unique_ptr<BatchedEnv> make_remote_env(
    const std::string& address, const std::string& env, int num_envs, std::uint64_t seed,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(60'000));

// Where a job's environments come from, by the name a user gives: "gym:<id>" names gymnasium
// environment <id> in the env servers `servers` (host:port each): the factory makes actor a's
// environments in servers[a % servers.size()] with make_remote_env (and blocks and throws as
// it does). Any other name is a C++ game: the factory is empty, and make_actor_env (env.h)
// or an Actor makes make_env's. Does not connect or block. Throws InvalidArgument for a
// "gym:" name without an id or without servers, naming python/env_server.py.
EnvFactory env_factory(const std::string& env, const std::vector<std::string>& servers);

}  // namespace replicator::rl
