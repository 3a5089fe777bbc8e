#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include "learner.grpc.pb.h"
#include "replicator/errors.h"
#include "replicator/rl/remote.h"
#include "src/rl/remote/wire.h"

namespace replicator::rl {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kFirstBackoff{50};
constexpr milliseconds kMaxBackoff{2'000};
// How long the sender waits for an unroll before looking at the end again.
constexpr milliseconds kSampleWait{100};
// Unrolls written and not yet answered, at most: what may wait in the transport's buffers
// (half a learner batch of the job's default 32).
constexpr std::int64_t kWindow = 16;

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return std::string(name) + " pid " + std::to_string(::getpid());
}

// Retries with doubling waits while the learner is unreachable; gives up past the timeout
// counted from the last success.
class Backoff {
 public:
  Backoff(std::string address, milliseconds timeout)
      : address_(std::move(address)), timeout_(timeout) {}
  void succeeded() {
    last_success_ = Clock::now();
    wait_ = kFirstBackoff;
  }
  // Waits before the next try (returns early if `stop`), or throws PeerLost when the learner
  // has been unreachable for longer than the timeout.
  void failed(const std::string& what, const grpc::Status& status,
              const std::atomic<bool>* stop = nullptr) {
    if (Clock::now() - last_success_ >= timeout_) {
      throw PeerLost("the learner at " + address_ + " did not answer for " +
                         std::to_string(timeout_.count()) + " ms (" + what + ": " +
                         status.error_message() + "); is it running?",
                     -1);
    }
    const Clock::time_point until = Clock::now() + wait_;
    while (Clock::now() < until && !(stop && stop->load())) {
      std::this_thread::sleep_for(
          std::min<Clock::duration>(milliseconds(20), until - Clock::now()));
    }
    wait_ = std::min(kMaxBackoff, wait_ * 2);
  }

 private:
  std::string address_;
  milliseconds timeout_;
  Clock::time_point last_success_ = Clock::now();
  milliseconds wait_ = kFirstBackoff;
};

}  // namespace

