#include "replicator/replicator.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/collectives/across/across.h"
#include "src/collectives/communicator.h"
#include "src/collectives/reduce_kernel.h"
#include "src/engines/make_transport.h"
#include "src/engines/shm/shm_mesh.h"
#include "src/runtime/calibration.h"
#include "src/runtime/host_policy.h"
#include "src/runtime/trace.h"
#include "src/runtime/worker_pool.h"

namespace replicator {
namespace {

// Every process must run the same number of local replicas: ask them all.
void check_same_local_replicas(detail::Transport& transport, int local,
                               std::chrono::milliseconds timeout) {
  const int P = transport.size();
  std::vector<std::int32_t> theirs(static_cast<std::size_t>(P), local);
  std::vector<detail::SendOp> sends;
  std::vector<detail::RecvOp> recvs;
  const std::int32_t mine = local;
  for (int q = 0; q < P; ++q) {
    if (q == transport.rank()) continue;
    sends.push_back({q, &mine, sizeof mine});
    recvs.push_back({q, &theirs[static_cast<std::size_t>(q)], sizeof mine});
  }
  transport.exchange(0, sends, recvs, detail::Transport::Clock::now() + timeout);
  for (int q = 0; q < P; ++q) {
    if (theirs[static_cast<std::size_t>(q)] != local) {
      throw ConfigError("process " + std::to_string(q) + " runs " +
                        std::to_string(theirs[static_cast<std::size_t>(q)]) +
                        " local replicas but process " + std::to_string(transport.rank()) +
                        " runs " + std::to_string(local) +
                        "; every process must run the same number (--local-replicas)");
    }
  }
}

// Whether the job's processes run on more than one host (their host identities differ, or one
// cannot read its own): one exchange on lane 0. Throws what the transport throws.
bool on_several_hosts(detail::Transport& transport, std::chrono::milliseconds timeout) {
  const std::string identity = detail::ShmMesh::host_identity();
  const std::uint64_t mine = identity.empty() ? transport.rank() + 1ull  // unlike any other
                                              : std::hash<std::string>{}(identity) | 1ull << 63;
  const int P = transport.size();
  std::vector<std::uint64_t> theirs(static_cast<std::size_t>(P), mine);
  std::vector<detail::SendOp> sends;
  std::vector<detail::RecvOp> recvs;
  for (int q = 0; q < P; ++q) {
    if (q == transport.rank()) continue;
    sends.push_back({q, &mine, sizeof mine});
    recvs.push_back({q, &theirs[static_cast<std::size_t>(q)], sizeof mine});
  }
  transport.exchange(0, sends, recvs, detail::Transport::Clock::now() + timeout);
  return std::any_of(theirs.begin(), theirs.end(), [&](std::uint64_t h) { return h != mine; });
}

// The hooks of on_first_replica_threads, and how many have run.
struct FirstThreadHooks {
  std::mutex mutex;
  std::vector<void (*)()> hooks;
  std::size_t done = 0;
  bool threads_started = false;

  static FirstThreadHooks& get() {
    static FirstThreadHooks instance;
    return instance;
  }

