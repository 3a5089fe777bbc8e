// The mpi transport; the contract is in mpi_transport.h and transport.h.
//
// post() posts every receive, then every send (MPI_Irecv, MPI_Isend); wait() polls MPI_Testall
// over the requests of the posts it covers. It spins for
// the first ~20 µs, because a small exchange completes within that and a yield or a sleep
// would cost more than the exchange itself; then it yields the CPU, then it naps, so that
// a thread waiting for a slow peer leaves its core to the replica threads that still
// compute. While it waits it also watches, every few hundred polls, the deadline, the
// poison flag (set by another lane or by abort()) and the control communicator, on which
// a failing peer posts its abort notice.
//
// Each transport tags its messages with its own generation (data 2g, abort notices 2g + 1).
// MPI reuses the context id of a freed communicator, and OpenMPI keeps a message that
// arrives for a freed one and hands it to the next communicator with that id: without
// distinct tags, a late abort notice or data message of a dead transport would be taken
// by the next transport of the process.
//
// MPI calls only report errors here because every communicator of the transport has
// MPI_ERRORS_RETURN; each error code becomes a replicator error with MPI's own text.

#include "src/engines/mpi/mpi_transport.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "src/comm/poison.h"
#include "src/engines/abort_notice.h"
#include "src/engines/exchange_errors.h"
#include "src/engines/shm/shm_mesh.h"
#include "src/engines/shm/shm_transport.h"
#include "src/engines/split_transport.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;

// OpenMPI's shared-memory transport sends up to 4 KiB (its header included) at once; a
// longer message waits for a handshake (its rendezvous) first.
constexpr std::size_t kMpiEagerBytes = 4000;
// Between processes of one host, a message that half a ring holds whole goes through
// shared memory (the frames, and the data of the small and middle collectives: the
// SplitTransport of make_mpi_transport); a longer one goes through OpenMPI. A message through a
// ring costs two copies and no handshake; through OpenMPI, from 4 KiB on, a handshake and one copy:
// the handshake's round trip (about 2 us here) is the time of copying tens of KiB twice. An
// all-reduce over two processes, gathered through the rings, measured 2.1-2.8 us at 8 KiB
// against 5.3-7.2 us for MPI_Allreduce, and 2.2x its speed at 64-256 KiB. A message longer than the
// room in its ring streams through it, and both processes' threads must run at once to move it,
// where OpenMPI's single copy needs only the receiver: with more threads than cores,
// 2 MiB steps through 1 MiB rings made the 64 MiB all-reduce of 2 x 2 replicas 0.87x that
// of 4 processes (1.9-2.2x through OpenMPI). Which of the two a gathered all-reduce runs
// through, and whether the engine's own all-reduce beats it, is the chooser's, from what
// the job measured (calibration.h).
std::size_t shared_bytes(const ShmMesh& mesh) { return mesh.ring_bytes() / 2; }
// The shared-memory waits spin and yield as this transport's own (below), then nap.
// Whether a wait on shared memory should spin before it yields its core. A spin is met only
// where the threads it waits for run meanwhile: with T = size x lanes replica threads on C
// cores, each holds a core with a chance of about C / T, and a lane's wait needs its peers in
// the other size - 1 processes. Spin where all of them are more likely than not to hold one,
// (C / T)^(size - 1) >= 1/2: always with a core per thread, and for 2 processes of 2 lanes on
// 2 cores (1/2), but not for 4 processes of one lane there (1/8), whose spins each held a core
// its peers needed: with them, an all-reduce of 4 B took 21-24 us, without them 8-11
// (bench/results/2026-12-07-shm-transport).
bool spins_pay(int size, int lanes) {
  const double threads = static_cast<double>(size) * static_cast<double>(lanes);
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const double on_core = std::min(1.0, cores / threads);
  return std::pow(on_core, size - 1) >= 0.5;
}
// Over shared memory a frame may be this long (a message sent at once, whatever its
// length): an all-reduce of up to about 16 KiB rides in its frames, one round trip.
constexpr std::size_t kSharedEagerBytes = std::size_t{16} << 10;
constexpr std::size_t kMaxAbortText = 4096;

// Polling schedule of exchange(): spin, then yield, then nap.
constexpr auto kSpin = std::chrono::microseconds(20);
// The receiver's MPI copies the data inside MPI_Testall, so a nap stalls a large transfer:
// yield (which keeps it moving) for long, nap only once the wait is clearly not a copy.
constexpr auto kYield = std::chrono::milliseconds(50);
constexpr auto kNap = std::chrono::microseconds(50);
constexpr std::uint32_t kClockEvery = 16;     // polls between clock reads while spinning
constexpr std::uint32_t kControlEvery = 256;  // polls between probes for abort notices
// How long cancelled requests may take to finish before they are freed unfinished.
constexpr auto kCancelGrace = std::chrono::milliseconds(50);

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text, length) + " (MPI error code " + std::to_string(code) + ")";
}

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "thread level " + std::to_string(level);
}

