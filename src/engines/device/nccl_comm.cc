// NCCL's point-to-point as a DeviceComm (device_comm.h), for CUDA memory between processes of
// several hosts. NCCL is opened at run time, not linked: a process that already has one (as
// LibTorch's CUDA library brings its own) uses that one, so there is one NCCL per process, and
// a program that never moves device memory between hosts never loads it.
//
// Communicators are nonblocking (ncclConfig_t::blocking = 0): setup and group calls return at
// once and are polled until they are done or the collective's deadline passes, when
// ncclCommAbort ends them. abort() ends every lane's communicator, which also releases a stream
// whose kernels wait for a peer that will never send.
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "replicator/errors.h"
#include "src/engines/device/cuda_scope.h"
#include "src/engines/device/device_comm.h"

namespace replicator::detail {
namespace {

// The NCCL functions the comm calls.
struct Nccl {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&::ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&::ncclCommAbort) abort = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;
};

// The NCCL this process has loaded, else libnccl.so.2 from the library path. Throws Error
// saying what is missing (a failed load is tried again at the next call).
const Nccl& nccl() {
  static const Nccl kLoaded = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      // Read on the one thread that initialises the static.
      const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe)
      throw Error(std::string("NCCL: could not load libnccl.so.2 (") + (why ? why : "?") +
                  "); device memory between hosts needs NCCL on the library path");
    }
    Nccl n;
    const auto load = [&](auto& fn, const char* name) {
      void* symbol = dlsym(lib, name);
      if (symbol == nullptr) {
        throw Error(std::string("NCCL: libnccl.so.2 has no ") + name + " (NCCL 2.14 or later)");
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
    };
    load(n.get_unique_id, "ncclGetUniqueId");
    load(n.init_rank_config, "ncclCommInitRankConfig");
    load(n.get_async_error, "ncclCommGetAsyncError");
    load(n.abort, "ncclCommAbort");
    load(n.destroy, "ncclCommDestroy");
    load(n.group_start, "ncclGroupStart");
    load(n.group_end, "ncclGroupEnd");
    load(n.send, "ncclSend");
    load(n.recv, "ncclRecv");
    load(n.all_reduce, "ncclAllReduce");
    load(n.error_string, "ncclGetErrorString");
    load(n.last_error, "ncclGetLastError");
    return n;
  }();
  return kLoaded;
}