  // Runs the hooks that have not run; from then on, a hook registered runs at once.
  void run_pending(std::unique_lock<std::mutex>& /*held*/) {
    while (done < hooks.size()) {
      hooks[done]();
      ++done;
    }
  }
};

// Before the first replica threads of the process start.
void prepare_replica_threads() {
  FirstThreadHooks& h = FirstThreadHooks::get();
  std::unique_lock lock(h.mutex);
  h.run_pending(lock);
  h.threads_started = true;
}

}  // namespace

void detail::on_first_replica_threads(void (*prepare)()) {
  FirstThreadHooks& h = FirstThreadHooks::get();
  std::unique_lock lock(h.mutex);
  h.hooks.push_back(prepare);
  if (h.threads_started) h.run_pending(lock);
}

Replicator::Replicator(const Config& config)
    : Replicator(config, (config.validate(), detail::make_transport(config))) {}

namespace {

Config meeting_config(Config config, const rendezvous::KeyValueStore* meeting) {
  if (meeting == nullptr) throw InvalidArgument("Replicator: the store to meet in is null");
  if (config.engine != Engine::kGloo) {
    throw InvalidArgument(
        "Replicator: a store of the caller's to meet in works with the gloo "
        "engine only, not " +
        std::string(to_string(config.engine)));
  }
  if (config.gloo.store.empty()) config.gloo.store = meeting->describe();
  config.validate();
  return config;
}

// The devices of Config::devices as this process sees them ("cuda": every visible GPU).
// Throws ConfigError when the process has fewer than asked for.
DeviceSet resolve_devices(const std::string& text) {
  DeviceSet devices = parse_devices(text);
  if (devices.kind == MemoryKind::kHost) return devices;
  const int available = device_count(devices.kind);
  if (available == 0 || devices.count > available) {
    std::string why = std::to_string(available) + " " + std::string(to_string(devices.kind)) +
                      " device" + (available == 1 ? "" : "s") + " visible";
    if (devices.kind == MemoryKind::kCuda && !built_with_cuda()) why = "a build without CUDA";
    throw ConfigError("devices '" + text + "': this process has " + why);
  }
  if (devices.count == 0) devices.count = available;
  return devices;
}

}  // namespace

Replicator::Replicator(const Config& config,
                       const std::shared_ptr<rendezvous::KeyValueStore>& meeting)
    : Replicator(meeting_config(config, meeting.get()), nullptr, meeting) {}

Replicator::Replicator(const Config& config, std::nullptr_t,
                       const std::shared_ptr<rendezvous::KeyValueStore>& meeting)
    : Replicator(config, detail::make_transport(config, meeting)) {}

Replicator::Replicator(Config config, std::unique_ptr<detail::Transport> transport)
    : config_(std::move(config)), transport_(std::move(transport)) {
  config_.validate();
  if (!transport_)
    throw InvalidArgument("Replicator: no transport (a one-process job has the local one)");
  const int L = config_.local_replicas;
  if (transport_->size() > 1) check_same_local_replicas(*transport_, L, config_.timeout);
  const detail::HostPolicy policy = detail::host_policy(
      L, config_.host_processes, std::thread::hardware_concurrency(), config_.spin);
  if (transport_->size() > 1) {
    layout_ = std::make_unique<detail::ProcessLayout>(
        detail::make_process_layout(*transport_, L, policy.oversubscribed));
    layout_->costs =
        detail::calibrate(*layout_, config_.transport.calibration, config_.timeout).costs;
    layout_->cache_share_bytes = detail::read_cache_facts().last_level_share();
    // CUDA memory between hosts goes over NCCL (one process per GPU); between the processes
    // of one host over CUDA IPC (make_process_layout), or through the host with shared memory
    // off.
    if (built_with_cuda() && !layout_->traits.one_host &&
        on_several_hosts(*transport_, config_.timeout)) {
      layout_->device_comms[static_cast<std::size_t>(MemoryKind::kCuda)] =
          detail::make_nccl_comm(layout_->rank, layout_->processes, L);
    }
  }
  tracer_ = std::make_unique<detail::Tracer>(config_, layout_ ? layout_->rank : 0,
                                             layout_ ? layout_->processes : 1, L);
  if (L > 1) prepare_replica_threads();
  comm_ = std::make_unique<detail::Communicator>(L, config_.timeout, policy.collective_spin,
                                                 detail::MachineFacts{policy.oversubscribed},
                                                 tracer_->recorders(), layout_.get());
  pool_ = std::make_unique<detail::WorkerPool>(
      *comm_, tracer_->recorders(), layout_ ? layout_->rank * L : 0, num_replicas(), L,
      policy.step_spin, !policy.oversubscribed, transport_->traits().host_cores,
      resolve_devices(config_.devices));
  reduce_scratch_ = std::make_unique<detail::ReduceScratch>(L);
}

Replicator::~Replicator() = default;

std::unique_ptr<Replicator> detail::make_replicator(Config config,
                                                    std::unique_ptr<Transport> transport) {
  return std::unique_ptr<Replicator>(new Replicator(std::move(config), std::move(transport)));
}

int Replicator::num_replicas() const {
  return layout_ ? layout_->replicas() : config_.local_replicas;
}
int Replicator::num_local_replicas() const { return config_.local_replicas; }

void Replicator::run_erased(detail::StepRef step) {
  if (!broken_.empty()) {
    throw Aborted("this job can no longer run: an earlier run failed (" + broken_ +
                      "); restart all its processes",
                  std::nullopt);
  }
  tracer_->recorders().clear();
  try {
    pool_->run(step);
  } catch (const CollectiveMismatch& e) {
    // Every replica of every process raised it from the same frames, and none is left
    // waiting: an abort notice now would only race the frames the peers still read.
    if (layout_) broken_ = e.what();
    std::rethrow_exception(tracer_->with_summary(e));
  } catch (const std::exception& e) {
    // The other processes may be waiting for this one: release them, naming the replica
    // whose failure it was.
    if (layout_) {
      broken_ = e.what();
      std::optional<int> cause;
      if (const auto* error = dynamic_cast<const Error*>(&e)) cause = error->replica();
      if (const auto* aborted = dynamic_cast<const Aborted*>(&e)) {
        cause = aborted->cause_replica() ? aborted->cause_replica() : cause;
      }
      transport_->abort(e.what(), cause);
    }
    if (const std::exception_ptr summarised = tracer_->with_summary(e)) {
      std::rethrow_exception(summarised);
    }
    throw;
  }
}

void Replicator::check_reduce_size(int size) const {
  if (size != num_local_replicas()) {
    throw InvalidArgument("reduce: expected one value per local replica (" +
                          std::to_string(num_local_replicas()) + "), got " + std::to_string(size));
  }
}

void Replicator::reduce_erased(ReduceOp op, DType dtype, const void* const* inputs,
                               void* out) const {
  detail::tree_reduce(op, dtype, inputs, num_local_replicas(), &out, 1, 1,
                      static_cast<std::size_t>(num_local_replicas()), *reduce_scratch_);
}

}  // namespace replicator
