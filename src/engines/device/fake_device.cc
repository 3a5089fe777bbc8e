// The fake device: host memory behind the device interface. Its addresses carry a tag in bit
// 62, which makes them non-canonical on x86-64: a host load or store through one faults, so
// a path that touches device memory from the host fails here as it would on a GPU. Only the
// fake streams (and copies) strip the tag. Each stream is a thread that runs its queue in
// order. Memory and events that other processes open (the stand-in for CUDA IPC) are POSIX
// shared memory, named in the handle.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <utility>

#include "replicator/errors.h"
#include "src/engines/device/device_backend.h"

namespace replicator::detail {
namespace {

constexpr std::uintptr_t kTag = std::uintptr_t{1} << 62;
constexpr int kFakeDevices = 64;

void* untag(const void* p) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the tag is the fake device's addresses' point
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) & ~kTag);
}
void* tag(void* p) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a tagged address, never read from the host
  return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) | kTag);
}

// Shared memory between the processes of the host: a handle holds the object's name and size.
struct SharedName {
  char name[48] = {};
  std::uint64_t bytes = 0;
};
static_assert(sizeof(SharedName) <= IpcHandle::kBytes);

SharedName name_of(const IpcHandle& handle) {
  SharedName n;
  std::memcpy(&n, handle.bytes.data(), sizeof n);
  n.name[sizeof n.name - 1] = 0;
  return n;
}

[[noreturn]] void fail_shared(const std::string& what, const char* name) {
  throw Error(std::string("fake device: ") + what + " of shared memory " + name +
              " failed: " + std::error_code(errno, std::generic_category()).message());
}

