#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "learner.grpc.pb.h"
#include "replicator/errors.h"
#include "replicator/rl/remote.h"
#include "src/rl/remote/wire.h"

namespace replicator::rl {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a call that waits (an insert into a full queue, a parameter poll) looks again
// at the end of the learner and at its client's cancellation.
constexpr milliseconds kInsertWait{100};
constexpr milliseconds kPollStep{50};

// A random non-zero number: two servers started one after the other draw different ones.
std::uint64_t draw_incarnation() {
  std::random_device device;
  std::uint64_t value = 0;
  while (value == 0) value = (std::uint64_t{device()} << 32) ^ device();
  return value;
}

}  // namespace

class LearnerServer::Impl final : public remote::Learner::Service {
 public:
  Impl(LearnerServerOptions options, const ParameterStore& store, TrajectoryQueue<Unroll>& queue)
      : options_(std::move(options)), store_(store), queue_(queue) {
    const ActorAssignment& p = options_.play;
    if (p.env.empty() || p.envs < 1 || p.unroll < 1 || p.hidden < 1 || p.observation_size < 1 ||
        p.num_actions < 1) {
      throw InvalidArgument("a learner server needs an environment and positive sizes to assign");
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    // Actors ping every 2 s, also between calls, to notice a learner that is gone.
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      throw ConfigError("the learner cannot listen on " + options_.address +
                        " (address in use, or not one of this host's)");
    }
    const std::size_t colon = options_.address.rfind(':');
    address_ = options_.address.substr(0, colon) + ":" + std::to_string(port_);
  }

  ~Impl() override { finish(milliseconds::zero()); }

  int port() const { return port_; }
  const std::string& address() const { return address_; }

