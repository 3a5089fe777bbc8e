// ShmMesh; the contract is in shm_mesh.h.
//
// A segment: a header line, a line with the count of failures announced to this process,
// one flag per process (set by that process when it fails), this process's failure notice
// (its length, then its bytes: written once, before the flags that announce it), one line
// per lane with its
// bell and the count of threads parked on it, then one ring per lane and process (the
// rings from this process itself stay unused): a line with `written` (bytes the writer has
// put in, ever) and `wants_room` (the writer waits for room), a line with `read` (bytes the
// reader has taken out), then the data.
//
// A ring is single-producer single-consumer: the writer stores its data, then `written`;
// the reader loads `written`, copies, then stores `read`. The writer keeps the last `read`
// it loaded and loads it again only when that leaves too little room, so a message that
// fits moves the data line and the `written` line between the cores, and nothing else.
//
// Bells, without a wake-up per message: a thread about to park counts itself in
// `sleepers`, reads the bell, looks at its rings once more, and parks only while the bell
// still holds that value. A writer, after storing `written`, bumps the bell (and makes the
// wake system call) only if it sees a sleeper. Both sides store, then load the other's
// word, all sequentially consistent: either the writer sees the sleeper, or the waiter's
// last look sees the data. Room works the same way: a writer that ran out of it sets
// `wants_room`, then loads `read` again; a reader, after storing `read`, rings the
// writer's bell only if `wants_room` is set.

#include "src/engines/shm/shm_mesh.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>

