// The gloo transport; the contract is in gloo_transport.h and transport.h.
//
// post() makes one Gloo unbound buffer per message, posts every receive, then every send, all
// on one slot of the lane's context (Gloo matches the messages of one slot between two
// processes in the order they were posted); wait() waits for each message of the posts it
// covers, in posting order, with the time left. Gloo has no wait-for-any, so the waits run
// in order; a failure behind a wait still surfaces,
// because a process that fails closes all its connections (see below), which fails the
// wait in progress on every peer that talks to it.
//
// Gloo's waits end in one of three ways, and each is mapped by the clock, never by the text
// of Gloo's message: the wait returns false (abort() woke it: Aborted); it throws
// gloo::IoException after the deadline (Gloo's own timeout, which also closes every pair of
// the lane: Timeout); it throws before the deadline (a connection closed or reset: the peer
// died, PeerLost, or it announced a failure in the store, Aborted).
//
// Failing, or abort(), poisons the transport: the reason goes into the store under
// "<job>/abort/<rank>" (a dead process leaves none, which is how the peers tell the two
// apart: a peer whose connection closed looks for the notice for up to 200 ms, since after a
// Gloo timeout the notice trails the close), every connection of every lane is closed, and
// the waits in progress on other lanes are woken. Closing comes before waking, and before a failed
// exchange destroys its buffers, so that Gloo's event loop never writes into memory of an exchange
// that has returned.
//
// Known limit of Gloo 0.5: a message whose transfer was under way when its peer died is not
// failed by Gloo (only messages still waiting for their peer are); such a wait ends at the
// deadline, as a Timeout naming that peer.
//
// Shared memory: every process offers its segment in the store ("<job>/shm/<rank>": host
// identity, segment name, pid) before it connects; after the connecting barrier each one
// attaches to all the others' segments if all are on its host, says whether it could
// ("<job>/shm-ok/<rank>"), and the job uses shared memory only if every process could. Then
// make_gloo_transport composes this transport with the shm transport, which carries every
// message (src/engines/split_transport.h), and the Gloo connections stay open, unused, to be
// closed by a failure as before.

#include "src/engines/gloo/gloo_transport.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "src/comm/poison.h"
#include "src/engines/abort_notice.h"
#include "src/engines/exchange_errors.h"
#include "src/engines/gloo/gloo.h"
#include "src/engines/gloo/gloo_store.h"
#include "src/engines/self_copy.h"
#include "src/engines/shm/shm_mesh.h"
#include "src/engines/shm/shm_transport.h"
#include "src/engines/split_transport.h"
#include "src/rendezvous/heartbeat.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;
using std::chrono::milliseconds;

// The slot of every exchange. Gloo's own collectives use slots with prefixes 0x01..0x08 in
// the top byte (gloo/types.h), so native_all_reduce_f32 on lane 0 never meets these messages.
constexpr std::uint64_t kExchangeSlot = std::uint64_t{0x7e} << 56;
constexpr std::uint32_t kAllreduceTag = 1;
// Longest single wait handed to Gloo: it adds the wait to now() and must not overflow.
constexpr milliseconds kMaxWait = std::chrono::hours(100);
constexpr std::size_t kMaxAbortText = 4096;
// How long a process whose peer's connection closed looks for the peer's failure notice
// before it calls the peer lost. A peer that timed out writes its notice just after Gloo
// closed its connections (Gloo closes them inside the wait that timed out), so the notice
// can trail the close by a moment; a dead peer never writes one, and costs this much.
constexpr milliseconds kAnnounceGrace{200};
// How long a clean close waits for the peers' goodbyes (see ~GlooTransport).
constexpr milliseconds kCloseLinger{2000};
constexpr milliseconds kAnnouncePoll{2};
// Steps of a pipelined all-reduce (see traits()).
constexpr std::size_t kMinPipelineBytes = std::size_t{64} << 10;
constexpr std::size_t kMaxPipelineBytes = std::size_t{4} << 20;
// Over shared memory a message costs a copy into the ring and a copy out, and a handshake of
// about a microsecond: a frame up to OpenMPI's eager size (4 KB, a page) costs no more to
// move than a tiny one, and only its used bytes are copied (receives may be longer).
constexpr std::size_t kSharedEagerBytes = 4000;
// A wait on shared memory, once it has spun, yields its core for this long before it parks,
// where the job's threads have a core each: nobody else wants that core, so yielding costs
// nothing and reacts at once, while a parked thread costs its peer a wake-up call and
// itself the wake-up of an idle core (on a virtual machine, a halted vCPU: tens of µs).
// The mpi transport waits the same way (its kYield).
constexpr std::chrono::microseconds kSharedYield = std::chrono::milliseconds(50);

// Gloo writes to sockets a dead peer may have closed, without MSG_NOSIGNAL: with SIGPIPE's
// default action that write would kill this process instead of failing the exchange.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
        (current.sa_flags & SA_SIGINFO) == 0) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

// ---- transport -----------------------------------------------------------------------

class GlooTransport final : public Transport, public NativeCollectives, public PointToPoint {
 public:
  // Meets the other processes in the store and connects every lane; see make_gloo_transport.
  GlooTransport(const GlooOptions& options, std::unique_ptr<GlooStore> store);
  // A clean close (the transport not poisoned) says goodbye in the store, then keeps the
  // connections open until every peer has said it too or failed, for at most kCloseLinger:
  // a peer may still be finishing the run this process has finished (a mismatch that this
  // process saw first releases that peer's replicas one lane after another), and a
  // connection closed under it would turn its CollectiveMismatch into PeerLost.
  // MPI_Finalize waits likewise.
  ~GlooTransport() override { linger(); }
  GlooTransport(const GlooTransport&) = delete;
  GlooTransport& operator=(const GlooTransport&) = delete;