  int wait_for_actors(int n, milliseconds timeout) const {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, timeout, [&] { return joined_ >= n; });
    return joined_;
  }

  void finish(milliseconds grace) {
    {
      std::unique_lock lock(mu_);
      if (!finishing_) {
        finishing_ = true;
        changed_.notify_all();
      }
      changed_.wait_for(lock, grace, [&] { return open_streams_ == 0; });
      if (stopped_) return;
      stopped_ = true;
    }
    // Calls still in flight get a short deadline, then are cancelled.
    server_->Shutdown(std::chrono::system_clock::now() + milliseconds(200));
    server_->Wait();
  }

  LearnerServerStats stats() const {
    std::lock_guard lock(mu_);
    LearnerServerStats s = totals_;
    const double now = seconds_now();
    for (const auto& [id, a] : actors_) {
      s.actors.push_back(a.stats);
      s.actors.back().seconds = a.first_seen > 0 ? now - a.first_seen : 0;
    }
    return s;
  }

  grpc::Status Hello(grpc::ServerContext* context, const remote::HelloRequest* request,
                     remote::HelloReply* reply) override {
    ActorAssignment a = options_.play;
    {
      std::lock_guard lock(mu_);
      if (finishing_) return {grpc::StatusCode::FAILED_PRECONDITION, "the learner has finished"};
      a.actor = request->actor() >= 0 ? request->actor() : options_.next_actor++;
      Known& known = actors_[a.actor];
      if (known.first_seen == 0) known.first_seen = seconds_now();
      join(known);
      known.stats.actor = a.actor;
      known.stats.peer = request->host().empty() ? context->peer() : request->host();
      ++totals_.hellos;
      changed_.notify_all();
    }
    reply->set_actor(a.actor);
    reply->set_env(a.env);
    reply->set_envs(a.envs);
    reply->set_unroll(a.unroll);
    reply->set_hidden(a.hidden);
    reply->set_seed(a.seed);
    reply->set_learner_rank(a.learner_rank);
    reply->set_observation_size(a.observation_size);
    reply->set_num_actions(a.num_actions);
    for (const std::string& server : a.env_servers) reply->add_env_servers(server);
    return grpc::Status::OK;
  }

  grpc::Status Insert(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<remote::InsertReply, remote::InsertRequest>* stream) override {
    int actor = -1;
    std::int64_t accepted = 0;
    {
      std::lock_guard lock(mu_);
      ++open_streams_;
    }
    remote::InsertRequest request;
    grpc::Status status = grpc::Status::OK;
    bool read_all = false;
    while (true) {
      if (!stream->Read(&request)) {
        read_all = true;
        break;
      }
      // Every unroll of a message is checked before any goes in.
      std::vector<Unroll> unrolls;
      try {
        for (const remote::Unroll& m : request.unrolls()) {
          unrolls.push_back(remote_wire::from_message(m));
          check_shape(unrolls.back());
        }
      } catch (const Error& e) {
        status = {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
        break;
      }
      if (unrolls.empty()) continue;
      if (actor < 0) {
        actor = unrolls.front().actor;
        std::lock_guard lock(mu_);
        Known& known = actors_[actor];
        known.stats.actor = actor;
        if (known.first_seen == 0) known.first_seen = seconds_now();
        join(known);  // an actor that stayed through a restart of this learner says no hello
        ++known.stats.streams;
        ++known.stats.open_streams;
      }
      for (const remote::Episode& e : request.episodes()) {
        if (options_.on_episode) options_.on_episode(e.episode_return(), e.length());
      }
      if (options_.on_frames && request.frames() > 0) options_.on_frames(request.frames());
      std::int64_t queued = 0;
      std::int64_t taken = 0;
      for (Unroll& unroll : unrolls) {
        const Put result = put(std::move(unroll), context);
        if (result == Put::kCancelled) break;
        ++taken;
        queued += result == Put::kQueued ? 1 : 0;
      }
      accepted += taken;
      if (taken > 0) {
        remote::InsertReply reply;
        reply.set_accepted(accepted);
        stream->Write(reply);  // a client gone shows in the next Read
      }
      {
        std::lock_guard lock(mu_);
        Known& known = actors_[actor];
        known.stats.frames += request.frames();
        known.stats.episodes += request.episodes_size();
        known.stats.unrolls += taken;
        totals_.unrolls += queued;
        totals_.after_finish += taken - queued;
      }
      if (context->IsCancelled()) break;
    }
    {
      std::lock_guard lock(mu_);
      if (!status.ok()) ++totals_.rejected;
      if (actor >= 0) {
        Known& known = actors_[actor];
        --known.stats.open_streams;
        // A client that died or dropped the call cancels it; a clean one closes its writes.
        if (!read_all || !status.ok() || context->IsCancelled()) ++known.stats.broken_streams;
      }
      --open_streams_;
      changed_.notify_all();
    }
    return status;
  }

  grpc::Status GetParameters(grpc::ServerContext* context, const remote::ParametersRequest* request,
                             remote::ParametersReply* reply) override {
    const Clock::time_point until =
        Clock::now() + milliseconds(std::clamp(request->wait_ms(), 0, 60'000));
    // A caller that knew another incarnation has versions of that one: any version is news.
    const std::int64_t have = request->incarnation() == incarnation_ ? request->have_version() : 0;
    // Woken by a new version at once; looks at the learner's end and the client's
    // cancellation every kPollStep.
    while (!store_.wait_for_version_above(have, std::min(until, Clock::now() + kPollStep)) &&
           !is_finishing() && !context->IsCancelled() && Clock::now() < until) {
    }
    reply->set_finished(is_finishing());
    reply->set_incarnation(incarnation_);
    const std::shared_ptr<const PolicySnapshot> latest = store_.latest();
    if (latest && latest->version > have) {
      reply->set_version(latest->version);
      remote_wire::put(latest->parameters, reply->mutable_parameters());
    }
    return grpc::Status::OK;
  }

 private:
  struct Known {
    RemoteActorStats stats;
    double first_seen = 0;  // 0: not yet
    bool joined = false;    // said hello, or streamed unrolls
  };

  // Counts `known` as joined, once; mu_ held.
  void join(Known& known) {
    if (known.joined) return;
    known.joined = true;
    ++joined_;
    changed_.notify_all();
  }
  static double seconds_now() {
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  bool is_finishing() const {
    std::lock_guard lock(mu_);
    return finishing_;
  }

  // Throws InvalidArgument for an unroll this learner cannot learn from: another
  // environment's shape, another unroll length, an action out of range, a done flag that is
  // neither 0 nor 1.
  void check_shape(const Unroll& unroll) const {
    const ActorAssignment& p = options_.play;
    if (unroll.observation_size != p.observation_size || unroll.num_actions != p.num_actions ||
        unroll.length != p.unroll) {
      throw InvalidArgument("an unroll of " + std::to_string(unroll.length) +
                            " steps of observations of " + std::to_string(unroll.observation_size) +
                            " floats and " + std::to_string(unroll.num_actions) +
                            " actions; this learner plays " + p.env + " in unrolls of " +
                            std::to_string(p.unroll));
    }
    for (const std::int32_t a : unroll.actions) {
      if (a < 0 || a >= p.num_actions) {
        throw InvalidArgument("an unroll with action " + std::to_string(a) + " of " +
                              std::to_string(p.num_actions));
      }
    }
    for (const std::uint8_t d : unroll.done) {
      if (d > 1) throw InvalidArgument("an unroll with a done flag of " + std::to_string(d));
    }
  }

  enum class Put { kQueued, kDropped, kCancelled };
  // Inserts `unroll`, waiting while the queue is full: kQueued once it is in; kDropped when
  // the learner finished first (it is counted, not queued); kCancelled when the client went
  // away first (it is not counted: the client counts it lost).
  Put put(Unroll&& unroll, grpc::ServerContext* context) {
    while (!context->IsCancelled()) {
      if (is_finishing()) return Put::kDropped;
      try {
        queue_.insert(std::move(unroll), kInsertWait);
        return Put::kQueued;
      } catch (const Timeout&) {
        // Still full: look again at the end and at the client.
      } catch (const Aborted&) {
        return Put::kDropped;  // the queue closed: the learner is ending
      }
    }
    return Put::kCancelled;
  }

  LearnerServerOptions options_;
  const ParameterStore& store_;
  TrajectoryQueue<Unroll>& queue_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  // Tells this server's versions from those of an earlier one at the same address.
  const std::uint64_t incarnation_ = draw_incarnation();

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::map<int, Known> actors_;  // under mu_
  int joined_ = 0;               // distinct actors that said hello or streamed, under mu_
  LearnerServerStats totals_;    // under mu_ (its actors left empty)
  int open_streams_ = 0;         // under mu_
  bool finishing_ = false;       // under mu_
  bool stopped_ = false;         // under mu_
};

LearnerServer::LearnerServer(LearnerServerOptions options, const ParameterStore& store,
                             TrajectoryQueue<Unroll>& queue)
    : impl_(std::make_unique<Impl>(std::move(options), store, queue)) {}
LearnerServer::~LearnerServer() = default;
int LearnerServer::port() const { return impl_->port(); }
std::string LearnerServer::address() const { return impl_->address(); }
int LearnerServer::wait_for_actors(int n, milliseconds timeout) const {
  return impl_->wait_for_actors(n, timeout);
}
void LearnerServer::finish(milliseconds grace) { impl_->finish(grace); }
LearnerServerStats LearnerServer::stats() const { return impl_->stats(); }

std::string listen_address(const std::string& listen, int rank) {
  const std::size_t colon = listen.rfind(':');
  long port = -1;
  if (colon != std::string::npos && colon + 1 < listen.size()) {
    const std::string digits = listen.substr(colon + 1);
    if (digits.size() <= 5 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      port = std::stol(digits);
    }
  }
  if (port < 0 || port > 65535) {
    throw InvalidArgument(
        "a learner's listen address (replicator train impala --listen) is host:port (port 0: "
        "any free one), got '" +
        listen + "'");
  }
  if (rank < 0) {
    throw InvalidArgument("listen_address: rank must be at least 0, got " + std::to_string(rank));
  }
  if (port != 0 && port + rank > 65535) {
    throw InvalidArgument("learner process " + std::to_string(rank) + " would listen on port " +
                          std::to_string(port + rank) + " (" + listen +
                          " + its rank), past 65535: give a lower port");
  }
  return listen.substr(0, colon) + ":" + std::to_string(port == 0 ? 0 : port + rank);
}

}  // namespace replicator::rl