#include "replicator/errors.h"
#include "src/comm/futex.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace replicator::detail {
namespace {

constexpr std::uint64_t kMagic = 0x7265706c73686d31;  // "replshm1"
constexpr std::size_t kLine = 64;
constexpr std::size_t kRingControl = 2 * kLine;
// Offsets in a ring's control lines.
constexpr std::size_t kWritten = 0;
constexpr std::size_t kWantsRoom = 8;
constexpr std::size_t kRead = kLine;
constexpr std::size_t kHeaderBytes = 8;  // a message's length
constexpr std::size_t kMaxRingBytes = std::size_t{1} << 20;
constexpr std::size_t kMinRingBytes = std::size_t{64} << 10;
constexpr std::size_t kSegmentTarget = std::size_t{16} << 20;
// Longest park before a waiter checks its peers' processes and the clock again, by default.
constexpr std::chrono::milliseconds kMaxPark{50};
constexpr int kYields = 4;
// Without bells (parks false), a wait that has spun and yielded naps this long between looks.
constexpr std::chrono::microseconds kNap{50};
// A failure notice's room in a segment: its length (8 bytes), then up to this less 8 bytes.
constexpr std::size_t kNoticeBytes = std::size_t{8} << 10;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
std::size_t framed(std::size_t bytes) { return kHeaderBytes + round_up(bytes, 8); }

// A reader polls `written`, and only once it moved reads the message: two misses in a row,
// each a line the writer's core holds. Where the last message from a peer was short (framed,
// at most two lines), the next likely is too (a small collective's frames), and each poll
// also prefetches the line the next message starts in, so that line arrives beside
// `written` (4 B all-reduces between two processes, three interleaved runs: 0.48-0.50 ->
// 0.43-0.46 µs; 64 B: 0.54-0.59 -> 0.48-0.52). Longer messages are not prefetched: a poll
// would take their first line back from the writer while it still writes there (1-4 KiB
// all-reduces 7-10 % slower).
constexpr std::size_t kPrefetchBelow = 2 * kLine;

std::string system_error_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

template <typename T>
std::atomic_ref<T> at(std::byte* base, std::size_t offset) {
  return std::atomic_ref<T>(*reinterpret_cast<T*>(base + offset));
}

void futex_wait_shared(std::uint32_t* word, std::uint32_t expected,
                       std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_shared(std::uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_id(const char* which) {
  struct stat st {};
  const std::string path = std::string("/proc/self/ns/") + which;
  if (stat(path.c_str(), &st) != 0) return {};
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace

// Offsets into a segment.
struct ShmMesh::Segment {
  static constexpr std::size_t kFailures = kLine;
  static constexpr std::size_t kFlags = 2 * kLine;
  static std::size_t notice(int size) {
    return kFlags + round_up(static_cast<std::size_t>(size) * sizeof(std::uint32_t), kLine);
  }
  static std::size_t bells(int size) { return notice(size) + kNoticeBytes; }
  static std::size_t bell(int size, int lane) {
    return bells(size) + static_cast<std::size_t>(lane) * kLine;
  }
  static std::size_t sleepers(int size, int lane) {
    return bell(size, lane) + sizeof(std::uint32_t);
  }
  // The core the lane's thread last started a step on, plus one (0: none); written once a
  // step, beside the bell its peers ring rather than on a line of its own.
  static std::size_t core(int size, int lane) {
    return bell(size, lane) + 2 * sizeof(std::uint32_t);
  }
  static std::size_t rings(int size, int lanes) { return bell(size, lanes); }
  static std::size_t ring(int size, int lanes, std::size_t ring_bytes, int lane, int writer) {
    return rings(size, lanes) + (static_cast<std::size_t>(lane) * static_cast<std::size_t>(size) +
                                 static_cast<std::size_t>(writer)) *
                                    (kRingControl + ring_bytes);
  }
  static std::size_t bytes(int size, int lanes, std::size_t ring_bytes) {
    return ring(size, lanes, ring_bytes, lanes, 0);
  }
};

struct ShmMesh::Op {
  int peer;
  bool is_recv;
  bool done;
  Ticket ticket;
  std::byte* data;
  std::size_t bytes;   // the buffer's
  std::size_t length;  // the message's (a receive: known once its header is read)
  std::size_t moved;   // bytes of the framed message written or read so far
};

struct ShmMesh::Lane {
  std::vector<Op> ops;  // in posting order; those before `head` have completed
  std::size_t head = 0;
  // Per peer: indices into `ops` of its sends and receives, in order, and the first not done.
  std::vector<std::vector<std::size_t>> sends, recvs;
  std::vector<std::size_t> send_head, recv_head;
  // Per peer, of the ring this process writes in the peer's segment: its `written` (only
  // this process stores it), its `read` as last loaded, and whether this process set its
  // `wants_room`; of the ring this process reads, its `read` (only this process stores it).
  // A process never loads back what only it stores: on this machine's caches, a line the
  // other core has just read comes back with a miss.
  std::vector<std::uint64_t> written, read_seen, read;
  std::vector<std::uint8_t> wants_room;
  // Per peer, of the ring this process reads: whether its last message was short (see
  // kPrefetchBelow).
  std::vector<std::uint8_t> short_last;
  int pending = 0;  // ops not done
};

std::string ShmMesh::host_identity() noexcept {
  try {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) return {};
    const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
    std::string id = std::string(host) + "|" + boot;
    for (const char* ns : {"ipc", "mnt", "pid", "net"}) {
      const std::string one = namespace_id(ns);
      if (one.empty()) return {};
      id += "|" + one;
    }
    return boot.empty() ? std::string() : id;
  } catch (...) {
    return {};
  }
}

std::size_t ShmMesh::l2_bytes() noexcept {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? static_cast<std::size_t>(bytes) : 0;
}

std::size_t ShmMesh::ring_bytes_for(int size, int lanes, std::size_t l2) {
  const std::size_t rings = static_cast<std::size_t>(std::max(1, size - 1)) *
                            static_cast<std::size_t>(std::max(1, lanes));
  std::size_t bytes = kSegmentTarget / rings;
  // A step through a ring of R bytes keeps about 4R in the cache of the core that drives it:
  // the ring it writes, the peer's ring it reads, the step's source and its destination. At
  // most half of the core's L2 for that leaves the other half to what the caller touches
  // between collectives (an interpreter's call path, the model's own data), which would
  // otherwise push the step's bytes out to the next level on every call.
  if (l2 > 0) bytes = std::min(bytes, l2 / 8);
  return std::clamp(std::bit_floor(bytes), kMinRingBytes, kMaxRingBytes);
}

ShmMesh::ShmMesh(int rank, int size, int lanes, bool parks, std::size_t ring_bytes)
    : rank_(rank),
      size_(size),
      lanes_(lanes),
      parks_(parks),
      max_park_(kMaxPark),
      ring_bytes_(ring_bytes != 0 ? ring_bytes : ring_bytes_for(size, lanes)),
      segment_bytes_(Segment::bytes(size, lanes, ring_bytes_)),
      segments_(static_cast<std::size_t>(std::max(size, 0)), nullptr),
      pidfds_(static_cast<std::size_t>(std::max(size, 0)), -1),
      lane_state_(static_cast<std::size_t>(std::max(lanes, 0))) {
  if (size < 1 || rank < 0 || rank >= size || lanes < 1) {
    throw InvalidArgument("shared memory: rank " + std::to_string(rank) + " of " +
                          std::to_string(size) + " processes with " + std::to_string(lanes) +
                          " lanes is out of range");
  }
  if (!std::has_single_bit(ring_bytes_) || ring_bytes_ < kMinRingBytes ||
      ring_bytes_ > kMaxRingBytes) {
    throw InvalidArgument("shared memory: a ring of " + std::to_string(ring_bytes_) +
                          " bytes; rings are a power of two from 64 KiB to 1 MiB");
  }
  std::random_device device;
  std::ostringstream name;
  name << "/replicator-" << getpid() << "-" << std::hex << device() << device();
  name_ = name.str();
  const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    throw Error("shared memory: cannot create " + name_ +
                " in /dev/shm: " + system_error_text(errno));
  }
  linked_ = true;
  // Allocated now, not on first touch: a /dev/shm too small for it (a container's 64 MiB)
  // fails here, and the job uses TCP, instead of a SIGBUS in the middle of a run.
  void* base = MAP_FAILED;
  int error = posix_fallocate(fd, 0, static_cast<off_t>(segment_bytes_));
  if (error == 0) {
    // Mapped in full now (MAP_POPULATE), as the peers' segments are: a ring's first lap
    // would otherwise take a page fault on each side every 4 KiB (16 KiB exchanges measured
    // 14 us on their first lap, 2-3 us after).
    base = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  close(fd);
  if (base == MAP_FAILED) {
    unlink();
    throw Error("shared memory: cannot allocate or map " + std::to_string(segment_bytes_) +
                " bytes of " + name_ + ": " + system_error_text(error));
  }
  std::byte* mine = static_cast<std::byte*>(base);
  segments_[static_cast<std::size_t>(rank)] = mine;
  std::memcpy(mine, &kMagic, sizeof kMagic);
  for (Lane& lane : lane_state_) {
    lane.sends.resize(static_cast<std::size_t>(size));
    lane.recvs.resize(static_cast<std::size_t>(size));
    lane.send_head.assign(static_cast<std::size_t>(size), 0);
    lane.recv_head.assign(static_cast<std::size_t>(size), 0);
    lane.written.assign(static_cast<std::size_t>(size), 0);
    lane.read_seen.assign(static_cast<std::size_t>(size), 0);
    lane.read.assign(static_cast<std::size_t>(size), 0);
    lane.wants_room.assign(static_cast<std::size_t>(size), 0);
    lane.short_last.assign(static_cast<std::size_t>(size), 1);
  }
}

ShmMesh::~ShmMesh() {
  unlink();
  for (std::byte* segment : segments_) {
    if (segment != nullptr) munmap(segment, segment_bytes_);
  }
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

std::unique_ptr<ShmMesh> ShmMesh::try_make(int rank, int size, int lanes, bool parks,
                                           std::size_t ring_bytes) {
  std::string host = host_identity();
  if (host.empty()) return nullptr;
  try {
    auto mesh = std::make_unique<ShmMesh>(rank, size, lanes, parks, ring_bytes);
    mesh->host_ = std::move(host);
    return mesh;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error&) {
    return nullptr;
  }
}

std::string ShmMesh::offer() const {
  return host_ + "\n" + name_ + "\n" + std::to_string(getpid());
}

bool ShmMesh::attach_offers(const std::vector<std::string>& offers) noexcept {
  try {
    if (host_.empty() || offers.size() != static_cast<std::size_t>(size_)) return false;
    std::vector<std::string> names(offers.size());
    std::vector<int> pids(offers.size(), 0);
    for (std::size_t q = 0; q < offers.size(); ++q) {
      if (static_cast<int>(q) == rank_) continue;
      const std::string& text = offers[q];
      const std::size_t first = text.find('\n');
      const std::size_t second = first == std::string::npos ? first : text.find('\n', first + 1);
      if (second == std::string::npos || text.compare(0, first, host_) != 0 ||
          first != host_.size()) {
        return false;
      }
      names[q] = text.substr(first + 1, second - first - 1);
      const char* pid_begin = text.data() + second + 1;
      const char* pid_end = text.data() + text.size();
      const auto parsed = std::from_chars(pid_begin, pid_end, pids[q]);
      if (parsed.ec != std::errc() || parsed.ptr != pid_end || pids[q] <= 0) return false;
    }
    attach(names, pids);
    return true;
  } catch (...) {
    return false;
  }
}

void ShmMesh::unlink() noexcept {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

void ShmMesh::attach(const std::vector<std::string>& names, const std::vector<int>& pids) {
  if (names.size() != static_cast<std::size_t>(size_) || pids.size() != names.size()) {
    throw InvalidArgument("shared memory: attach needs a name and a pid for each of the " +
                          std::to_string(size_) + " processes");
  }
  std::vector<std::byte*> mapped(segments_.size(), nullptr);
  std::vector<int> fds(segments_.size(), -1);
  auto undo = [&] {
    for (std::size_t q = 0; q < mapped.size(); ++q) {
      if (mapped[q] != nullptr) munmap(mapped[q], segment_bytes_);
      if (fds[q] >= 0) close(fds[q]);
    }
  };
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto i = static_cast<std::size_t>(q);
    const int fd = shm_open(names[i].c_str(), O_RDWR, 0);
    void* base = MAP_FAILED;
    struct stat st {};
    if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == segment_bytes_) {
      base =
          mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    } else if (fd >= 0) {
      errno = EINVAL;
    }
    const int error = errno;
    if (fd >= 0) close(fd);
    std::uint64_t magic = 0;
    if (base != MAP_FAILED) std::memcpy(&magic, base, sizeof magic);
    if (base == MAP_FAILED || magic != kMagic) {
      if (base != MAP_FAILED) munmap(base, segment_bytes_);
      undo();
      throw Error("shared memory: cannot map the segment " + names[i] + " of process " +
                  std::to_string(q) + ": " +
                  (base == MAP_FAILED ? system_error_text(error) : std::string("not ours")));
    }
    mapped[i] = static_cast<std::byte*>(base);
    fds[i] = static_cast<int>(syscall(SYS_pidfd_open, pids[i], 0));
    if (fds[i] < 0) {
      const int pid_error = errno;
      undo();
      throw Error("shared memory: cannot watch process " + std::to_string(q) + " (pid " +
                  std::to_string(pids[i]) + "): " + system_error_text(pid_error));
    }
  }
  for (std::size_t q = 0; q < mapped.size(); ++q) {
    if (static_cast<int>(q) == rank_) continue;
    segments_[q] = mapped[q];
    pidfds_[q] = fds[q];
  }
}

void ShmMesh::post(int lane, Ticket ticket, std::span<const SendOp> sends,
                   std::span<const RecvOp> recvs, std::size_t max_bytes) {
  if (lane < 0 || lane >= lanes_) {
    throw InvalidArgument("shared memory: lane " + std::to_string(lane) + " out of range");
  }
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  for (const RecvOp& op : recvs) {
    if (op.peer == rank_ || op.bytes > max_bytes) continue;
    l.recvs[static_cast<std::size_t>(op.peer)].push_back(l.ops.size());
    l.ops.push_back(
        {op.peer, true, false, ticket, static_cast<std::byte*>(op.data), op.bytes, 0, 0});
    ++l.pending;
  }
  bool any_send = false;
  for (const SendOp& op : sends) {
    if (op.peer == rank_ || op.bytes > max_bytes) continue;
    l.sends[static_cast<std::size_t>(op.peer)].push_back(l.ops.size());
    l.ops.push_back({op.peer, false, false, ticket,
                     const_cast<std::byte*>(static_cast<const std::byte*>(op.data)), op.bytes,
                     op.bytes, 0});
    ++l.pending;
    any_send = true;
  }
  if (!any_send) return;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ &&
        l.send_head[static_cast<std::size_t>(q)] < l.sends[static_cast<std::size_t>(q)].size()) {
      send_some(lane, q);
    }
  }
}

void ShmMesh::publish_core(int lane, int cpu) noexcept {
  if (lane < 0 || lane >= lanes_ || cpu < 0) return;
  std::byte* mine = segments_[static_cast<std::size_t>(rank_)];
  at<std::uint32_t>(mine, Segment::core(size_, lane))
      .store(static_cast<std::uint32_t>(cpu) + 1, std::memory_order_relaxed);
}

int ShmMesh::core_of(int process, int lane) const noexcept {
  if (process < 0 || process >= size_ || lane < 0 || lane >= lanes_) return -1;
  std::byte* segment = segments_[static_cast<std::size_t>(process)];
  if (segment == nullptr) return -1;
  const std::uint32_t value =
      at<std::uint32_t>(segment, Segment::core(size_, lane)).load(std::memory_order_relaxed);
  return static_cast<int>(value) - 1;
}

void ShmMesh::ring_bell(int process, int lane) noexcept {
  std::byte* segment = segments_[static_cast<std::size_t>(process)];
  at<std::uint32_t>(segment, Segment::bell(size_, lane)).fetch_add(1, std::memory_order_seq_cst);
  if (at<std::uint32_t>(segment, Segment::sleepers(size_, lane)).load(std::memory_order_seq_cst) !=
      0) {
    futex_wake_shared(reinterpret_cast<std::uint32_t*>(segment + Segment::bell(size_, lane)));
  }
}

void ShmMesh::ring_bell_if_parked(int process, int lane) noexcept {
  std::byte* segment = segments_[static_cast<std::size_t>(process)];
  if (at<std::uint32_t>(segment, Segment::sleepers(size_, lane)).load(std::memory_order_seq_cst) !=
      0) {
    ring_bell(process, lane);
  }
}

// Writes the front sends to `peer` into the ring (lane, this process) of the peer's segment.
bool ShmMesh::send_some(int lane, int peer) noexcept {
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  const auto p = static_cast<std::size_t>(peer);
  std::byte* ring = segments_[p] + Segment::ring(size_, lanes_, ring_bytes_, lane, rank_);
  std::byte* data = ring + kRingControl;
  auto written = at<std::uint64_t>(ring, kWritten);
  auto read = at<std::uint64_t>(ring, kRead);
  auto wants_room = at<std::uint32_t>(ring, kWantsRoom);
  const std::uint64_t start = l.written[p];
  std::uint64_t w = start;
  const std::size_t mask = ring_bytes_ - 1;
  for (;;) {
    std::uint64_t r = l.read_seen[p];
    bool fresh = false;  // r loaded in this pass
    while (l.send_head[p] < l.sends[p].size()) {
      Op& op = l.ops[l.sends[p][l.send_head[p]]];
      const std::size_t total = framed(op.bytes);
      std::size_t room = ring_bytes_ - static_cast<std::size_t>(w - r);
      if (!fresh && room < std::min(total - op.moved, ring_bytes_)) {
        r = read.load(std::memory_order_acquire);
        fresh = true;
        room = ring_bytes_ - static_cast<std::size_t>(w - r);
      }
      if (op.moved == 0) {
        if (room < kHeaderBytes) break;
        const std::uint64_t length = op.bytes;
        std::memcpy(data + (w & mask), &length, kHeaderBytes);
        w += kHeaderBytes;
        op.moved = kHeaderBytes;
        room -= kHeaderBytes;
      }
      while (op.moved < total && room > 0) {
        const std::size_t offset = op.moved - kHeaderBytes;
        const std::size_t pos = static_cast<std::size_t>(w & mask);
        std::size_t n = std::min({room, total - op.moved, ring_bytes_ - pos});
        if (offset < op.bytes) {
          n = std::min(n, op.bytes - offset);
          std::memcpy(data + pos, op.data + offset, n);
        }  // else: padding, left as it is
        w += n;
        op.moved += n;
        room -= n;
      }
      if (op.moved < total) break;
      op.done = true;
      --l.pending;
      ++l.send_head[p];
    }
    l.read_seen[p] = r;
    if (l.send_head[p] == l.sends[p].size()) {
      if (l.wants_room[p] != 0) {
        wants_room.store(0, std::memory_order_relaxed);
        l.wants_room[p] = 0;
      }
      break;
    }
    // Out of room: ask the reader to ring when it frees some, then look once more (it may
    // have freed some before it could see the request).
    if (l.wants_room[p] == 0) {
      wants_room.store(1, std::memory_order_seq_cst);
      l.wants_room[p] = 1;
    }
    const std::uint64_t again = read.load(std::memory_order_seq_cst);
    if (again == r) break;
    l.read_seen[p] = again;
  }
  if (w == start) return false;
  l.written[p] = w;
  if (parks_) {
    written.store(w, std::memory_order_seq_cst);
    ring_bell_if_parked(peer, lane);
  } else {
    written.store(w, std::memory_order_release);
  }
  return true;
}

// Reads from the ring (lane, peer) of this process's segment into the front receives.
bool ShmMesh::recv_some(int lane, int peer, WaitResult* error) noexcept {
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  const auto p = static_cast<std::size_t>(peer);
  std::byte* ring = segments_[static_cast<std::size_t>(rank_)] +
                    Segment::ring(size_, lanes_, ring_bytes_, lane, peer);
  const std::byte* data = ring + kRingControl;
  auto read = at<std::uint64_t>(ring, kRead);
  const std::uint64_t start = l.read[p];
  std::uint64_t r = start;
  const std::size_t mask = ring_bytes_ - 1;
  if (l.short_last[p] != 0) __builtin_prefetch(data + (r & mask));
  const std::uint64_t w = at<std::uint64_t>(ring, kWritten).load(std::memory_order_acquire);
  while (l.recv_head[p] < l.recvs[p].size()) {
    Op& op = l.ops[l.recvs[p][l.recv_head[p]]];
    std::size_t available = static_cast<std::size_t>(w - r);
    if (op.moved == 0) {
      if (available < kHeaderBytes) break;
      std::uint64_t length = 0;
      std::memcpy(&length, data + (r & mask), kHeaderBytes);
      if (length > op.bytes) {
        *error = {Outcome::kTooLong, peer, static_cast<std::size_t>(length), op.bytes};
        break;
      }
      op.length = static_cast<std::size_t>(length);
      r += kHeaderBytes;
      op.moved = kHeaderBytes;
      available -= kHeaderBytes;
    }
    const std::size_t total = framed(op.length);
    while (op.moved < total && available > 0) {
      const std::size_t offset = op.moved - kHeaderBytes;
      const std::size_t pos = static_cast<std::size_t>(r & mask);
      std::size_t n = std::min({available, total - op.moved, ring_bytes_ - pos});
      if (offset < op.length) {
        n = std::min(n, op.length - offset);
        std::memcpy(op.data + offset, data + pos, n);
      }
      r += n;
      op.moved += n;
      available -= n;
    }
    if (op.moved < total) break;
    op.done = true;
    --l.pending;
    ++l.recv_head[p];
    l.short_last[p] = total <= kPrefetchBelow ? 1 : 0;
  }
  if (r == start) return false;
  l.read[p] = r;
  if (!parks_) {
    read.store(r, std::memory_order_release);
    return true;
  }
  read.store(r, std::memory_order_seq_cst);
  // The writer ran out of room and waits for some.
  if (at<std::uint32_t>(ring, kWantsRoom).load(std::memory_order_seq_cst) != 0) {
    ring_bell(peer, lane);
  }
  return true;
}

bool ShmMesh::progress(int lane, WaitResult* error) noexcept {
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  bool moved = false;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto i = static_cast<std::size_t>(q);
    if (l.recv_head[i] < l.recvs[i].size()) moved = recv_some(lane, q, error) || moved;
    if (error->outcome != Outcome::kDone) return moved;
    if (l.send_head[i] < l.sends[i].size()) moved = send_some(lane, q) || moved;
  }
  return moved;
}