  std::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_lanes() const override { return num_lanes_; }

  Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override;
  void wait(int lane, Ticket ticket, Clock::time_point deadline) override;
  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override;
  // Every message costs a handshake of Gloo's event loops and wakes the waiting thread
  // (tens of µs, more when the cores are busy), which outweighs overlapping a step's
  // transfer with the reduction of the one before: one step per part up to 4 MiB, then
  // steps of 4 MiB (against two steps per part of up to 1 MiB, 4 MiB all-reduces over two
  // processes measured ~10 % faster and 16-64 MiB ones the same).
  //
  // Gloo's own all-reduce is not faster than ours (bench/compare_engines.sh), and its
  // messages would have to share the lanes' tags with ours: the chooser never asks for it
  // (no native_sum_dtypes).
  TransportTraits traits() const override {
    return {.receives_ahead = true,
            .receives_shorter = false,
            .streamed_results = false,
            .eager_bytes = 0,
            .min_step_bytes = kMinPipelineBytes,
            .max_step_bytes = kMaxPipelineBytes};
  }
  void native_all_reduce_f32(float* data, std::size_t count) override;

  // Point-to-point messages (transport.h) on lane 0's connections, in slots of their own.
  PointToPoint* point_to_point() override { return this; }
  void send(int peer, std::uint64_t tag, const Call& call, const void* data,
            Clock::time_point deadline) override;
  void recv(int peer, std::uint64_t tag, const Call& call, void* data,
            Clock::time_point deadline) override;
  void native_all_reduce(int, void*, std::size_t, DType, ReduceOp, Clock::time_point) override {
    throw InvalidArgument("gloo engine: the all-reduce of the engine itself is only benchmarked");
  }
  // The mesh of shared memory the rendezvous settled on (every process on this host, and
  // every one attached), or null; once.
  std::unique_ptr<ShmMesh> take_shared_memory() { return std::move(mesh_); }

 private:
  struct Message {
    int peer;
    bool is_recv;
    Ticket ticket;
  };

  // One lane: its context, and the buffers of the messages posted and not all waited for,
  // in posting order (those before `head` have completed); emptied once all have. The
  // vectors keep their capacity, so the steady state only allocates Gloo's own small objects.
  struct alignas(64) Lane {
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;
    std::vector<Message> messages;  // one per buffer
    std::size_t head = 0;
    Ticket posted = 0;   // the last ticket
    Ticket covered = 0;  // what the wait in progress waits for
    std::mutex mu;       // guards `waiting` and, while it is true, `buffers`
    bool waiting = false;
  };

  void connect_lanes(const GlooOptions& options, Clock::time_point deadline);
  // Makes this process's segment and offers it in the store (or says it has none).
  std::unique_ptr<ShmMesh> offer_shared_memory(const GlooOptions& options);
  // Attaches to every peer's segment where all processes offered one on this host; keeps the
  // mesh only if every process could (see the top of the file).
  void settle_shared_memory(std::unique_ptr<ShmMesh> mesh);
  // Returns once every process has connected all its lanes.
  void barrier(const std::string& where, Clock::time_point deadline);
  std::string key(const std::string& what, int rank) const {
    return store_->key(what + "/" + std::to_string(rank));
  }
  void check_lane(int lane) const;
  void check_peer(int lane, int peer, const char* what) const;

  // Poisons the transport with `reason` (the first reason is kept), announces `why` in the
  // store, closes every connection and wakes the waits in progress. Never throws.
  // Poisons with `reason` and announces `why` (with `cause_replica`) to the peers.
  void fail(const std::string& reason, const std::string& why,
            std::optional<int> cause_replica = std::nullopt) noexcept;
  // Ends the wait on `lane`; frees the buffers if all have completed or `all`.
  void finish(Lane& lane, bool all) noexcept;
  // Throws Aborted for a poisoned transport, once Gloo can no longer touch the lane's buffers.
  [[noreturn]] void drop_poisoned(Lane& lane);
  std::string reason() const { return poison_.reason(); }
  // The failure `peer` announced in the store, if any.
  std::optional<AbortNotice> announced_failure(int peer) noexcept;
  // See ~GlooTransport. Never throws.
  void linger() noexcept;

  [[noreturn]] void throw_poisoned() const { poison_.throw_aborted("gloo engine"); }
  [[noreturn]] void fail_message(int lane, std::size_t index, const std::exception_ptr& error,
                                 Clock::time_point start, Clock::time_point deadline);
  [[noreturn]] void time_out(int lane, std::size_t index, Clock::time_point start,
                             Clock::time_point deadline);
  [[noreturn]] void throw_timeout(int lane, std::vector<int> missing, bool receives_done,
                                  Clock::time_point start, Clock::time_point deadline);
  // `peer` failed (`how` says what was seen; `where`, if not empty, what talked to it, ending
  // in ": "): poisons the transport and returns what to throw, Aborted with the peer's notice
  // if it left one, else PeerLost.
  std::exception_ptr peer_failure(const std::string& where, int peer,
                                  const std::string& how) noexcept;
  // peer_failure() while `lane` talked to `peer`, with the lane's messages dropped.
  [[noreturn]] void throw_peer_failure(int lane, int peer, const std::string& how);