class NcclComm final : public DeviceComm {
 public:
  NcclComm(int rank, int processes, int lanes)
      : rank_(rank), processes_(processes), lanes_(static_cast<std::size_t>(lanes)) {}
  ~NcclComm() override {
    for (Lane& lane : lanes_) {
      // An aborted communicator is gone already.
      if (lane.comm.load() != nullptr && !aborted_.load()) nccl().destroy(lane.comm.load());
    }
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  std::string_view name() const override { return "nccl"; }

  void exchange(int lane, Device device, DeviceStream& stream, std::span<const DeviceSendOp> sends,
                std::span<const DeviceRecvOp> recvs, const HostExchange& host,
                Transport::Clock::time_point deadline) override {
    const Nccl& api = nccl();
    const DeviceGuard guard(device.index);
    ncclComm_t comm = lane_comm(api, lane, device, host, deadline);
    auto* cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
    settle(api, comm, api.group_start(), "ncclGroupStart", deadline);
    for (const DeviceSendOp& op : sends) {
      check(api, comm, api.send(op.data, op.bytes, ncclUint8, op.peer, comm, cuda_stream),
            "ncclSend");
    }
    for (const DeviceRecvOp& op : recvs) {
      check(api, comm, api.recv(op.data, op.bytes, ncclUint8, op.peer, comm, cuda_stream),
            "ncclRecv");
    }
    settle(api, comm, api.group_end(), "ncclGroupEnd", deadline);
  }

  bool native_sum(int lane, Device device, DeviceStream& stream, void* data, std::size_t count,
                  DType dtype, const HostExchange& host,
                  Transport::Clock::time_point deadline) override {
    if (processes_ != 2) return false;
    ncclDataType_t type = ncclFloat32;
    switch (dtype) {
      case DType::kF32:
        type = ncclFloat32;
        break;
      case DType::kF64:
        type = ncclFloat64;
        break;
      case DType::kI32:
        type = ncclInt32;
        break;
      case DType::kI64:
        type = ncclInt64;
        break;
      default:
        return false;  // NCCL's half-precision sums round as it likes
    }
    const Nccl& api = nccl();
    const DeviceGuard guard(device.index);
    ncclComm_t comm = lane_comm(api, lane, device, host, deadline);
    auto* cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
    settle(api, comm, api.all_reduce(data, data, count, type, ncclSum, comm, cuda_stream),
           "ncclAllReduce", deadline);
    return true;
  }

  void abort() noexcept override {
    if (aborted_.exchange(true)) return;
    for (Lane& lane : lanes_) {
      if (ncclComm_t comm = lane.comm.load()) nccl().abort(comm);
    }
  }

 private:
  struct Lane {
    std::atomic<ncclComm_t> comm{nullptr};  // abort() reads it from another lane's thread
    Device device;
  };

  // The lane's communicator, made at its first use. Throws Aborted after abort(),
  // InvalidArgument where the lane's replica moved to another GPU.
  ncclComm_t lane_comm(const Nccl& api, int lane, Device device, const HostExchange& host,
                       Transport::Clock::time_point deadline) {
    if (aborted_.load()) {
      throw Aborted("the device transport between processes was aborted", std::nullopt);
    }
    Lane& s = lanes_.at(static_cast<std::size_t>(lane));
    if (s.comm.load() == nullptr) {
      s.device = device;
      s.comm.store(make_comm(api, host, deadline));
    } else if (s.device != device) {
      throw InvalidArgument("NCCL: lane " + std::to_string(lane) + " moved from " +
                            to_string(s.device) + " to " + to_string(device) +
                            "; a replica keeps its GPU");
    }
    return s.comm.load();
  }

  // A new communicator: process 0's unique id goes to every other process through `host`.
  ncclComm_t make_comm(const Nccl& api, const HostExchange& host,
                       Transport::Clock::time_point deadline) {
    ncclUniqueId id{};
    if (rank_ == 0) check(api, nullptr, api.get_unique_id(&id), "ncclGetUniqueId");
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    if (rank_ == 0) {
      for (int q = 1; q < processes_; ++q) sends.push_back({q, &id, sizeof id});
    } else {
      recvs.push_back({0, &id, sizeof id});
    }
    host(sends, recvs);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t started = api.init_rank_config(&comm, processes_, id, rank_, &config);
    settle(api, comm, started, "ncclCommInitRankConfig", deadline);
    return comm;
  }

  static void check(const Nccl& api, ncclComm_t comm, ncclResult_t result, const char* what) {
    if (result == ncclSuccess || result == ncclInProgress) return;
    std::string detail = comm != nullptr ? api.last_error(comm) : "";
    throw Error(std::string("NCCL: ") + what + " failed: " + api.error_string(result) +
                (detail.empty() ? "" : " (" + detail + ")"));
  }

  // Polls a nonblocking call until it is done; past `deadline` aborts the communicator and
  // throws Timeout (its `missing` empty: the caller names the peers).
  void settle(const Nccl& api, ncclComm_t comm, ncclResult_t result, const char* what,
              Transport::Clock::time_point deadline) {
    while (result == ncclInProgress && comm != nullptr) {
      if (Transport::Clock::now() >= deadline) {
        abort();
        throw Timeout(std::string("NCCL: ") + what + " did not finish by the deadline", "nccl", 0,
                      std::chrono::milliseconds(0), {});
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (api.get_async_error(comm, &result) != ncclSuccess) break;
    }
    check(api, comm, result, what);
  }

  int rank_;
  int processes_;
  std::vector<Lane> lanes_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<DeviceComm> make_nccl_comm(int rank, int processes, int lanes) {
  return std::make_unique<NcclComm>(rank, processes, lanes);
}

}  // namespace replicator::detail
