#include <grpcpp/grpcpp.h>

#include <chrono>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "env.grpc.pb.h"
#include "replicator/errors.h"
#include "replicator/rl/remote.h"
#include "src/rl/remote/wire.h"

namespace replicator::rl {
namespace {

using remote_wire::bytes_of;

template <typename T>
T value_of(const std::string& bytes, const std::string& what) {
  T value{};
  if (!remote_wire::get_value(bytes, &value)) {
    throw DataError("env server: a malformed " + what, what);
  }
  return value;
}

// A batch of environments in an environment server: each reset and step is one call.
class RemoteEnv final : public BatchedEnv {
 public:
  RemoteEnv(std::string name, int num_envs, int num_actions, std::vector<int> shape,
            std::string address, std::shared_ptr<grpc::Channel> channel,
            std::unique_ptr<remote::EnvServer::Stub> stub, std::uint64_t session,
            std::chrono::milliseconds timeout)
      : BatchedEnv(std::move(name), num_envs, num_actions, std::move(shape)),
        address_(std::move(address)),
        channel_(std::move(channel)),
        stub_(std::move(stub)),
        session_(session),
        timeout_(timeout) {}

  ~RemoteEnv() override {
    remote::SessionRequest request;
    request.set_session(bytes_of(session_));
    remote::CloseReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    (void)stub_->Close(&context, request, &reply);  // the server forgets it either way
  }

 protected:
  void do_reset() override {
    remote::SessionRequest request;
    request.set_session(bytes_of(session_));
    remote::StepReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout_);
    check(stub_->Reset(&context, request, &reply), "reset");
    take(reply);
  }

  void do_step(std::span<const std::int32_t> actions) override {
    remote::StepRequest request;
    request.set_session(bytes_of(session_));
    remote_wire::put(actions, request.mutable_actions());
    remote::StepReply reply;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout_);
    check(stub_->Step(&context, request, &reply), "step");
    take(reply);
  }

 private:
  void check(const grpc::Status& status, const char* call) const {
    if (status.ok()) return;
    throw PeerLost("the env server at " + address_ + " failed a " + call + " of " + name() + ": " +
                       status.error_message() + " (" +
                       std::to_string(static_cast<int>(status.error_code())) + ")",
                   -1);
  }

  // Copies a reply into the buffers step() and reset() return, checking every size.
  void take(const remote::StepReply& r) {
    const auto m = static_cast<std::size_t>(num_envs());
    const std::size_t values = m * static_cast<std::size_t>(observation_size());
    const bool images = r.dtype() == "u8";
    // Every size is checked before anything is copied.
    const bool sizes_ok = (images ? r.observations().size() == values
                                  : r.dtype() == "f32" && r.observations().size() == values * 4) &&
                          r.rewards().size() == m * 4 && r.terminated().size() == m &&
                          r.truncated().size() == m && r.episode_return().size() == m * 4 &&
                          r.episode_length().size() == m * 4;
    if (!sizes_ok) {
      throw DataError("the env server at " + address_ + " sent a step of " + name() +
                          " with the wrong sizes (" + std::to_string(r.observations().size()) +
                          " observation bytes, dtype '" + r.dtype() + "')",
                      address_);
    }
    if (images) {
      const auto* pixels = reinterpret_cast<const std::uint8_t*>(r.observations().data());
      for (std::size_t i = 0; i < values; ++i) {
        observations_[i] = static_cast<float>(pixels[i]) * (1.0f / 255.0f);
      }
    } else {
      remote_wire::get_into(r.observations(), std::span<float>(observations_));
    }
    remote_wire::get_into(r.rewards(), std::span<float>(rewards_));
    remote_wire::get_into(r.terminated(), std::span<std::uint8_t>(terminated_));
    remote_wire::get_into(r.truncated(), std::span<std::uint8_t>(truncated_));
    remote_wire::get_into(r.episode_return(), std::span<float>(episode_return_));
    remote_wire::get_into(r.episode_length(), std::span<std::int32_t>(episode_length_));
  }

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<remote::EnvServer::Stub> stub_;
  std::uint64_t session_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<BatchedEnv> make_remote_env(const std::string& address, const std::string& env,
                                            int num_envs, std::uint64_t seed,
                                            std::chrono::milliseconds timeout) {
  if (address.find(':') == std::string::npos) {
    throw InvalidArgument("an env server address is host:port, got '" + address + "'");
  }
  if (num_envs < 1) throw InvalidArgument("make_remote_env: num_envs must be at least 1");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  std::unique_ptr<remote::EnvServer::Stub> stub = remote::EnvServer::NewStub(channel);
  remote::OpenRequest request;
  request.set_env(env);
  request.set_num_envs(bytes_of(static_cast<std::int32_t>(num_envs)));
  request.set_seed(bytes_of(seed));
  remote::OpenReply reply;
  grpc::ClientContext context;
  // Making environments can take a while (Atari's first ROM load): the server may be
  // starting too.
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  context.set_wait_for_ready(true);
  const grpc::Status status = stub->Open(&context, request, &reply);
  if (!status.ok()) {
    const std::string why = "the env server at " + address + " did not open " +
                            std::to_string(num_envs) + " x " + env + ": " + status.error_message();
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) throw InvalidArgument(why);
    throw PeerLost(why, -1);
  }
  std::vector<std::int32_t> shape;
  if (!remote_wire::get(reply.shape(), &shape) || shape.empty()) {
    throw DataError("the env server at " + address + " sent no observation shape", address);
  }
  const auto session = value_of<std::uint64_t>(reply.session(), "session");
  const auto num_actions = value_of<std::int32_t>(reply.num_actions(), "action count");
  auto made = std::make_unique<RemoteEnv>("gym:" + env, num_envs, num_actions,
                                          std::vector<int>(shape.begin(), shape.end()), address,
                                          std::move(channel), std::move(stub), session, timeout);
  made->reset();
  return made;
}

EnvFactory env_factory(const std::string& env, const std::vector<std::string>& servers) {
  if (!env.starts_with("gym:")) return {};
  std::string id = env.substr(4);
  if (id.empty()) throw InvalidArgument("env_factory: '" + env + "' names no gymnasium id");
  if (servers.empty()) {
    throw InvalidArgument("environment " + env +
                          " lives in an env server: start python/env_server.py and give its "
                          "address (host:port; replicator train impala --env-servers)");
  }
  return [id = std::move(id), servers](int actor, int num_envs, std::uint64_t seed) {
    const auto n = static_cast<int>(servers.size());
    return make_remote_env(servers[static_cast<std::size_t>((actor % n + n) % n)], id, num_envs,
                           seed);
  };
}

}  // namespace replicator::rl