// The process's use of MPI, shared by every transport (MPI can be initialised only once
// per process). Leaked on purpose so that it outlives every static destructor.
struct MpiRuntime {
  std::mutex mu;
  bool initialised_here = false;
  long long transports_made = 0;  // the next transport's generation
  // The first failure of the job that a peer may not survive (a timeout, a lost or broken
  // peer): MPI_Finalize would wait for that peer, so the process ends the job instead.
  std::mutex failure_mu;
  std::string failure;
  bool abort_at_exit = true;  // under failure_mu
};

MpiRuntime& runtime() {
  static auto* const kInstance = new MpiRuntime;
  return *kInstance;
}

void note_job_failure(const std::string& why) noexcept {
  try {
    std::lock_guard lock(runtime().failure_mu);
    if (runtime().failure.empty()) runtime().failure = why;
  } catch (...) {
  }
}

// Finalises MPI at exit if this library initialised it. Made by the first
// make_mpi_transport, so it is destroyed after any static holding a transport; a transport
// destroyed later still (or never) finds MPI finalised and skips its MPI calls.
// After a failure a peer may not survive (a peer stopped or gone), MPI_Finalize would wait
// for it forever: the process says why once and ends the whole job with MPI_Abort instead
// (mpirun then stops every process of it).
struct FinaliseAtExit {
  ~FinaliseAtExit() {
    std::lock_guard lock(runtime().mu);
    if (!runtime().initialised_here) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    std::string failure;
    {
      std::lock_guard failure_lock(runtime().failure_mu);
      if (runtime().abort_at_exit) failure = runtime().failure;
    }
    if (!failure.empty()) {
      std::fprintf(stderr, "replicator: ending the job (MPI_Abort) after: %s\n", failure.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
};

// Watches the deadlines of blocking MPI collectives, which MPI cannot cancel: one thread,
// started at the first arm(), asleep until the earliest armed deadline. A call still armed
// at its deadline gets `expired(lane, what, limit)`, which ends the job. Arming and
// disarming take a mutex and wake the thread only when a deadline earlier than the one it
// sleeps towards is armed (rarely: the deadlines of one job advance with time).
class NativeWatch {
 public:
  using Expired =
      std::function<void(int lane, const std::string& what, std::chrono::milliseconds limit)>;

  NativeWatch(int lanes, Expired expired)
      : armed_(static_cast<std::size_t>(lanes)), expired_(std::move(expired)) {}
  ~NativeWatch() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  NativeWatch(const NativeWatch&) = delete;
  NativeWatch& operator=(const NativeWatch&) = delete;

  void arm(int lane, Clock::time_point deadline, const char* what, std::size_t bytes) {
    std::lock_guard lock(mu_);
    Armed& a = armed_[static_cast<std::size_t>(lane)];
    a = {.active = true, .start = Clock::now(), .deadline = deadline, .what = what, .bytes = bytes};
    if (!thread_.joinable()) thread_ = std::thread([this] { watch(); });
    if (deadline < target_) cv_.notify_one();
  }
  void disarm(int lane) {
    std::lock_guard lock(mu_);
    armed_[static_cast<std::size_t>(lane)].active = false;
  }

 private:
  struct Armed {
    bool active = false;
    Clock::time_point start;
    Clock::time_point deadline;
    const char* what = "";
    std::size_t bytes = 0;
  };

  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      target_ = Clock::time_point::max();
      for (std::size_t l = 0; l < armed_.size(); ++l) {
        const Armed& a = armed_[l];
        if (!a.active) continue;
        if (Clock::now() >= a.deadline) {
          const auto limit = std::chrono::ceil<std::chrono::milliseconds>(a.deadline - a.start);
          const std::string what =
              std::string(a.what) + " of " + std::to_string(a.bytes) + " bytes";
          lock.unlock();
          expired_(static_cast<int>(l), what, limit);  // does not return
          lock.lock();
        }
        target_ = std::min(target_, a.deadline);
      }
      if (target_ == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, target_);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Armed> armed_;                             // by lane, under mu_
  Clock::time_point target_ = Clock::time_point::max();  // what the thread sleeps towards
  bool stop_ = false;
  Expired expired_;
  std::thread thread_;
};

// The MPI type of a native all-reduce's elements, or MPI_DATATYPE_NULL.
MPI_Datatype mpi_type_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;  // 16-bit floats: MPI has no such type
  }
}

// What MPI_Allreduce sums for the chooser (the traits' native_sum_dtypes): every dtype MPI
// has a type for. Sums only: MPI may apply min and max in either operand order on different
// processes, and the min of -0 and +0 (or of two NaNs) depends on that order.
constexpr std::uint32_t kNativeSumDtypes = dtype_bit(DType::kF32) | dtype_bit(DType::kF64) |
                                           dtype_bit(DType::kI32) | dtype_bit(DType::kI64) |
                                           dtype_bit(DType::kU8);

// Initialises MPI with MPI_THREAD_MULTIPLE unless done already; the caller holds
// runtime().mu.
void ensure_initialised() {
  int initialised = 0;
  int finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (finalized) {
    throw ConfigError(
        "mpi engine: MPI was already finalised in this process; make the transport before "
        "MPI_Finalize");
  }
  int provided = MPI_THREAD_SINGLE;
  if (!initialised) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      throw ConfigError("mpi engine: MPI_Init_thread failed: " + mpi_error_string(rc));
    }
    runtime().initialised_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw ConfigError(
        "mpi engine: needs MPI_THREAD_MULTIPLE (every lane is driven by its own thread), but "
        "the MPI library provides " +
        thread_level_name(provided) +
        "; use an MPI built with thread support, or initialise MPI with MPI_Init_thread("
        "MPI_THREAD_MULTIPLE) if the program initialises it itself");
  }
}

