#include "src/runtime/worker_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <string>

#include "replicator/errors.h"
#include "src/comm/futex.h"
#include "src/runtime/host_policy.h"
#include "src/runtime/signal_dump.h"

namespace replicator::detail {

WorkerPool::WorkerPool(Communicator& comm, FlightRecorders& recorders, int first_replica,
                       int num_replicas, int num_local, std::chrono::microseconds spin, bool spread,
                       HostCores* host_cores, DeviceSet devices)
    : comm_(comm),
      recorders_(recorders),
      first_replica_(first_replica),
      num_replicas_(num_replicas),
      spin_(spin),
      spread_(spread && (num_local > 1 || (host_cores != nullptr && host_cores->size() > 1))),
      host_cores_(host_cores),
      devices_(devices),
      cores_(static_cast<std::size_t>(num_local)) {
  threads_.reserve(static_cast<std::size_t>(num_local));
  for (int local = 0; local < num_local; ++local) {
    threads_.emplace_back([this, local] { loop(local); });
    const std::string name = "replica-" + std::to_string(first_replica + local);
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

WorkerPool::~WorkerPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  futex_wake_all(&generation_);
  for (auto& t : threads_) t.join();
}

void WorkerPool::run(StepRef step) {
  step_ = step;
  first_error_ = nullptr;
  comm_.reset();
  remaining_.store(static_cast<std::uint32_t>(threads_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  futex_wake_all(&generation_);
  for (;;) {
    const std::uint32_t left = remaining_.load(std::memory_order_acquire);
    if (left == 0) break;
    futex_wait(&remaining_, left, std::chrono::milliseconds(100));
  }
  if (first_error_) std::rethrow_exception(first_error_);
}

void WorkerPool::loop(int local) {
  const int id = first_replica_ + local;
  const int num_local = static_cast<int>(cores_.size());  // set before any thread starts
  const int num_devices = std::max(devices_.count, 1);
  const Device device{.kind = devices_.kind, .index = static_cast<std::int16_t>(id % num_devices)};
  int sharing = 0;  // replicas first_replica_ .. first_replica_ + L - 1, each on id mod N
  for (int other = first_replica_; other < first_replica_ + num_local; ++other) {
    sharing += static_cast<int>(other % num_devices == device.index);
  }
  SignalDump::block_in_this_thread();
  FlightRecorder& recorder = recorders_[local];
  std::uint32_t seen = 0;
  for (;;) {
    const auto spin_end = std::chrono::steady_clock::now() + spin_;
    std::uint32_t now = generation_.load(std::memory_order_acquire);
    while (now == seen && std::chrono::steady_clock::now() < spin_end) {
      cpu_relax();
      now = generation_.load(std::memory_order_acquire);
    }
    while (now == seen) {
      futex_wait(&generation_, seen, std::chrono::seconds(1));
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_) return;
    if (spread_) spread_off_shared_core(local);

    ReplicaContext ctx(&comm_, id, num_replicas_, local, num_local, device, sharing);
    const ReplicaContext::CurrentScope current(ctx);
    recorder.begin_step(std::chrono::steady_clock::now());
    bool failed = true;
    try {
      step_.invoke(step_.object, ctx);
      ctx.end_step();
      failed = false;
    } catch (Error& e) {
      // The exception is read before it is handed over: once recorded, another replica's
      // failure may replace it and release it.
      if (!e.replica()) e.set_replica(id);
      const std::string what = e.what();
      record_failure(local, std::current_exception());
      comm_.fail(id, what);
    } catch (const std::exception& e) {
      const std::string cause = e.what();
      const std::string what = "replica " + std::to_string(id) + " failed: " + cause;
      record_failure(local,
                     std::make_exception_ptr(ReplicaFailed(what, id, std::current_exception())));
      comm_.fail(id, cause);
    } catch (...) {
      const std::string what =
          "replica " + std::to_string(id) + " failed with a non-standard exception";
      record_failure(local,
                     std::make_exception_ptr(ReplicaFailed(what, id, std::current_exception())));
      comm_.fail(id, what);
    }
    recorder.end_step(std::chrono::steady_clock::now(), failed);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) futex_wake_all(&remaining_);
  }
}

void WorkerPool::spread_off_shared_core(int local) {
  const int cpu = sched_getcpu();
  if (cpu < 0) return;
  cores_[static_cast<std::size_t>(local)].cpu.store(cpu, std::memory_order_seq_cst);
  const bool across = host_cores_ != nullptr && local < host_cores_->lanes();
  if (across) host_cores_->publish_core(local, cpu);
  // The cores of the lower-numbered replicas of the host: every lane of the processes of
  // lower rank, then this process's lower locals.
  std::array<int, kMaxSpread> lower{};
  int n = 0;
  if (across) {
    for (int q = 0; q < host_cores_->rank(); ++q) {
      for (int lane = 0; lane < host_cores_->lanes() && n < kMaxSpread; ++lane) {
        lower[static_cast<std::size_t>(n++)] = host_cores_->core_of(q, lane);
      }
    }
  }
  for (int i = 0; i < local && n < kMaxSpread; ++i) {
    lower[static_cast<std::size_t>(n++)] =
        cores_[static_cast<std::size_t>(i)].cpu.load(std::memory_order_seq_cst);
  }
  // Alone on its core (the usual case): done without a system call.
  const auto end = lower.begin() + n;
  if (std::find(lower.begin(), end, cpu) == end) return;
  cpu_set_t allowed;
  cpu_set_t elsewhere;
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return;
  if (!cores_elsewhere(cpu, std::span<const int>(lower.data(), static_cast<std::size_t>(n)),
                       allowed, &elsewhere)) {
    return;
  }
  if (pthread_setaffinity_np(pthread_self(), sizeof(elsewhere), &elsewhere) != 0) return;
  pthread_setaffinity_np(pthread_self(), sizeof(allowed), &allowed);
  const int now = sched_getcpu();
  cores_[static_cast<std::size_t>(local)].cpu.store(now, std::memory_order_seq_cst);
  if (across) host_cores_->publish_core(local, now);
}

void WorkerPool::record_failure(int /*local*/, std::exception_ptr error) {
  const auto is_aborted = [](const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const Aborted&) {
      return true;
    } catch (...) {
      return false;
    }
  };
  std::lock_guard lock(error_mu_);
  // The first failure, but an Aborted (a consequence of some failure) gives way to the
  // failure itself when that is recorded later.
  if (!first_error_ || (is_aborted(first_error_) && !is_aborted(error))) {
    first_error_ = std::move(error);
  }
}

}  // namespace replicator::detail