bool ShmMesh::complete(const Lane& lane, Ticket ticket) const noexcept {
  for (std::size_t i = lane.head; i < lane.ops.size() && lane.ops[i].ticket <= ticket; ++i) {
    if (!lane.ops[i].done) return false;
  }
  return true;
}

int ShmMesh::failed_peer() const noexcept {
  std::byte* mine = segments_[static_cast<std::size_t>(rank_)];
  if (at<std::uint32_t>(mine, Segment::kFailures).load(std::memory_order_acquire) == 0) return -1;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (at<std::uint32_t>(mine,
                          Segment::kFlags + static_cast<std::size_t>(q) * sizeof(std::uint32_t))
            .load(std::memory_order_acquire) != 0) {
      return q;
    }
  }
  return -1;
}

int ShmMesh::gone_peer() const noexcept {
  for (int q = 0; q < size_; ++q) {
    const int fd = pidfds_[static_cast<std::size_t>(q)];
    if (fd < 0) continue;
    pollfd one{fd, POLLIN, 0};
    if (::poll(&one, 1, 0) > 0 && (one.revents & (POLLIN | POLLHUP | POLLERR)) != 0) return q;
  }
  return -1;
}

ShmMesh::WaitResult ShmMesh::wait(int lane, Ticket ticket, Clock::time_point deadline,
                                  std::chrono::microseconds spin, std::chrono::microseconds yield,
                                  const Poison& poison) noexcept {
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  std::byte* mine = segments_[static_cast<std::size_t>(rank_)];
  auto bell = at<std::uint32_t>(mine, Segment::bell(size_, lane));
  auto sleepers = at<std::uint32_t>(mine, Segment::sleepers(size_, lane));
  WaitResult result;
  // One look at everything this wait watches: kDone with `finished` once the posts up to
  // the ticket completed; another outcome ends the wait.
  bool finished = false;
  const auto look = [&](bool* moved) -> WaitResult {
    *moved = progress(lane, &result);
    if (result.outcome != Outcome::kDone) return result;
    finished = complete(l, ticket);
    if (finished) return result;
    if (poison.is_set()) return {Outcome::kPoisoned};
    if (const int q = failed_peer(); q >= 0) return {Outcome::kPeerFailed, q};
    return result;
  };
  // Set at the first look at the clock: a wait that its first look completes reads none.
  Clock::time_point spin_end{};
  Clock::time_point yield_end{};
  Clock::time_point last_look_at_processes{};
  int yields = 0;
  bool spinning = spin.count() > 0;
  for (std::uint64_t round = 0;; ++round) {
    bool moved = false;
    if (const WaitResult r = look(&moved); r.outcome != Outcome::kDone) return r;
    if (finished) break;
    if (moved) continue;
    // While spinning, the clock is read every 16 looks; after, every look yields the core
    // (with more threads than cores, a look that spins takes the core its peer needs).
    if (spinning && (round & 15) != 0) {
      cpu_relax();
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (spin_end == Clock::time_point{}) {
      spin_end = now + spin;
      yield_end = spin_end + yield;
      last_look_at_processes = now;
    }
    if (now >= deadline) return {Outcome::kTimedOut};
    if (now < spin_end) {
      cpu_relax();
      continue;
    }
    spinning = false;
    if (now < yield_end || (spin.count() == 0 && yields < kYields)) {
      ++yields;
      sched_yield();
      continue;
    }
    if (parks_) {
      // Park: count in as a sleeper, read the bell, look once more, and sleep only while the
      // bell still holds that value (a writer that stored after this look saw the sleeper).
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = bell.load(std::memory_order_seq_cst);
      const WaitResult last = look(&moved);
      if (last.outcome == Outcome::kDone && !finished && !moved) {
        futex_wait_shared(reinterpret_cast<std::uint32_t*>(mine + Segment::bell(size_, lane)), seen,
                          std::min<Clock::duration>(deadline - now, max_park_));
      }
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (last.outcome != Outcome::kDone) return last;
      if (finished) break;
    } else {
      // Nobody rings for data: nap, and look at the peers' processes as often as a park would.
      std::this_thread::sleep_for(std::min<Clock::duration>(deadline - now, kNap));
      if (Clock::now() - last_look_at_processes < max_park_) continue;
    }
    last_look_at_processes = Clock::now();
    if (const int q = gone_peer(); q >= 0) {
      // What it wrote before it died still counts.
      progress(lane, &result);
      if (result.outcome == Outcome::kDone && complete(l, ticket)) break;
      if (result.outcome != Outcome::kDone) return result;
      return {Outcome::kPeerGone, q};
    }
  }
  forget_completed(lane);
  return result;
}

void ShmMesh::forget_completed(int lane) noexcept {
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  while (l.head < l.ops.size() && l.ops[l.head].done) ++l.head;
  if (l.pending == 0) drop(lane);
}

bool ShmMesh::poll(int lane, Ticket ticket, WaitResult* error) noexcept {
  const Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  if (l.pending == 0) return true;
  progress(lane, error);
  if (error->outcome != Outcome::kDone || !complete(l, ticket)) return false;
  forget_completed(lane);
  return true;
}

std::vector<int> ShmMesh::missing(int lane, Ticket ticket, bool* receives_done) const {
  const Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  std::vector<int> recvs;
  std::vector<int> sends;
  for (std::size_t i = l.head; i < l.ops.size() && l.ops[i].ticket <= ticket; ++i) {
    const Op& op = l.ops[i];
    if (!op.done) (op.is_recv ? recvs : sends).push_back(op.peer);
  }
  *receives_done = recvs.empty();
  std::vector<int> out = recvs.empty() ? std::move(sends) : std::move(recvs);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void ShmMesh::drop(int lane) noexcept {
  Lane& l = lane_state_[static_cast<std::size_t>(lane)];
  l.ops.clear();
  l.head = 0;
  l.pending = 0;
  for (std::size_t q = 0; q < l.sends.size(); ++q) {
    l.sends[q].clear();
    l.recvs[q].clear();
    l.send_head[q] = 0;
    l.recv_head[q] = 0;
  }
}

void ShmMesh::announce_failure(std::string_view notice) noexcept {
  if (announced_.exchange(true, std::memory_order_acq_rel)) return;
  std::byte* own = segments_[static_cast<std::size_t>(rank_)];
  const std::size_t length = std::min(notice.size(), kNoticeBytes - sizeof(std::uint64_t));
  std::memcpy(own + Segment::notice(size_) + sizeof(std::uint64_t), notice.data(), length);
  // Released before any flag: a peer that sees a flag (acquire) reads the whole notice.
  at<std::uint64_t>(own, Segment::notice(size_)).store(length, std::memory_order_release);
  for (int q = 0; q < size_; ++q) {
    std::byte* segment = segments_[static_cast<std::size_t>(q)];
    if (q == rank_ || segment == nullptr) continue;
    at<std::uint32_t>(segment,
                      Segment::kFlags + static_cast<std::size_t>(rank_) * sizeof(std::uint32_t))
        .store(1, std::memory_order_release);
    at<std::uint32_t>(segment, Segment::kFailures).fetch_add(1, std::memory_order_acq_rel);
    for (int lane = 0; lane < lanes_; ++lane) ring_bell(q, lane);
  }
}

std::string ShmMesh::notice_of(int process) const {
  if (process < 0 || process >= size_) return {};
  std::byte* segment = segments_[static_cast<std::size_t>(process)];
  if (segment == nullptr) return {};
  const std::uint64_t length =
      at<std::uint64_t>(segment, Segment::notice(size_)).load(std::memory_order_acquire);
  const auto* text =
      reinterpret_cast<const char*>(segment + Segment::notice(size_) + sizeof(std::uint64_t));
  return std::string(text, std::min<std::size_t>(length, kNoticeBytes - sizeof(std::uint64_t)));
}

ShmMesh::WaitResult ShmMesh::peer_failure() const noexcept {
  if (const int q = failed_peer(); q >= 0) return {Outcome::kPeerFailed, q};
  if (const int q = gone_peer(); q >= 0) return {Outcome::kPeerGone, q};
  return {};
}

void ShmMesh::wake_local() noexcept {
  for (int lane = 0; lane < lanes_; ++lane) ring_bell(rank_, lane);
}

}  // namespace replicator::detail