class MpiTransport final : public PolledTransport, public NativeCollectives {
 public:
  // Collective over MPI_COMM_WORLD; the caller holds runtime().mu and MPI is initialised.
  // Takes the next generation from `transports_made`.
  MpiTransport(int lanes, std::size_t max_message, long long& transports_made);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_lanes() const override { return static_cast<int>(lanes_.size()); }

  Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override;
  void wait(int lane, Ticket ticket, Clock::time_point deadline) override;
  bool test(int lane, Ticket ticket) override;
  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override;
  TransportTraits traits() const override {
    // Steps through OpenMPI: every step is a round trip, so 2 MiB steps (a 4 MiB
    // all-reduce over two processes moves each part at once) measured best from 1 to
    // 16 MiB. Composed with shared memory (make_mpi_transport), steps of half a ring stay in
    // its rings, with no round trip: the chooser takes them where its calibration says they
    // are cheaper (two processes with a core each: up to 1 MiB in every run, and up to
    // 64 MiB in some, bench/results/2026-12-04-stepped-calibration).
    return {.receives_ahead = false,
            .receives_shorter = true,
            .streamed_results = true,
            .eager_bytes = kMpiEagerBytes,
            .min_step_bytes = std::size_t{2} << 20,
            .max_step_bytes = std::size_t{2} << 20,
            .native_sum_dtypes = kNativeSumDtypes};
  }
  // Makes the mesh of shared memory where every process is on this host and can, else null.
  // Collective over every process (on the control communicator).
  std::unique_ptr<ShmMesh> meet_on_shared_memory();
  void native_all_reduce_f32(float* data, std::size_t count) override;
  void native_all_reduce(int lane, void* data, std::size_t count, DType dtype, ReduceOp op,
                         Clock::time_point deadline) override;

 private:
  // A native collective passed its deadline: says so, and ends the job.
  [[noreturn]] void native_expired(int lane, const std::string& what,
                                   std::chrono::milliseconds limit) noexcept;

  // What one request carries.
  struct Op {
    int peer;
    bool is_recv;
    Ticket ticket;
  };

  // One lane: its communicator and its requests not yet waited for, in posting order, from
  // `head` on; emptied once all are done. The arrays grow to the largest collective seen and
  // are then reused, so the steady state allocates nothing.
  struct alignas(64) Lane {
    MPI_Comm comm = MPI_COMM_NULL;
    std::vector<MPI_Request> requests;
    std::vector<Op> ops;  // one per request
    std::vector<MPI_Status> statuses;
    std::size_t head = 0;
    Ticket posted = 0;        // the last ticket
    std::uint32_t tests = 0;  // test() calls, to look for abort notices every so many
  };

  // The requests one wait() covers: [begin, end) of its lane.
  struct Pending {
    int lane;
    std::size_t begin;
    std::size_t end;
  };
  // The requests of the posts up to `ticket` not yet waited for.
  Pending pending(int lane, Ticket ticket) const;
  // Forgets the requests of `p`, which completed.
  void forget(const Pending& p);

  std::size_t messages_for(std::size_t bytes) const {
    return bytes == 0 ? 1 : (bytes + max_message_ - 1) / max_message_;
  }
  void check_lane(int lane) const;
  void check_peer(int lane, int peer, const char* what) const;

  // Cancels every request of the lane still pending, waits a moment for them, frees the
  // rest, and empties the lane.
  void cancel_pending(const Pending& p);
  // Throws Aborted if a peer's abort notice is waiting on the control communicator.
  void check_control(const Pending& p);