// Makes (create) or opens a shared-memory object and maps it.
void* map_shared(const SharedName& n, bool create) {
  const int fd =
      create ? shm_open(n.name, O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(n.name, O_RDWR, 0);
  if (fd < 0) fail_shared(create ? "shm_open (create)" : "shm_open", n.name);
  if (create && ftruncate(fd, static_cast<off_t>(n.bytes)) != 0) {
    close(fd);
    shm_unlink(n.name);
    fail_shared("ftruncate", n.name);
  }
  void* p = mmap(nullptr, n.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(n.name);
    fail_shared("mmap", n.name);
  }
  return p;
}

SharedName new_shared_name(std::size_t bytes) {
  static std::atomic<std::uint64_t> serial{0};
  SharedName n;
  std::snprintf(n.name, sizeof n.name, "/replicator-fake-%d-%llu", static_cast<int>(getpid()),
                static_cast<unsigned long long>(serial.fetch_add(1)));
  n.bytes = std::max<std::size_t>(bytes, 64);
  return n;
}

// An event other processes open: two counters in shared memory. `recorded` counts the
// records enqueued (by the owning process's threads), `completed` the last one a stream ran;
// a wait enqueued now waits for `completed` to reach what `recorded` is now.
struct EventCounters {
  std::uint64_t recorded;
  std::uint64_t completed;
};

class FakeEvent final : public DeviceEvent {
 public:
  FakeEvent(const SharedName& n, bool own) : name_(n), own_(own) {
    counters_ = static_cast<EventCounters*>(map_shared(n, own));
  }
  ~FakeEvent() override {
    munmap(counters_, name_.bytes);
    if (own_) shm_unlink(name_.name);
  }
  FakeEvent(const FakeEvent&) = delete;
  FakeEvent& operator=(const FakeEvent&) = delete;

  std::atomic_ref<std::uint64_t> recorded() { return std::atomic_ref(counters_->recorded); }
  std::atomic_ref<std::uint64_t> completed() { return std::atomic_ref(counters_->completed); }

 private:
  SharedName name_;
  bool own_;
  EventCounters* counters_ = nullptr;
};

// Bumped by cancel_event_waits: a wait for an opened event that sees it change gives up.
std::atomic<std::uint64_t> cancel_generation{0};
std::atomic<std::uint64_t> event_waits{0};  // fake_event_waits()

// The reduction on the stream's thread, element by element with the kernels' arithmetic.
void run_reduce(const DeviceReduce& call) {
  DeviceReduce c = call;
  for (int j = 0; j < c.n; ++j) c.inputs[j] = untag(c.inputs[j]);
  for (int k = 0; k < c.num_outputs; ++k) c.outputs[k] = untag(c.outputs[k]);
  elementwise::dispatch(c.dtype, c.op, [&]<typename Kind>(Kind) {
    using T = typename Kind::Type;
    using Storage = typename elementwise::Element<T, Kind::kOp>::Storage;
    for (std::size_t i = 0; i < c.count; ++i) {
      const Storage r = elementwise::reduce_element<T, Kind::kOp>(c.inputs, c.n, i, c.divisor);
      for (int k = 0; k < c.num_outputs; ++k) static_cast<Storage*>(c.outputs[k])[i] = r;
    }
  });
}

class FakeStream final : public DeviceStream {
 public:
  FakeStream() : thread_([this] { loop(); }) {}
  ~FakeStream() override {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    enqueue([dst, src, bytes] {
      if (bytes > 0) std::memcpy(untag(dst), untag(src), bytes);
    });
  }
  void zero(void* dst, std::size_t bytes) override {
    enqueue([dst, bytes] {
      if (bytes > 0) std::memset(untag(dst), 0, bytes);
    });
  }
  void reduce(const DeviceReduce& call) override {
    enqueue([call] { run_reduce(call); });
  }
  // The fake device's only way in is copy_bytes, which returns once it is done.
  void wait_for_issued_work() override {}
  void synchronize() override { synchronize_until(Clock::time_point::max()); }
  bool synchronize_until(Clock::time_point deadline) override {
    std::unique_lock lock(mutex_);
    if (!idle_.wait_until(lock, deadline, [&] { return queue_.empty() && !busy_; })) return false;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }
  void record(DeviceEvent& event) override {
    auto& e = dynamic_cast<FakeEvent&>(event);
    const std::uint64_t target = e.recorded().fetch_add(1) + 1;
    enqueue([&e, target] { e.completed().store(target); });
  }
  void wait(DeviceEvent& event) override {
    auto& e = dynamic_cast<FakeEvent&>(event);
    const std::uint64_t target = e.recorded().load();
    const std::uint64_t generation = cancel_generation.load();
    enqueue([&e, target, generation] {
      for (int looks = 0; e.completed().load() < target; ++looks) {
        if (cancel_generation.load() != generation) {
          throw Error("fake device: a wait for another process's event was cancelled");
        }
        if (looks < 1000) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      event_waits.fetch_add(1);
    });
  }

 private:
  void enqueue(std::function<void()> work) {
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(std::move(work));
    }
    wake_.notify_one();
  }
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      const bool skip = error_ != nullptr;  // after a failure, until synchronize() reports it
      lock.unlock();
      std::exception_ptr failed;
      if (!skip) {
        try {
          work();
        } catch (...) {
          failed = std::current_exception();
        }
      }
      lock.lock();
      if (failed) error_ = failed;
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;  // the first failure since the last synchronize()
  std::thread thread_;
};

class FakeBackend final : public DeviceBackend {
 public:
  MemoryKind kind() const override { return MemoryKind::kFake; }
  int count() const override { return kFakeDevices; }
  void* allocate(int device, std::size_t bytes) override {
    void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
    if (p == nullptr) {
      throw Error("fake:" + std::to_string(device) + ": could not allocate " +
                  std::to_string(bytes) + " bytes");
    }
    return tag(p);
  }
  void release(int, void* data) noexcept override { std::free(untag(data)); }
  void* allocate_host(std::size_t bytes) override {
    void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void release_host(void* data) noexcept override { std::free(data); }
  bool reaches(int, int) override { return true; }
  std::unique_ptr<DeviceStream> make_stream(int) override { return std::make_unique<FakeStream>(); }

  void* allocate_shared(int, std::size_t bytes, IpcHandle& handle) override {
    const SharedName n = new_shared_name(bytes);
    void* p = map_shared(n, true);
    std::memcpy(handle.bytes.data(), &n, sizeof n);
    const std::lock_guard lock(mutex_);
    mapped_[p] = {n, true};
    return tag(p);
  }
  void release_shared(int device, void* data) noexcept override { close_shared(device, data); }
  void* open_shared(int, const IpcHandle& handle) override {
    const SharedName n = name_of(handle);
    void* p = map_shared(n, false);
    const std::lock_guard lock(mutex_);
    mapped_[p] = {n, false};
    return tag(p);
  }
  void close_shared(int, void* data) noexcept override {
    Mapping m;
    {
      const std::lock_guard lock(mutex_);
      const auto it = mapped_.find(untag(data));
      if (it == mapped_.end()) return;
      m = it->second;
      mapped_.erase(it);
    }
    munmap(untag(data), m.name.bytes);
    if (m.own) shm_unlink(m.name.name);
  }
  std::unique_ptr<DeviceEvent> make_shared_event(int, IpcHandle& handle) override {
    const SharedName n = new_shared_name(sizeof(EventCounters));
    auto event = std::make_unique<FakeEvent>(n, true);
    std::memcpy(handle.bytes.data(), &n, sizeof n);
    return event;
  }
  std::unique_ptr<DeviceEvent> open_event(int, const IpcHandle& handle) override {
    return std::make_unique<FakeEvent>(name_of(handle), false);
  }
  void cancel_event_waits() noexcept override { cancel_generation.fetch_add(1); }

 private:
  struct Mapping {
    SharedName name;
    bool own = false;
  };
  std::mutex mutex_;
  std::map<void*, Mapping> mapped_;  // by untagged address
};

}  // namespace

std::uint64_t fake_event_waits() { return event_waits.load(); }

DeviceBackend& fake_backend() {
  static FakeBackend backend;
  return backend;
}

}  // namespace replicator::detail