  const int rank_;
  const int size_;
  const int num_lanes_;
  const std::string job_;
  const milliseconds timeout_;
  std::unique_ptr<Heartbeat> heartbeat_;  // from before the rendezvous to the end
  std::unique_ptr<GlooStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::unique_ptr<Lane[]> lanes_;
  std::unique_ptr<ShmMesh> mesh_;  // see take_shared_memory()

  // ---- point-to-point ----
  class P2pBuffer;
  void check_p2p_peer(int peer, const char* what) const;
  // Posts the message of `buffer`; a failure to post poisons the transport and throws.
  void p2p_post(P2pBuffer& buffer);
  // Waits for the message of `buffer`, mapping Gloo's failures as wait() does: Timeout
  // (naming the peer), Aborted (poisoned, or the peer announced a failure), PeerLost.
  void p2p_wait(P2pBuffer& buffer, Clock::time_point start, Clock::time_point deadline);
  // The two sides of a send and a receive disagree: waits (at most until `deadline`) for the
  // message that lets the peer see it too, poisons the transport, throws CollectiveMismatch.
  [[noreturn]] void p2p_mismatch(P2pBuffer& last, int peer, const std::string& mine,
                                 const std::string& theirs, bool sender,
                                 Clock::time_point deadline);

  Poison poison_;
  std::mutex mu_;  // guards `announced_`
  bool announced_ = false;
  std::mutex p2p_mu_;                                      // guards `p2p_live_`
  std::vector<gloo::transport::UnboundBuffer*> p2p_live_;  // woken by fail()
};

GlooTransport::GlooTransport(const GlooOptions& options, std::unique_ptr<GlooStore> store)
    : rank_(options.rank),
      size_(options.size),
      num_lanes_(options.lanes),
      job_(options.job),
      timeout_(options.timeout),
      heartbeat_(options.heartbeat.count() > 0
                     ? std::make_unique<Heartbeat>(options.heartbeat_store,
                                                   "heartbeat/" + std::to_string(options.rank),
                                                   options.heartbeat)
                     : nullptr),
      store_(std::move(store)),
      lanes_(std::make_unique<Lane[]>(static_cast<std::size_t>(options.lanes))) {
  const Clock::time_point deadline = Clock::now() + options.timeout;
  store_->set_deadline(deadline);
  const std::string where = "job '" + job_ + "' in store " + store_->url().text;

  // A key of this rank already there means an earlier run used this job name.
  if (store_->has({key("joined", rank_)})) {
    throw ConfigError("gloo engine: the store already holds the keys of process " +
                      std::to_string(rank_) + " of " + where +
                      " (left by an earlier run?); use a fresh store folder or another job "
                      "name");
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    throw ConfigError("gloo engine: cannot listen for peers at host '" + options.host +
                      "': " + describe_error(std::current_exception()) +
                      "; set the host (--host, REPLICATOR_HOST) to an address of this machine "
                      "that the other processes can reach");
  }
  store_->set(key("joined", rank_), {'1'});
  std::unique_ptr<ShmMesh> mesh = offer_shared_memory(options);

  try {
    connect_lanes(options, deadline);
    barrier(where, deadline);
    settle_shared_memory(std::move(mesh));
  } catch (const StoreTimeout&) {
    std::vector<int> absent;
    int joined = 0;
    for (int r = 0; r < size_; ++r) {
      bool there = false;
      try {
        there = store_->has({key("joined", r)});
      } catch (const Error&) {
      }
      if (there) {
        ++joined;
      } else {
        absent.push_back(r);
      }
    }
    std::string who = std::to_string(joined) + " of " + std::to_string(size_) + " processes joined";
    if (!absent.empty()) {
      who += " (missing: rank" + std::string(absent.size() == 1 ? " " : "s ") + join_ranks(absent) +
             ")";
    } else {
      who += ", but not all of them reached every lane";
    }
    throw ConfigError("gloo engine: rendezvous of " + where + " timed out after " +
                      std::to_string(options.timeout.count()) + " ms: " + who + "; start all " +
                      std::to_string(size_) +
                      " processes with the same store, job and number of processes, or raise "
                      "the timeout");
  }
}

void GlooTransport::connect_lanes(const GlooOptions& options, Clock::time_point deadline) {
  for (int l = 0; l < num_lanes_; ++l) {
    Lane& lane = lanes_[l];
    lane.context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    lane.context->setTimeout(std::max(milliseconds(1), options.timeout));
    gloo::rendezvous::PrefixStore prefixed(store_->key("lane" + std::to_string(l)), *store_);
    try {
      lane.context->connectFullMesh(prefixed, device_);
    } catch (const StoreTimeout&) {
      throw;
    } catch (const Error&) {
      throw;
    } catch (...) {
      if (Clock::now() >= deadline) throw StoreTimeout("connecting");
      throw ConfigError("gloo engine: process " + std::to_string(rank_) +
                        " could not connect to the other processes of job '" + job_ + "' on lane " +
                        std::to_string(l) + ": " + describe_error(std::current_exception()) +
                        "; check that each process is reachable at the address it listens on "
                        "(--host, REPLICATOR_HOST; here '" +
                        options.host + "')");
    }
    lane.buffers.reserve(2 * static_cast<std::size_t>(size_));
    lane.messages.reserve(2 * static_cast<std::size_t>(size_));
  }
}