  [[noreturn]] void throw_poisoned() const { poison_.throw_aborted("mpi engine"); }
  [[noreturn]] void fail_post(int lane, int rc, int peer, bool is_recv);
  [[noreturn]] void fail_request(const Pending& p, int rc);
  [[noreturn]] void time_out(const Pending& p, Clock::time_point start, Clock::time_point deadline);
  [[noreturn]] void release(const Pending& p);

  void free_communicators();

  const std::size_t max_message_;
  int rank_ = 0;
  int size_ = 1;
  int data_tag_ = 0;
  int abort_tag_ = 1;
  MPI_Comm control_ = MPI_COMM_NULL;
  std::vector<Lane> lanes_;

  Poison poison_;
  std::mutex mu_;  // guards everything below
  bool abort_sent_ = false;
  // The abort notice's text and its sends to every peer; MPI reads the buffer until the
  // sends complete, so both live as long as the transport (or longer, see the destructor).
  std::unique_ptr<char[]> abort_text_;
  std::vector<MPI_Request> abort_requests_;

  // Last member: its thread stops before the rest is destroyed.
  std::unique_ptr<NativeWatch> watch_;
};

MpiTransport::MpiTransport(int lanes, std::size_t max_message, long long& transports_made)
    : max_message_(max_message) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  try {
    auto dup = [](MPI_Comm* comm, const std::string& what) {
      int rc = MPI_Comm_dup(MPI_COMM_WORLD, comm);
      if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
      if (rc != MPI_SUCCESS) {
        throw Error("mpi engine: duplicating MPI_COMM_WORLD for " + what +
                    " failed (all processes): " + mpi_error_string(rc));
      }
    };
    dup(&control_, "the control communicator");
    // Every process must make the same lanes, or the duplicates below would pair up wrong:
    // agree on min and max first, so that a mismatch is raised everywhere instead of hanging.
    // Agree on the generation too (the largest count of transports made so far).
    long long mine[3] = {lanes, -lanes, -transports_made};
    long long agreed[3] = {0, 0, 0};
    const int rc = MPI_Allreduce(mine, agreed, 3, MPI_LONG_LONG, MPI_MIN, control_);
    if (rc != MPI_SUCCESS) {
      throw Error("mpi engine: agreeing on the number of lanes failed (all processes): " +
                  mpi_error_string(rc));
    }
    if (agreed[0] != -agreed[1]) {
      throw ConfigError("mpi engine: the processes asked for different numbers of lanes (from " +
                        std::to_string(agreed[0]) + " to " + std::to_string(-agreed[1]) +
                        "; this process: " + std::to_string(lanes) +
                        "); every process must run the same number of local replicas");
    }
    const long long generation = -agreed[2];
    transports_made = generation + 1;
    int* tag_ub = nullptr;
    int has_tag_ub = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
    const long long tag_pairs = has_tag_ub ? (static_cast<long long>(*tag_ub) + 1) / 2 : 16384;
    data_tag_ = static_cast<int>(2 * (generation % tag_pairs));
    abort_tag_ = data_tag_ + 1;
    if (lanes < 1) {
      throw InvalidArgument("mpi engine: a transport needs at least 1 lane, got " +
                            std::to_string(lanes));
    }
    lanes_ = std::vector<Lane>(static_cast<std::size_t>(lanes));
    for (int l = 0; l < lanes; ++l) {
      dup(&lanes_[l].comm, "lane " + std::to_string(l));
      // Enough for one send and one receive with every process; more grows once.
      lanes_[l].requests.reserve(4 * static_cast<std::size_t>(size_) + 4);
      lanes_[l].ops.reserve(lanes_[l].requests.capacity());
      lanes_[l].statuses.resize(lanes_[l].requests.capacity());
    }
    abort_requests_.reserve(static_cast<std::size_t>(size_));
    watch_ = std::make_unique<NativeWatch>(
        lanes, [this](int lane, const std::string& what, std::chrono::milliseconds limit) {
          native_expired(lane, what, limit);
        });
  } catch (...) {
    free_communicators();
    throw;
  }
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI_Finalize released everything
  bool notice_in_flight = false;
  for (MPI_Request& request : abort_requests_) {
    int done = 0;
    if (request != MPI_REQUEST_NULL) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (request != MPI_REQUEST_NULL) {
      MPI_Request_free(&request);
      notice_in_flight = true;
    }
  }
  // MPI may still read the notice after this object is gone: leave it its few bytes.
  if (notice_in_flight) abort_text_.release();
  // Receives posted ahead that no peer will ever match (the next collective's frames).
  for (int lane = 0; lane < num_lanes(); ++lane) cancel_pending({lane, 0, 0});
  free_communicators();
}

