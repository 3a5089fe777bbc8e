// Configuration of a Replicator: a plain struct with defaults. Environment variables and
// command-line flags are parsed in exactly one place, `Config::set`, which both
// `from_env` and the `replicator` command's flags call.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace replicator {

// What carries bytes between processes.
enum class Engine {
  kLocal,  // one process, shared memory only
  kMpi,    // OpenMPI; processes started by mpirun/srun
  kGloo,   // TCP; processes meet through a store (shared folder or Redis)
};

struct Config {
  // ---- the job: its replicas, the engine between its processes, deadlines and waiting ----
  // Number of replicas (threads) in this process. A job has R = processes x local_replicas
  // replicas; every process runs the same number.
  int local_replicas = 1;
  Engine engine = Engine::kLocal;
  // Default deadline of every blocking call; a call's own `timeout` option overrides it.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // How long a replica waiting for its peers spins before it parks on a futex. When the
  // host has more replica threads than cores (local_replicas x host_processes), waiting
  // replicas yield instead of spinning.
  std::chrono::microseconds spin{50};
  // Processes of this job on this host (mpirun tells it; `replicator launch` sets it).
  int host_processes = 1;
  // The devices replicas are bound to (replicator/device.h): "host" (none), "fake:N" (the
  // fake device, for tests), "cuda" (every visible GPU) or "cuda:N". Replica r gets device
  // r mod N; several replicas may share one device. ReplicaContext::device() tells it.
  std::string devices = "host";

  // ---- how the engine carries bytes between the processes of one host ----
  struct Transport {
    // Where every process of the job runs on this host (same hostname, boot and
    // namespaces), messages go through shared memory (/dev/shm): gloo, all of them instead
    // of TCP; mpi, those that half a ring holds (512 KiB in a small job: frames, small and
    // middle collectives) instead of MPI. Off: never.
    bool shared_memory = true;
    // Where the job keeps what it measured of its transport at start (its calibration, good
    // for a day; src/runtime/calibration.h): a folder, empty for $XDG_CACHE_HOME/replicator
    // (else ~/.cache/replicator), or "off": measure nothing, and choose algorithms by fixed
    // limits. Process 0's setting decides for the job.
    std::string calibration;
  } transport;

  // ---- the gloo engine: who this process is and where the processes meet ----
  // (mpi takes rank and size from MPI.)
  struct Gloo {
    // This process's rank and the number of processes.
    int rank = 0;
    int world_size = 1;
    // The rendezvous store ("file:///shared/dir" or "redis://host:port").
    std::string store;
    // The address the other processes reach this one at.
    std::string host = "127.0.0.1";
    // A job name that keeps jobs sharing a store apart.
    std::string job = "replicator";
  } gloo;

  // ---- elastic jobs (`replicator launch --nnodes`, gloo only) ----
  struct Elastic {
    // The generation this process belongs to (-1: the job is not elastic) and how many
    // restarts came before it.
    int generation = -1;
    int restart_count = 0;
    // The heartbeat its agent watches: every `heartbeat` (0: none) a counter is written to
    // the rendezvous store at `heartbeat_store` (replicator/rendezvous/store.h).
    std::chrono::milliseconds heartbeat{0};
    std::string heartbeat_store;
  } elastic;

  // ---- what the job tells about itself: flight recorder, timeline, stragglers ----
  struct Trace {
    // How many of its latest collectives each replica's flight recorder keeps (a ring; 0
    // turns the recorder off). Their summary ends the message of a Timeout,
    // CollectiveMismatch, PeerLost or Aborted that run() throws.
    int flight_recorder_size = 256;
    // A folder for flight-recorder dumps (JSON, one file per dump, named
    // flight_recorder.rank<R>.pid<P>.<N>.json): written when run() throws one of those
    // errors and on SIGUSR1. Created if missing. Empty: no file (SIGUSR1 dumps to stderr).
    std::string dir;
    // A Chrome trace-event JSON file of every step and collective of every replica (opens
    // in Perfetto and chrome://tracing). In a job of several processes each process writes
    // its own, with ".rank<R>" before the extension (run.json: run.rank0.json, ...).
    // Empty: none.
    std::string timeline;
    // Whether SIGUSR1 makes a live Replicator dump its flight recorder (see README).
    bool signal = true;
    // When a replica has waited this long at a collective for peers that have not arrived,
    // its process prints one line to stderr (once per collective) naming the missing
    // replicas, their last collective with its call site, and whether their process is
    // alive, stopped or gone (docs/debugging.md). Zero: a quarter of `timeout`, at most
    // 5 s; negative: never.
    std::chrono::milliseconds straggler_after{0};
  } trace;

  // trace.straggler_after as it applies (zero resolved); zero when off.
  std::chrono::milliseconds straggler_limit() const;

  // Defaults overridden by REPLICATOR_<OPTION> for every option of `options()`
  // (REPLICATOR_LOCAL_REPLICAS, REPLICATOR_TIMEOUT such as "30s", REPLICATOR_ENGINE,
  // REPLICATOR_RANK, REPLICATOR_WORLD_SIZE, REPLICATOR_STORE, REPLICATOR_TRACE_DIR,
  // REPLICATOR_TIMELINE, REPLICATOR_FLIGHT_RECORDER_SIZE, ...). A process started by
  // mpirun or srun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set, or SLURM_PROCID with
  // an MPI plugin in SLURM_MPI_TYPE) gets the mpi engine
  // unless REPLICATOR_ENGINE says otherwise. Throws ConfigError naming the variable and
  // the bad value.
  static Config from_env();

  // Sets one option by name ("local-replicas", "timeout", "spin", "host-processes", "devices",
  // "engine", "rank", "world-size", "store", "host", "job", "shared-memory", "generation",
  // "restart-count", "heartbeat", "heartbeat-store", "flight-recorder-size", "trace-dir",
  // "timeline", "trace-signal", "straggler-after") from its text form. The names are flat
  // whatever the group of their field: "rank" sets gloo.rank, "trace-dir" trace.dir,
  // "heartbeat" elastic.heartbeat, "calibration" transport.calibration. Throws ConfigError
  // for an unknown name or an invalid value.
  void set(std::string_view name, std::string_view value);

  // The option names `set` accepts, with a one-line description each.
  static std::vector<std::pair<std::string, std::string>> options();

  // Throws ConfigError if a field is out of range (local_replicas < 1, timeout <= 0, ...),
  // or an elastic job (elastic.generation >= 0) is asked to run on another engine than gloo.
  void validate() const;
};

std::string_view to_string(Engine engine);

// Parses a duration such as "250ms", "30s", "2m", "10us"; a bare number is milliseconds.
// Throws ConfigError mentioning `what` on bad input.
std::chrono::microseconds parse_duration(std::string_view text, std::string_view what);

}  // namespace replicator