std::unique_ptr<ShmMesh> GlooTransport::offer_shared_memory(const GlooOptions& options) {
  std::unique_ptr<ShmMesh> mesh;
  // Here every message between the processes of this host goes through the rings, so a
  // ring sets only the steps' size, and rings that fit the cache (ShmMesh::ring_bytes_for)
  // cost a caller that touches its own memory between collectives the least: 1 MiB
  // all-reduces from Python through torch.distributed lost 11-13 % to the same calls made
  // from C++ in one job with 1 MiB rings, 7-9 % with 256 KiB rings (a 2 MiB L2). The mpi
  // engine keeps larger rings, where half a ring also decides which messages skip OpenMPI's
  // handshake.
  if (options.shared_memory && size_ > 1) {
    mesh = ShmMesh::try_make(rank_, size_, num_lanes_, /*parks=*/true,
                             ShmMesh::ring_bytes_for(size_, num_lanes_, ShmMesh::l2_bytes()));
  }
  const std::string offer = mesh ? mesh->offer() : "-";
  store_->set(key("shm", rank_), std::vector<char>(offer.begin(), offer.end()));
  return mesh;
}

void GlooTransport::settle_shared_memory(std::unique_ptr<ShmMesh> mesh) {
  if (size_ == 1) return;
  bool usable = mesh != nullptr;
  if (usable) {
    std::vector<std::string> offers(static_cast<std::size_t>(size_));
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      store_->wait({key("shm", q)});
      const std::vector<char> raw = store_->get(key("shm", q));
      offers[static_cast<std::size_t>(q)].assign(raw.begin(), raw.end());
    }
    usable = mesh->attach_offers(offers);
  }
  store_->set(key("shm-ok", rank_), {usable ? '1' : '0'});
  bool everyone = usable;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    store_->wait({key("shm-ok", q)});
    const std::vector<char> ok = store_->get(key("shm-ok", q));
    everyone = everyone && ok.size() == 1 && ok[0] == '1';
  }
  // Every peer that says '1' has mapped this process's segment: its name can go.
  if (everyone) {
    mesh->unlink();
    mesh_ = std::move(mesh);
  }
}

// Gloo's connect returns as soon as this side of a pair is connected; a peer that is
// through with all its pairs may then close them (say it fails, or its program has nothing
// to do) while this side still waits for another of its connects, which Gloo reports as a
// failed connect. A message from every process to every other, sent once the sender has
// connected all its lanes, keeps every process in the rendezvous until all are connected.
void GlooTransport::barrier(const std::string& where, Clock::time_point deadline) {
  if (size_ == 1) return;
  std::vector<std::uint8_t> in(static_cast<std::size_t>(size_));
  std::vector<std::uint8_t> out(static_cast<std::size_t>(size_), 1);
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    sends.push_back({peer, &out[peer], 1});
    recvs.push_back({peer, &in[peer], 1});
  }
  try {
    exchange(0, sends, recvs, deadline);
  } catch (const Error& e) {
    throw ConfigError("gloo engine: rendezvous of " + where +
                      ": the processes connected, but the closing barrier failed: " + e.what());
  }
}

void GlooTransport::check_peer(int lane, int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument("gloo engine: exchange on lane " + std::to_string(lane) + ": a " + what +
                          " names process " + std::to_string(peer) + ", but ranks are 0.." +
                          std::to_string(size_ - 1));
  }
}

// Messages to this process itself never reach Gloo (it has no pair for them): the k-th send
// to self is the k-th receive from self, copied here.
void GlooTransport::check_lane(int lane) const {
  if (lane < 0 || lane >= num_lanes_) {
    throw InvalidArgument("gloo engine: exchange on lane " + std::to_string(lane) +
                          ", but the transport has lanes 0.." + std::to_string(num_lanes_ - 1));
  }
}

Transport::Ticket GlooTransport::post(int lane, std::span<const SendOp> sends,
                                      std::span<const RecvOp> recvs) {
  check_lane(lane);
  bool self = false;
  for (const RecvOp& op : recvs) {
    check_peer(lane, op.peer, "receive");
    self = self || op.peer == rank_;
  }
  for (const SendOp& op : sends) {
    check_peer(lane, op.peer, "send");
    self = self || op.peer == rank_;
  }
  Lane& l = lanes_[lane];
  if (poison_.is_set()) drop_poisoned(l);
  if (self) copy_to_self("gloo", rank_, lane, sends, recvs);

  const Clock::time_point start = Clock::now();
  const Ticket ticket = ++l.posted;
  gloo::Context& context = *l.context;
  // Zero-byte messages are skipped on both sides: sizes match, so both skip the same ones.
  bool posting = false;  // a post under way, as opposed to making its buffer
  try {
    for (const RecvOp& op : recvs) {
      if (op.bytes == 0 || op.peer == rank_) continue;
      l.buffers.push_back(context.createUnboundBuffer(op.data, op.bytes));
      l.messages.push_back({op.peer, true, ticket});
      posting = true;
      l.buffers.back()->recv(op.peer, kExchangeSlot);
      posting = false;
    }
    for (const SendOp& op : sends) {
      if (op.bytes == 0 || op.peer == rank_) continue;
      // Gloo only reads from the buffer of a send.
      l.buffers.push_back(context.createUnboundBuffer(const_cast<void*>(op.data), op.bytes));
      l.messages.push_back({op.peer, false, ticket});
      posting = true;
      l.buffers.back()->send(op.peer, kExchangeSlot);
      posting = false;
    }
  } catch (...) {
    if (posting) {
      fail_message(lane, l.messages.size() - 1, std::current_exception(), start,
                   Clock::time_point::max());
    }
    // Out of memory while making a buffer: the messages posted so far must not outlive it.
    const std::string why =
        "gloo engine: exchange on lane " + std::to_string(lane) +
        ": making a buffer failed: " + describe_error(std::current_exception()) +
        "; the transport is poisoned, restart the job";
    fail(why, why);
    finish(l, true);
    throw;
  }
  return ticket;
}