std::unique_ptr<ShmMesh> MpiTransport::meet_on_shared_memory() {
  // Its waits poll the rings and nap (wait() here), never park on their bells.
  std::unique_ptr<ShmMesh> mesh = ShmMesh::try_make(rank_, size_, num_lanes(), /*parks=*/false);
  const std::string offer = mesh ? mesh->offer() : std::string();
  // Everyone's offer: lengths, then the texts.
  int length = static_cast<int>(offer.size());
  std::vector<int> lengths(static_cast<std::size_t>(size_));
  if (MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, control_) != MPI_SUCCESS) {
    throw Error("mpi engine: exchanging the processes' shared-memory segments failed");
  }
  std::vector<int> offsets(static_cast<std::size_t>(size_), 0);
  for (std::size_t q = 1; q < offsets.size(); ++q) offsets[q] = offsets[q - 1] + lengths[q - 1];
  std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
  if (MPI_Allgatherv(offer.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                     MPI_CHAR, control_) != MPI_SUCCESS) {
    throw Error("mpi engine: exchanging the processes' shared-memory segments failed");
  }
  std::vector<std::string> offers(static_cast<std::size_t>(size_));
  for (std::size_t q = 0; q < offers.size(); ++q) {
    offers[q] =
        all.substr(static_cast<std::size_t>(offsets[q]), static_cast<std::size_t>(lengths[q]));
  }
  int usable = mesh && mesh->attach_offers(offers) ? 1 : 0;
  int everyone = 0;
  if (MPI_Allreduce(&usable, &everyone, 1, MPI_INT, MPI_MIN, control_) != MPI_SUCCESS) {
    throw Error("mpi engine: agreeing on shared memory failed");
  }
  if (!everyone) return nullptr;
  // Every process has attached by now: the names can go.
  mesh->unlink();
  return mesh;
}

void MpiTransport::free_communicators() {
  for (Lane& lane : lanes_) {
    if (lane.comm != MPI_COMM_NULL) MPI_Comm_free(&lane.comm);
  }
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

void MpiTransport::check_lane(int lane) const {
  if (lane < 0 || lane >= num_lanes()) {
    throw InvalidArgument("mpi engine: exchange on lane " + std::to_string(lane) +
                          ", but the transport has lanes 0.." + std::to_string(num_lanes() - 1));
  }
}

void MpiTransport::check_peer(int lane, int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument("mpi engine: exchange on lane " + std::to_string(lane) + ": a " + what +
                          " names process " + std::to_string(peer) + ", but ranks are 0.." +
                          std::to_string(size_ - 1));
  }
}

Transport::Ticket MpiTransport::post(int lane, std::span<const SendOp> sends,
                                     std::span<const RecvOp> recvs) {
  check_lane(lane);
  std::size_t count = 0;  // MPI messages
  for (const RecvOp& op : recvs) {
    check_peer(lane, op.peer, "receive");
    count += messages_for(op.bytes);
  }
  for (const SendOp& op : sends) {
    check_peer(lane, op.peer, "send");
    count += messages_for(op.bytes);
  }
  if (poison_.is_set()) {
    cancel_pending({lane, 0, 0});
    throw_poisoned();
  }
  Lane& l = lanes_[lane];
  const Ticket ticket = ++l.posted;
  if (count == 0) return ticket;
  if (l.requests.size() - l.head + count > static_cast<std::size_t>(INT_MAX)) {
    throw InvalidArgument("mpi engine: exchange on lane " + std::to_string(lane) + " of " +
                          std::to_string(count) + " more messages, more than MPI can wait on");
  }
  // Receives first, so that no send of a peer waits for them to be posted.
  const auto start = [&](bool is_recv, int peer, std::byte* data, std::size_t bytes) {
    do {
      const std::size_t chunk = std::min(bytes, max_message_);
      MPI_Request request = MPI_REQUEST_NULL;
      const int rc = is_recv ? MPI_Irecv(data, static_cast<int>(chunk), MPI_BYTE, peer, data_tag_,
                                         l.comm, &request)
                             : MPI_Isend(data, static_cast<int>(chunk), MPI_BYTE, peer, data_tag_,
                                         l.comm, &request);
      if (rc != MPI_SUCCESS) fail_post(lane, rc, peer, is_recv);
      l.requests.push_back(request);
      l.ops.push_back({peer, is_recv, ticket});
      data += chunk;
      bytes -= chunk;
    } while (bytes > 0);
  };
  for (const RecvOp& op : recvs) start(true, op.peer, static_cast<std::byte*>(op.data), op.bytes);
  // MPI only reads from the buffer of a send.
  for (const SendOp& op : sends) {
    start(false, op.peer, static_cast<std::byte*>(const_cast<void*>(op.data)), op.bytes);
  }
  if (l.statuses.size() < l.requests.size()) l.statuses.resize(l.requests.capacity());
  return ticket;
}