class RemoteLearner::Impl {
 public:
  explicit Impl(RemoteLearnerOptions options) : options_(std::move(options)) {
    if (options_.address.find(':') == std::string::npos) {
      throw InvalidArgument("a learner address is host:port, got '" + options_.address + "'");
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // Reconnect soon after the learner comes back, rather than after gRPC's long backoff.
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(kMaxBackoff.count()));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(kFirstBackoff.count()));
    // A learner that stops answering (stopped, or its host gone) breaks the stream.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2'000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options_.call_timeout.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    channel_ =
        grpc::CreateCustomChannel(options_.address, grpc::InsecureChannelCredentials(), args);
    stub_ = remote::Learner::NewStub(channel_);
    hello();
  }

  const ActorAssignment& assignment() const { return assignment_; }

  RemoteActorCounts counts() const {
    std::lock_guard lock(mu_);
    return counts_;
  }

  void pump(ParameterStore& store, TrajectoryQueue<Unroll>& queue,
            const std::function<Report()>& report, const std::atomic<bool>& stop) {
    std::atomic<bool> finished{false};
    std::atomic<bool> sent_all{false};
    std::exception_ptr fetch_error;
    {
      std::lock_guard lock(insert_mu_);
      cancel_inserts_ = false;
    }
    std::thread fetcher([&] {
      try {
        fetch(store, stop, finished);
      } catch (...) {
        fetch_error = std::current_exception();
        finished = true;
      }
      // The sender closes its stream cleanly once it sees the end; a stream blocked in a
      // read or write (a learner that holds it) is cancelled after a call's deadline.
      const Clock::time_point until = Clock::now() + options_.call_timeout;
      while (!sent_all && Clock::now() < until) std::this_thread::sleep_for(milliseconds(10));
      if (!sent_all) cancel_inserts();
    });
    try {
      send(queue, report, stop, finished);
    } catch (...) {
      finished = true;
      sent_all = true;
      fetcher.join();
      throw;
    }
    finished = true;
    sent_all = true;
    fetcher.join();
    if (fetch_error) std::rethrow_exception(fetch_error);
  }

 private:
  void hello() {
    Backoff backoff(options_.address, options_.timeout);
    remote::HelloRequest request;
    request.set_actor(options_.actor);
    request.set_host(host_name());
    while (true) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
      context.set_wait_for_ready(true);
      remote::HelloReply reply;
      const grpc::Status status = stub_->Hello(&context, request, &reply);
      if (status.ok()) {
        assignment_ = ActorAssignment{
            .actor = reply.actor(),
            .env = reply.env(),
            .envs = reply.envs(),
            .unroll = reply.unroll(),
            .hidden = reply.hidden(),
            .seed = reply.seed(),
            .learner_rank = reply.learner_rank(),
            .observation_size = reply.observation_size(),
            .num_actions = reply.num_actions(),
            .env_servers = {reply.env_servers().begin(), reply.env_servers().end()}};
        return;
      }
      if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
          status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        throw InvalidArgument("the learner at " + options_.address +
                              " refused this actor: " + status.error_message());
      }
      backoff.failed("hello", status);
    }
  }

  // Long-polls the learner for newer parameters and publishes them into `store`, until
  // `finished` (set here when the learner says so) or `stop`.
  void fetch(ParameterStore& store, const std::atomic<bool>& stop, std::atomic<bool>& finished) {
    Backoff backoff(options_.address, options_.timeout);
    std::int64_t have = 0;
    std::uint64_t incarnation = 0;  // of the learner that gave `have`
    while (!stop && !finished) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + options_.poll_wait +
                           options_.call_timeout);
      remote::ParametersRequest request;
      request.set_have_version(have);
      request.set_incarnation(incarnation);
      request.set_wait_ms(static_cast<int>(options_.poll_wait.count()));
      request.set_actor(assignment_.actor);
      remote::ParametersReply reply;
      const grpc::Status status = stub_->GetParameters(&context, request, &reply);
      if (!status.ok()) {
        backoff.failed("parameters", status, &stop);
        continue;
      }
      backoff.succeeded();
      // A learner restarted (maybe from an older checkpoint): its versions replace ours.
      if (reply.incarnation() != incarnation) {
        incarnation = reply.incarnation();
        have = 0;
      }
      if (reply.version() > have) {
        auto snapshot = std::make_shared<PolicySnapshot>();
        snapshot->version = reply.version();
        if (!remote_wire::get(reply.parameters(), &snapshot->parameters)) {
          throw DataError("parameters from the learner at " + options_.address +
                              " are not a whole number of floats",
                          options_.address);
        }
        if (snapshot->version > store.version()) {
          store.publish(std::move(snapshot));
        } else {
          store.replace(std::move(snapshot));  // a restarted learner's, maybe lower
        }
        have = reply.version();
        std::lock_guard lock(mu_);
        ++counts_.versions;
      }
      if (reply.finished()) finished = true;
    }
  }

  // Streams the queue's unrolls to the learner, keeping at most kWindow unanswered, and
  // opens the stream again when it breaks, until `finished` or `stop`; then closes the
  // stream cleanly.
  void send(TrajectoryQueue<Unroll>& queue, const std::function<Report()>& report,
            const std::atomic<bool>& stop, const std::atomic<bool>& finished) {
    Backoff backoff(options_.address, options_.timeout);
    bool first_stream = true;
    while (!stop && !finished) {
      grpc::ClientContext context;
      {
        std::lock_guard lock(insert_mu_);
        if (cancel_inserts_) break;
        insert_context_ = &context;
      }
      // Unregisters the context before it goes out of scope, however the loop leaves.
      struct Unregister {
        Impl* impl;
        ~Unregister() {
          std::lock_guard lock(impl->insert_mu_);
          impl->insert_context_ = nullptr;
        }
      } unregister{this};
      const auto stream = stub_->Insert(&context);
      if (!first_stream) {
        std::lock_guard lock(mu_);
        ++counts_.reconnects;
      }
      first_stream = false;
      std::int64_t written = 0;
      std::int64_t accepted = 0;
      remote::InsertReply reply;
      // Reads one answer; false when the stream broke.
      const auto read_answer = [&] {
        if (!stream->Read(&reply)) return false;
        accepted = reply.accepted();
        return true;
      };
      bool broken = false;
      while (!stop && !finished && !broken) {
        while (!broken && written - accepted >= kWindow) broken = !read_answer();
        if (broken) break;
        // The unrolls ready, up to what the window leaves: one message.
        std::vector<Unroll> batch;
        try {
          batch.push_back(queue.sample(kSampleWait));
        } catch (const Timeout&) {
          continue;
        }
        const std::int64_t room =
            std::min<std::int64_t>(kWindow - (written - accepted) - 1, queue.stats().size);
        if (room > 0) {
          for (Unroll& u : queue.sample_batch(room)) batch.push_back(std::move(u));
        }
        remote::InsertRequest request;
        for (const Unroll& u : batch) remote_wire::to_message(u, request.add_unrolls());
        const Report r = report();
        for (const auto& [episode_return, length] : r.episodes) {
          remote::Episode* e = request.add_episodes();
          e->set_episode_return(episode_return);
          e->set_length(length);
        }
        request.set_frames(r.frames);
        const auto n = static_cast<std::int64_t>(batch.size());
        if (!stream->Write(request)) {
          broken = true;
          {
            std::lock_guard lock(mu_);
            counts_.lost += n;  // the unrolls in hand: they are not sent again
          }
          while (read_answer()) {
          }  // answers already on their way still count
          break;
        }
        written += n;
        std::lock_guard lock(mu_);
        counts_.sent += n;
      }
      if (!broken) {
        stream->WritesDone();
        while (accepted < written && read_answer()) {
        }
      }
      const grpc::Status status = stream->Finish();
      {
        // What the learner did not answer is lost: nothing is sent twice.
        std::lock_guard lock(mu_);
        counts_.acknowledged += accepted;
        counts_.lost += written - accepted;
      }
      if (status.ok()) {
        backoff.succeeded();
        continue;
      }
      if (stop || finished) break;
      backoff.failed("insert", status, &stop);
    }
  }

  // Cancels the insert stream in flight, and any opened after.
  void cancel_inserts() {
    std::lock_guard lock(insert_mu_);
    cancel_inserts_ = true;
    if (insert_context_ != nullptr) insert_context_->TryCancel();
  }

  RemoteLearnerOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<remote::Learner::Stub> stub_;
  ActorAssignment assignment_;
  mutable std::mutex mu_;
  RemoteActorCounts counts_;  // under mu_
  std::mutex insert_mu_;
  grpc::ClientContext* insert_context_ = nullptr;  // the insert stream's, under insert_mu_
  bool cancel_inserts_ = false;                    // under insert_mu_
};

RemoteLearner::RemoteLearner(RemoteLearnerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
RemoteLearner::~RemoteLearner() = default;
const ActorAssignment& RemoteLearner::assignment() const { return impl_->assignment(); }
void RemoteLearner::pump(ParameterStore& store, TrajectoryQueue<Unroll>& queue,
                         const std::function<Report()>& report, const std::atomic<bool>& stop) {
  impl_->pump(store, queue, report, stop);
}
RemoteActorCounts RemoteLearner::counts() const { return impl_->counts(); }

}  // namespace replicator::rl