void GlooTransport::wait(int lane, Ticket ticket, Clock::time_point deadline) {
  check_lane(lane);
  Lane& l = lanes_[lane];
  if (poison_.is_set()) drop_poisoned(l);
  std::size_t end = l.head;
  while (end < l.messages.size() && l.messages[end].ticket <= ticket) ++end;
  if (end == l.head) return;

  const Clock::time_point start = Clock::now();
  l.covered = ticket;
  {
    // abort() either sees `waiting` and wakes the waits below, or poisoned the transport
    // before this lock, which is seen here.
    std::lock_guard lock(l.mu);
    l.waiting = true;
  }
  if (poison_.is_set()) drop_poisoned(l);
  for (; l.head < end; ++l.head) {
    gloo::transport::UnboundBuffer& buffer = *l.buffers[l.head];
    bool completed = false;
    try {
      const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
      const milliseconds wait = std::clamp(left, milliseconds::zero(), kMaxWait);
      completed = l.messages[l.head].is_recv ? buffer.waitRecv(nullptr, wait)
                                             : buffer.waitSend(nullptr, wait);
    } catch (...) {
      fail_message(lane, l.head, std::current_exception(), start, deadline);
    }
    if (!completed) drop_poisoned(l);  // woken by abort(), which closed the connections first
  }
  finish(l, false);
}

void GlooTransport::drop_poisoned(Lane& lane) {
  fail(reason(), reason());  // makes sure the connections are closed before the buffers go
  finish(lane, true);
  throw_poisoned();
}

void GlooTransport::finish(Lane& lane, bool all) noexcept {
  {
    std::lock_guard lock(lane.mu);
    lane.waiting = false;
  }
  if (all || lane.head == lane.buffers.size()) {
    lane.buffers.clear();
    lane.messages.clear();
    lane.head = 0;
  }
}

void GlooTransport::linger() noexcept {
  if (size_ == 1 || poison_.is_set()) return;
  try {
    store_->set(key("closed", rank_), {'1'});
    const Clock::time_point until = Clock::now() + kCloseLinger;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      while (!store_->has({key("closed", q)}) && !store_->has({key("abort", q)})) {
        if (Clock::now() >= until || poison_.is_set()) return;
        std::this_thread::sleep_for(kAnnouncePoll);
      }
    }
  } catch (...) {
    // The store is gone: nobody can say goodbye; close at once.
  }
}