MpiTransport::Pending MpiTransport::pending(int lane, Ticket ticket) const {
  const Lane& l = lanes_[lane];
  std::size_t end = l.head;
  while (end < l.ops.size() && l.ops[end].ticket <= ticket) ++end;
  return {lane, l.head, end};
}

void MpiTransport::forget(const Pending& p) {
  Lane& l = lanes_[p.lane];
  l.head = p.end;
  if (l.head == l.requests.size()) {
    l.requests.clear();
    l.ops.clear();
    l.head = 0;
  }
}

bool MpiTransport::test(int lane, Ticket ticket) {
  check_lane(lane);
  if (poison_.is_set()) {
    cancel_pending({lane, 0, 0});
    throw_poisoned();
  }
  const Pending p = pending(lane, ticket);
  if (p.end == p.begin) return true;
  Lane& l = lanes_[lane];
  int done = 0;
  const int rc = MPI_Testall(static_cast<int>(p.end - p.begin), l.requests.data() + p.begin, &done,
                             l.statuses.data());
  if (rc != MPI_SUCCESS) fail_request(p, rc);
  if (done != 0) {
    forget(p);
    return true;
  }
  if (++l.tests % kControlEvery == 0) check_control(p);
  return false;
}

void MpiTransport::wait(int lane, Ticket ticket, Clock::time_point deadline) {
  check_lane(lane);
  if (poison_.is_set()) {
    cancel_pending({lane, 0, 0});
    throw_poisoned();
  }
  Lane& l = lanes_[lane];
  const Pending p = pending(lane, ticket);
  if (p.end == p.begin) return;

  // Read at the first look at the clock: a wait that ends within kClockEvery polls (a small
  // message between spinning processes) reads no clock at all.
  Clock::time_point start{};
  MPI_Request* const requests = l.requests.data() + p.begin;
  const int count = static_cast<int>(p.end - p.begin);
  bool spinning = true;
  for (std::uint32_t polls = 1;; ++polls) {
    int done = 0;
    const int rc = MPI_Testall(count, requests, &done, l.statuses.data());
    if (rc != MPI_SUCCESS) fail_request(p, rc);
    if (done != 0) return forget(p);
    if (spinning && polls % kClockEvery != 0) continue;

    const Clock::time_point now = Clock::now();
    if (start == Clock::time_point{}) start = now;
    if (now >= deadline) time_out(p, start, deadline);
    if (poison_.is_set()) release(p);
    const auto waited = now - start;
    const bool napping = waited >= kYield;
    if (napping || polls % kControlEvery == 0) check_control(p);
    if (waited < kSpin) continue;
    spinning = false;
    if (napping) {
      std::this_thread::sleep_for(kNap);
    } else {
      sched_yield();
    }
  }
}

void MpiTransport::cancel_pending(const Pending& p) {
  Lane& l = lanes_[p.lane];
  MPI_Request* const requests = l.requests.data();
  const std::size_t count = l.requests.size();
  for (std::size_t i = l.head; i < count; ++i) {
    if (requests[i] != MPI_REQUEST_NULL) MPI_Cancel(&requests[i]);
  }
  // A receive not yet matched cancels at once. A send may not be cancellable (OpenMPI
  // cannot cancel sends) and a matched transfer may still be under way: give them a
  // moment, then free them unfinished rather than wait for a peer that may never come.
  const Clock::time_point until = Clock::now() + kCancelGrace;
  for (;;) {
    bool all_done = true;
    for (std::size_t i = l.head; i < count; ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        requests[i] = MPI_REQUEST_NULL;  // completed in error: MPI freed it
      } else if (!done) {
        all_done = false;
      }
    }
    if (all_done || Clock::now() >= until) break;
    sched_yield();
  }
  for (std::size_t i = l.head; i < count; ++i) {
    if (requests[i] != MPI_REQUEST_NULL) MPI_Request_free(&requests[i]);
  }
  l.requests.clear();
  l.ops.clear();
  l.head = 0;
}

void MpiTransport::release(const Pending& p) {
  cancel_pending(p);
  throw Aborted(poison_.reason(), poison_.cause_replica());
}

