// The fake device: host memory behind the device interface. Its addresses carry a tag in bit
// 62, which makes them non-canonical on x86-64: a host load or store through one faults, so
// a path that touches device memory from the host fails here as it would on a GPU. Only the
// fake streams (and copies) strip the tag. Each stream is a thread that runs its queue in
// order.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <thread>

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
  void synchronize() override {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
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
      lock.unlock();
      work();
      lock.lock();
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
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a tagged address, never read from the host
    return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) | kTag);
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
};

}  // namespace

DeviceBackend& fake_backend() {
  static FakeBackend backend;
  return backend;
}

}  // namespace replicator::detail