std::optional<AbortNotice> GlooTransport::announced_failure(int peer) noexcept {
  try {
    const std::string name = key("abort", peer);
    const Clock::time_point until = Clock::now() + kAnnounceGrace;
    while (!store_->has({name})) {
      if (Clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(kAnnouncePoll);
    }
    const std::vector<char> text = store_->get(name);
    return decode_abort_notice(std::string_view(text.data(), text.size()));
  } catch (...) {
    return std::nullopt;
  }
}

void GlooTransport::fail_message(int lane, std::size_t index, const std::exception_ptr& error,
                                 Clock::time_point start, Clock::time_point deadline) {
  Lane& l = lanes_[lane];
  if (Clock::now() >= deadline) time_out(lane, index, start, deadline);
  if (poison_.is_set()) {
    fail(reason(), reason());
    finish(l, true);
    throw_poisoned();
  }
  const Message message = l.messages[index];
  const std::string text = describe_error(error);
  bool io_error = false;
  try {
    std::rethrow_exception(error);
  } catch (const gloo::IoException&) {
    io_error = true;
  } catch (...) {
  }
  const std::string where = "gloo engine: exchange on lane " + std::to_string(lane) + ": ";
  if (!io_error) {
    // Gloo refused the call itself (an assertion, out of memory): not a peer's doing.
    const std::string why = where + "Gloo failed while " +
                            (message.is_recv ? "receiving from" : "sending to") + " process " +
                            std::to_string(message.peer) + ": " + text +
                            "; the transport is poisoned, restart the job";
    fail(why, why);
    finish(l, true);
    throw Error(why);
  }
  throw_peer_failure(lane, message.peer,
                     std::string("its connection closed while ") +
                         (message.is_recv ? "receiving from" : "sending to") + " it: " + text);
}

std::exception_ptr GlooTransport::peer_failure(const std::string& where, int peer,
                                               const std::string& how) noexcept {
  try {
    if (auto announced = announced_failure(peer)) {
      const std::string why = "process " + std::to_string(peer) + " failed: " + announced->why;
      fail(why, why, announced->replica);
      return std::make_exception_ptr(Aborted(why, announced->replica));
    }
    const std::string why = "gloo engine: " + where + "lost process " + std::to_string(peer) +
                            " (" + how + "); the transport is poisoned, restart the job";
    fail(why, why);
    return std::make_exception_ptr(PeerLost(why, peer));
  } catch (...) {
    fail(reason(), reason());
    return std::current_exception();
  }
}

void GlooTransport::throw_peer_failure(int lane, int peer, const std::string& how) {
  const std::exception_ptr error =
      peer_failure("exchange on lane " + std::to_string(lane) + ": ", peer, how);
  finish(lanes_[lane], true);
  std::rethrow_exception(error);
}

void GlooTransport::time_out(int lane, std::size_t index, Clock::time_point start,
                             Clock::time_point deadline) {
  Lane& l = lanes_[lane];
  // The messages before `index` completed, the one at `index` did not. Gloo's timeout
  // failed every pair of the lane, so a wait of zero on each later one tells completed
  // (returns at once) from failed (throws or returns false).
  std::vector<int> missing_recv;
  std::vector<int> missing_send;
  // Only the posts the wait covered: later ones may rightly not have been sent yet.
  for (std::size_t i = index; i < l.buffers.size() && l.messages[i].ticket <= l.covered; ++i) {
    const Message& m = l.messages[i];
    bool completed = false;
    if (i > index) {
      try {
        completed = m.is_recv ? l.buffers[i]->waitRecv(nullptr, milliseconds::zero())
                              : l.buffers[i]->waitSend(nullptr, milliseconds::zero());
      } catch (...) {
      }
    }
    if (!completed) (m.is_recv ? missing_recv : missing_send).push_back(m.peer);
  }
  const bool receives_done = missing_recv.empty();
  throw_timeout(lane, receives_done ? std::move(missing_send) : std::move(missing_recv),
                receives_done, start, deadline);
}

void GlooTransport::throw_timeout(int lane, std::vector<int> missing, bool receives_done,
                                  Clock::time_point start, Clock::time_point deadline) {
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  const auto limit =
      std::max(std::chrono::ceil<milliseconds>(deadline - start), milliseconds::zero());
  const std::string why = exchange_timeout_text("gloo", lane, missing, receives_done, limit);
  fail(why, why);
  finish(lanes_[lane], true);
  throw Timeout(why, "exchange", 0, limit, std::move(missing));
}

void GlooTransport::fail(const std::string& reason, const std::string& why,
                         std::optional<int> cause_replica) noexcept {
  poison_.set(reason, cause_replica);
  bool announce = false;
  try {
    std::lock_guard lock(mu_);
    announce = !announced_;
    announced_ = true;
  } catch (...) {
  }
  if (announce) {
    // Written before the connections close, so that a peer that sees them close finds it.
    try {
      const std::string text = encode_abort_notice(cause_replica, why.substr(0, kMaxAbortText));
      store_->set(key("abort", rank_), std::vector<char>(text.begin(), text.end()));
    } catch (...) {
      // The store is gone too: the peers will report this process as lost.
    }
  }
  for (int l = 0; l < num_lanes_; ++l) {
    try {
      lanes_[l].context->closeConnections();
    } catch (...) {
    }
  }
  // Connections closed first: a woken exchange frees its buffers, and Gloo's event loop
  // must no longer be able to write into them.
  try {
    std::lock_guard lock(p2p_mu_);
    for (gloo::transport::UnboundBuffer* buffer : p2p_live_) {
      buffer->abortWaitRecv();
      buffer->abortWaitSend();
    }
  } catch (...) {
  }
  for (int l = 0; l < num_lanes_; ++l) {
    Lane& lane = lanes_[l];
    try {
      std::lock_guard lock(lane.mu);
      if (!lane.waiting) continue;
      for (auto& buffer : lane.buffers) {
        buffer->abortWaitRecv();
        buffer->abortWaitSend();
      }
    } catch (...) {
    }
  }
}

void GlooTransport::abort(const std::string& why, std::optional<int> cause_replica) noexcept {
  std::string reason;
  try {
    reason = "process " + std::to_string(rank_) + " failed: " + why;
  } catch (...) {
  }
  fail(reason, why, cause_replica);
}

void GlooTransport::native_all_reduce_f32(float* data, std::size_t count) {
  if (poison_.is_set()) throw_poisoned();
  if (count == 0 || size_ == 1) return;
  try {
    gloo::AllreduceOptions options(lanes_[0].context);
    options.setOutput(data, count);
    void (*sum)(void*, const void*, const void*, std::size_t) = &gloo::sum<float>;
    options.setReduceFunction(sum);
    options.setTag(kAllreduceTag);
    options.setTimeout(timeout_);
    gloo::allreduce(options);
  } catch (...) {
    const std::string why =
        "gloo engine: gloo::allreduce of " + std::to_string(count) +
        " floats on lane 0 failed: " + describe_error(std::current_exception()) +
        "; the transport is poisoned, restart the job";
    const bool was_poisoned = poison_.is_set();
    fail(why, why);
    if (was_poisoned) throw_poisoned();
    throw Error(why);
  }
}

// ---- point-to-point --------------------------------------------------------------------
//
// A send and its receive meet in three slots of lane 0's context, the tag's low 48 bits in
// each: the sender sends its call (size, kind, text) in the first; the receiver compares it
// with its own and answers in the second, having posted its data receive first where they
// agree; the data follow in the third. Where they disagree, the side that learns it last
// answers once more ("seen"), so that each side has the other's call in hand before either
// closes its connections (a close resets them, and would lose a message not yet read).

constexpr std::uint64_t kP2pSlot = std::uint64_t{0x7d} << 56;
constexpr std::uint64_t kP2pTagMask = (std::uint64_t{1} << 48) - 1;
enum class P2pPart : std::uint64_t { kCall = 1, kAnswer = 2, kData = 3, kSeen = 4 };

std::uint64_t p2p_slot(P2pPart part, std::uint64_t tag) {
  return kP2pSlot | (static_cast<std::uint64_t>(part) << 48) | (tag & kP2pTagMask);
}

// What one side tells the other of its call.
struct P2pNote {
  std::uint64_t bytes = 0;
  std::uint32_t kind = 0;
  std::uint32_t agrees = 0;  // an answer: the data may come
  std::uint32_t length = 0;  // of text
  char text[492] = {};
};

P2pNote note_of(const PointToPoint::Call& call, bool agrees) {
  P2pNote note;
  note.bytes = call.bytes;
  note.kind = call.kind;
  note.agrees = agrees ? 1 : 0;
  note.length = static_cast<std::uint32_t>(std::min(call.text.size(), sizeof note.text));
  std::memcpy(note.text, call.text.data(), note.length);
  return note;
}

std::string text_of(const P2pNote& note) {
  return std::string(note.text, std::min<std::size_t>(note.length, sizeof note.text));
}

// A message's Gloo buffer, known to fail() (which wakes its wait) while it lives.
class GlooTransport::P2pBuffer {
 public:
  P2pBuffer(GlooTransport& transport, void* data, std::size_t bytes, int peer, bool is_recv,
            std::uint64_t slot, std::string what)
      : peer(peer),
        is_recv(is_recv),
        slot(slot),
        what(std::move(what)),
        buffer(transport.lanes_[0].context->createUnboundBuffer(data, bytes)),
        transport_(transport) {
    std::lock_guard lock(transport_.p2p_mu_);
    transport_.p2p_live_.push_back(buffer.get());
  }
  ~P2pBuffer() {
    std::lock_guard lock(transport_.p2p_mu_);
    std::erase(transport_.p2p_live_, buffer.get());
  }
  P2pBuffer(const P2pBuffer&) = delete;
  P2pBuffer& operator=(const P2pBuffer&) = delete;

  const int peer;
  const bool is_recv;
  const std::uint64_t slot;
  const std::string what;  // "send to process 1 (tag 0)"
  const std::unique_ptr<gloo::transport::UnboundBuffer> buffer;

 private:
  GlooTransport& transport_;
};

void GlooTransport::check_p2p_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw InvalidArgument("gloo engine: " + std::string(what) + " process " + std::to_string(peer) +
                          ": this is process " + std::to_string(rank_) + " of " +
                          std::to_string(size_) +
                          "; point-to-point messages go to another process of the job");
  }
}