void MpiTransport::check_control(const Pending& p) {
  int found = 0;
  MPI_Message message;
  MPI_Status status;
  int rc = MPI_Improbe(MPI_ANY_SOURCE, abort_tag_, control_, &found, &message, &status);
  if (rc == MPI_SUCCESS && !found) return;
  std::string text;
  if (rc == MPI_SUCCESS) {
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    text.resize(static_cast<std::size_t>(std::max(length, 0)));
    rc = MPI_Mrecv(text.data(), length, MPI_CHAR, &message, MPI_STATUS_IGNORE);
  }
  if (rc != MPI_SUCCESS) {
    const std::string why =
        "mpi engine: exchange on lane " + std::to_string(p.lane) +
        ": receiving abort notices from the other processes failed: " + mpi_error_string(rc) +
        "; the transport is poisoned, restart the job";
    poison_.set(why);
    cancel_pending(p);
    throw Error(why);
  }
  const AbortNotice notice = decode_abort_notice(text);
  const std::string why = "process " + std::to_string(status.MPI_SOURCE) + " failed: " + notice.why;
  poison_.set(why, notice.replica);
  cancel_pending(p);
  throw Aborted(why, notice.replica);
}

void MpiTransport::fail_post(int lane, int rc, int peer, bool is_recv) {
  const std::string why = "mpi engine: exchange on lane " + std::to_string(lane) + ": posting a " +
                          (is_recv ? "receive from" : "send to") + " process " +
                          std::to_string(peer) + " failed: " + mpi_error_string(rc) +
                          "; the transport is poisoned, restart the job";
  poison_.set(why);
  note_job_failure(why);
  cancel_pending({lane, 0, 0});
  throw PeerLost(why, peer);
}

void MpiTransport::fail_request(const Pending& p, int rc) {
  const Lane& l = lanes_[p.lane];
  int code = rc;
  int peer = -1;
  bool is_recv = false;
  if (rc == MPI_ERR_IN_STATUS) {
    for (std::size_t i = p.begin; i < p.end; ++i) {
      const int error = l.statuses[i - p.begin].MPI_ERROR;
      if (error != MPI_SUCCESS && error != MPI_ERR_PENDING) {
        code = error;
        peer = l.ops[i].peer;
        is_recv = l.ops[i].is_recv;
        break;
      }
    }
  }
  std::string where;
  if (peer >= 0) {
    where =
        std::string(is_recv ? "receiving from" : "sending to") + " process " + std::to_string(peer);
  } else {
    std::vector<int> peers;
    for (std::size_t i = p.begin; i < p.end; ++i) peers.push_back(l.ops[i].peer);
    where = "exchanging with processes " + join_ranks(std::move(peers));
  }
  const std::string why = "mpi engine: exchange on lane " + std::to_string(p.lane) +
                          " failed while " + where + ": " + mpi_error_string(code) +
                          "; the transport is poisoned, restart the job";
  poison_.set(why);
  note_job_failure(why);
  cancel_pending(p);
  if (peer >= 0) throw PeerLost(why, peer);
  throw Error(why);
}

void MpiTransport::time_out(const Pending& p, Clock::time_point start, Clock::time_point deadline) {
  // MPI_Testall leaves the array untouched until all are done: test each to see which
  // peers delivered. If every receive completed, the peers that did not take their data
  // are the ones missing.
  Lane& l = lanes_[p.lane];
  MPI_Request* const requests = l.requests.data();
  std::vector<int> missing_recv;
  std::vector<int> missing_send;
  for (std::size_t i = p.begin; i < p.end; ++i) {
    int done = 0;
    if (requests[i] != MPI_REQUEST_NULL) MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
    if (requests[i] == MPI_REQUEST_NULL) continue;
    (l.ops[i].is_recv ? missing_recv : missing_send).push_back(l.ops[i].peer);
  }
  const bool receives_done = missing_recv.empty();
  std::vector<int> missing = receives_done ? std::move(missing_send) : std::move(missing_recv);
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());

  const auto limit = std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - start),
                              std::chrono::milliseconds(0));
  const std::string why = exchange_timeout_text("mpi", p.lane, missing, receives_done, limit);
  poison_.set(why);
  note_job_failure(why);
  cancel_pending(p);
  throw Timeout(why, "exchange", 0, limit, std::move(missing));
}

void MpiTransport::abort(const std::string& why, std::optional<int> cause_replica) noexcept {
  try {
    poison_.set("process " + std::to_string(rank_) + " failed: " + why, cause_replica);
    std::lock_guard lock(mu_);
    if (abort_sent_) return;
    abort_sent_ = true;
    const std::string notice =
        encode_abort_notice(cause_replica, std::string_view(why).substr(0, kMaxAbortText));
    const std::size_t length = notice.size();
    abort_text_ = std::make_unique<char[]>(length + 1);
    notice.copy(abort_text_.get(), length);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(abort_text_.get(), static_cast<int>(length), MPI_CHAR, peer, abort_tag_,
                    control_, &request) == MPI_SUCCESS) {
        abort_requests_.push_back(request);  // reserved for size_ - 1: does not allocate
      }
    }
  } catch (...) {
    // Out of memory or a broken mutex: the peers go unwarned, but this process is poisoned.
    poison_.set(why);
  }
}