void GlooTransport::p2p_post(P2pBuffer& buffer) {
  try {
    if (buffer.is_recv) {
      buffer.buffer->recv(buffer.peer, buffer.slot);
    } else {
      buffer.buffer->send(buffer.peer, buffer.slot);
    }
  } catch (...) {
    if (poison_.is_set()) {
      fail(reason(), reason());
      throw_poisoned();
    }
    const std::string why = "gloo engine: " + buffer.what +
                            ": posting failed: " + describe_error(std::current_exception()) +
                            "; the transport is poisoned, restart the job";
    fail(why, why);
    throw Error(why);
  }
}

void GlooTransport::p2p_wait(P2pBuffer& buffer, Clock::time_point start,
                             Clock::time_point deadline) {
  bool completed = false;
  std::exception_ptr error;
  try {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    const milliseconds wait = std::clamp(left, milliseconds::zero(), kMaxWait);
    completed = buffer.is_recv ? buffer.buffer->waitRecv(nullptr, wait)
                               : buffer.buffer->waitSend(nullptr, wait);
  } catch (...) {
    error = std::current_exception();
  }
  if (completed) return;
  if (error && Clock::now() >= deadline && !poison_.is_set()) {
    const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    const std::string why =
        "gloo engine: " + buffer.what + ": process " + std::to_string(buffer.peer) +
        " did not make the matching " + (buffer.is_recv ? "send" : "receive") + " within " +
        std::to_string(waited.count()) + " ms; the transport is poisoned, restart the job";
    fail(why, why);
    throw Timeout(why, buffer.is_recv ? "recv" : "send", 0, waited, {buffer.peer});
  }
  if (!error || poison_.is_set()) {  // woken by fail(), which closed the connections first
    fail(reason(), reason());
    throw_poisoned();
  }
  std::rethrow_exception(
      peer_failure("", buffer.peer,
                   "its connection closed during " + buffer.what + ": " + describe_error(error)));
}

void GlooTransport::p2p_mismatch(P2pBuffer& last, int peer, const std::string& mine,
                                 const std::string& theirs, bool sender,
                                 Clock::time_point deadline) {
  try {
    p2p_wait(last, Clock::now(), deadline);
  } catch (const Error&) {
    // The peer closed once it had seen this side's call, or never will: either way the
    // mismatch is known here and is what this side reports.
  }
  const std::string& send_text = sender ? mine : theirs;
  const std::string& recv_text = sender ? theirs : mine;
  const int send_rank = sender ? rank_ : peer;
  const int recv_rank = sender ? peer : rank_;
  const std::string why = "gloo engine: a send and its receive do not match: process " +
                          std::to_string(send_rank) + " called " + send_text + "; process " +
                          std::to_string(recv_rank) + " called " + recv_text +
                          "; the transport is poisoned, restart the job";
  fail(why, why);
  std::vector<std::string> calls(static_cast<std::size_t>(size_));
  calls[static_cast<std::size_t>(send_rank)] = send_text;
  calls[static_cast<std::size_t>(recv_rank)] = recv_text;
  throw CollectiveMismatch(why, 0, std::move(calls));
}

void GlooTransport::send(int peer, std::uint64_t tag, const Call& call, const void* data,
                         Clock::time_point deadline) {
  check_p2p_peer(peer, "send to");
  if (poison_.is_set()) throw_poisoned();
  const Clock::time_point start = Clock::now();
  const std::string what =
      "send to process " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  P2pNote mine = note_of(call, false);
  P2pNote answer;
  P2pBuffer answering(*this, &answer, sizeof answer, peer, true, p2p_slot(P2pPart::kAnswer, tag),
                      what);
  P2pBuffer calling(*this, &mine, sizeof mine, peer, false, p2p_slot(P2pPart::kCall, tag), what);
  p2p_post(answering);
  p2p_post(calling);
  p2p_wait(calling, start, deadline);
  p2p_wait(answering, start, deadline);
  if (answer.agrees == 0) {
    P2pBuffer seen(*this, &mine, sizeof mine, peer, false, p2p_slot(P2pPart::kSeen, tag), what);
    p2p_post(seen);
    p2p_mismatch(seen, peer, call.text, text_of(answer), true, deadline);
  }
  if (call.bytes == 0) return;
  P2pBuffer sending(*this, const_cast<void*>(data), call.bytes, peer, false,
                    p2p_slot(P2pPart::kData, tag), what);
  p2p_post(sending);
  p2p_wait(sending, start, deadline);
}

void GlooTransport::recv(int peer, std::uint64_t tag, const Call& call, void* data,
                         Clock::time_point deadline) {
  check_p2p_peer(peer, "receive from");
  if (poison_.is_set()) throw_poisoned();
  const Clock::time_point start = Clock::now();
  const std::string what =
      "receive from process " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  P2pNote theirs;
  P2pBuffer calling(*this, &theirs, sizeof theirs, peer, true, p2p_slot(P2pPart::kCall, tag), what);
  p2p_post(calling);
  p2p_wait(calling, start, deadline);
  const bool agrees = theirs.bytes == call.bytes && theirs.kind == call.kind;
  std::optional<P2pBuffer> receiving;
  if (agrees && call.bytes > 0) {
    receiving.emplace(*this, data, call.bytes, peer, true, p2p_slot(P2pPart::kData, tag), what);
    p2p_post(*receiving);  // before the answer, so the data can come as soon as it is read
  }
  P2pNote answer = note_of(call, agrees);
  P2pBuffer answering(*this, &answer, sizeof answer, peer, false, p2p_slot(P2pPart::kAnswer, tag),
                      what);
  p2p_post(answering);
  if (!agrees) {
    P2pNote seen_note;
    P2pBuffer seen(*this, &seen_note, sizeof seen_note, peer, true, p2p_slot(P2pPart::kSeen, tag),
                   what);
    p2p_post(seen);
    p2p_mismatch(seen, peer, call.text, text_of(theirs), false, deadline);
  }
  p2p_wait(answering, start, deadline);
  if (receiving) p2p_wait(*receiving, start, deadline);
}

}  // namespace

std::unique_ptr<Transport> make_gloo_transport(const GlooOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("gloo engine: rank " + std::to_string(options.rank) + " of " +
                          std::to_string(options.size) +
                          " processes is out of range; ranks are 0..size-1 and size >= 1");
  }
  if (options.lanes < 1) {
    throw InvalidArgument("gloo engine: a transport needs at least 1 lane, got " +
                          std::to_string(options.lanes));
  }
  if (options.timeout <= milliseconds::zero()) {
    throw InvalidArgument("gloo engine: the rendezvous timeout must be positive, got " +
                          std::to_string(options.timeout.count()) + " ms");
  }
  if (options.job.empty()) {
    throw InvalidArgument("gloo engine: the job name (the key prefix in the store) is empty");
  }
  auto store = options.meeting
                   ? std::make_unique<GlooStore>(options.meeting, options.job)
                   : std::make_unique<GlooStore>(parse_gloo_store_url(options.store), options.job);
  ignore_sigpipe_once();
  auto transport = std::make_unique<GlooTransport>(options, std::move(store));
  std::unique_ptr<ShmMesh> mesh = transport->take_shared_memory();
  if (!mesh) return transport;
  // With more threads than cores, a spinning or yielding wait takes the core of the thread it
  // waits for: park at once.
  const auto threads = static_cast<unsigned>(options.size) * static_cast<unsigned>(options.lanes);
  const bool oversubscribed = threads > std::max(1u, std::thread::hardware_concurrency());
  ShmOptions shared{.engine = "gloo",
                    .eager_bytes = kSharedEagerBytes,
                    .spin = oversubscribed ? std::chrono::microseconds(0) : options.spin,
                    .yield = oversubscribed ? std::chrono::microseconds(0) : kSharedYield};
  return std::make_unique<SplitTransport>(
      std::move(transport), make_shm_transport(std::move(mesh), std::move(shared)), SIZE_MAX);
}

}  // namespace replicator::detail