void MpiTransport::native_all_reduce_f32(float* data, std::size_t count) {
  if (poison_.is_set()) throw_poisoned();
  const std::size_t step = std::max<std::size_t>(max_message_ / sizeof(float), 1);
  for (std::size_t done = 0; done < count;) {
    const std::size_t chunk = std::min(count - done, step);
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(chunk), MPI_FLOAT,
                                 MPI_SUM, lanes_[0].comm);
    if (rc != MPI_SUCCESS) {
      const std::string why = "mpi engine: MPI_Allreduce of " + std::to_string(count) +
                              " floats on lane 0 failed (all processes): " + mpi_error_string(rc) +
                              "; the transport is poisoned, restart the job";
      poison_.set(why);
      throw Error(why);
    }
    done += chunk;
  }
}

void MpiTransport::native_all_reduce(int lane, void* data, std::size_t count, DType dtype,
                                     ReduceOp op, Clock::time_point deadline) {
  check_lane(lane);
  if (op != ReduceOp::kSum || (kNativeSumDtypes & dtype_bit(dtype)) == 0) {
    throw InvalidArgument("mpi engine: MPI_Allreduce cannot reduce " +
                          std::string(to_string(dtype)) + " with op " + std::string(to_string(op)));
  }
  if (poison_.is_set()) throw_poisoned();
  const MPI_Datatype type = mpi_type_of(dtype);
  const std::size_t size = dtype_size(dtype);
  const std::size_t step = std::max<std::size_t>(max_message_ / size, 1);
  auto* bytes = static_cast<std::byte*>(data);
  watch_->arm(lane, deadline, "MPI_Allreduce", count * size);
  for (std::size_t done = 0; done < count;) {
    const std::size_t chunk = std::min(count - done, step);
    const int rc = MPI_Allreduce(MPI_IN_PLACE, bytes + done * size, static_cast<int>(chunk), type,
                                 MPI_SUM, lanes_[static_cast<std::size_t>(lane)].comm);
    if (rc != MPI_SUCCESS) {
      watch_->disarm(lane);
      const std::string why = "mpi engine: MPI_Allreduce of " + std::to_string(count) + " " +
                              std::string(to_string(dtype)) + " on lane " + std::to_string(lane) +
                              " failed: " + mpi_error_string(rc) +
                              "; the transport is poisoned, restart the job";
      poison_.set(why);
      note_job_failure(why);
      throw Error(why);
    }
    done += chunk;
  }
  watch_->disarm(lane);
}

void MpiTransport::native_expired(int lane, const std::string& what,
                                  std::chrono::milliseconds limit) noexcept {
  std::string why;
  try {
    why = "mpi engine: " + what + " on lane " + std::to_string(lane) + " did not complete within " +
          std::to_string(limit.count()) + " ms: " +
          (size_ == 2 ? "process " + std::to_string(1 - rank_) + " did"
                      : std::string("some of the other processes did")) +
          " not take part in time (stopped, or far slower); MPI cannot cancel a collective, so "
          "process " +
          std::to_string(rank_) + " ends the job";
  } catch (...) {
    why = "mpi engine: a collective of the engine itself passed its deadline; ending the job";
  }
  poison_.set(why);
  std::fprintf(stderr, "replicator: %s (MPI_Abort)\n", why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; if it ever does, the process still ends
}

}  // namespace

void set_abort_job_at_exit(bool enabled) {
  std::lock_guard lock(runtime().failure_mu);
  runtime().abort_at_exit = enabled;
}

std::unique_ptr<Transport> make_mpi_transport(const MpiOptions& options) {
  static FinaliseAtExit finalise_at_exit;
  const std::size_t max_message =
      std::clamp<std::size_t>(options.max_message_bytes, 1, static_cast<std::size_t>(INT_MAX));
  std::lock_guard lock(runtime().mu);
  ensure_initialised();
  auto transport =
      std::make_unique<MpiTransport>(options.lanes, max_message, runtime().transports_made);
  if (!options.shared_memory || transport->size() == 1) return transport;
  std::unique_ptr<ShmMesh> mesh = transport->meet_on_shared_memory();
  if (!mesh) return transport;
  const std::size_t split = shared_bytes(*mesh);
  ShmOptions shared{
      .engine = "mpi",
      .eager_bytes = std::min(kSharedEagerBytes, split),
      .spin = spins_pay(transport->size(), options.lanes) ? kSpin : std::chrono::microseconds(0),
      .yield = kYield,
      .on_fatal = note_job_failure};
  return std::make_unique<SplitTransport>(
      std::move(transport), make_shm_transport(std::move(mesh), std::move(shared)), split);
}

}  // namespace replicator::detail
