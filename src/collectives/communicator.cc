#include "src/collectives/communicator.h"

#include <algorithm>

#include "replicator/errors.h"
#include "src/collectives/frames.h"
#include "src/collectives/table.h"

namespace replicator::detail {

Communicator::Communicator(int num_replicas, std::chrono::milliseconds timeout,
                           std::chrono::microseconds spin, const MachineFacts& facts,
                           FlightRecorders& recorders, const ProcessLayout* layout)
    : engine_(num_replicas, layout ? layout->rank * num_replicas : 0,
              layout ? layout->replicas() : num_replicas, timeout, spin),
      layout_(layout),
      facts_(facts),
      recorders_(recorders) {
  for (int j = 0; j < num_replicas; ++j) lanes_.push_back(std::make_unique<Lane>(num_replicas));
}

Communicator::~Communicator() = default;

void Communicator::fail_across(int me, const Error& e) {
  std::optional<int> cause;
  if (const auto* aborted = dynamic_cast<const Aborted*>(&e)) cause = aborted->cause_replica();
  const int replica = cause.value_or(engine_.first() + me);
  engine_.fail(replica, e.what());
  layout_->transport->abort(e.what(), replica);
  engine_.depart(me);
}

void Communicator::collective(int me, std::uint64_t& sequence, const Call& call) {
  const CollectiveDef& def = definition(call.kind);
  const std::chrono::milliseconds timeout = call.timeout.value_or(engine_.timeout());
  if (timeout.count() <= 0) {
    throw InvalidArgument(std::string(def.traits.name) + ": timeout must be positive, got " +
                          std::to_string(timeout.count()) + "ms");
  }
  const int first = engine_.first();
  const int parity = static_cast<int>(sequence & 1);
  Descriptor& d = engine_.descriptor(me, parity);
  d = Descriptor{.traits = &def.traits, .kind = call.kind, .call = call};
  def.describe(call, first + me, engine_.total(), d);
  d.memory = memory_of(call);
  d.sequence = sequence++;
  FlightRecorder& recorder = recorders_[me];
  const auto start = LocalEngine::Clock::now();
  recorder.issue(d, start);
  try {
    if (d.memory == MemoryKind::kHost) {
      run(me, def, d, timeout, start);
    } else {
      run_device(me, def, d, timeout, start);
    }
  } catch (...) {
    // What every local replica was doing when the first collective failed, this replica
    // still in its collective.
    recorders_.note_failure();
    recorder.finish(true);
    throw;
  }
  recorder.finish(false);
}

void Communicator::run_device(int me, const CollectiveDef& def, Descriptor& d,
                              std::chrono::milliseconds timeout,
                              LocalEngine::Clock::time_point start) {
  DeviceLane& device = lanes_[static_cast<std::size_t>(me)]->device;
  // What the replica's thread issued before the call is done before anyone reads its buffers.
  DeviceStream& stream = device.stream(first_device(d.call));
  stream.wait_for_issued_work();
  if (engine_.total() == 1) return single_in_device(def, d, device);
  const Call call = d.call;
  if (layout_ ? runs_in_device_across(*layout_, d.memory, static_cast<OpKind>(call.kind))
              : &def == &definition(OpKind::kAllReduce) &&
                    reduces_in_device(d.memory, engine_.size())) {
    return run(me, def, d, timeout, start, &device);
  }
  d.call = device.to_host(def, call, d.memory, engine_.first() + me);
  run(me, def, d, timeout, start);
  d.call = call;
  device.from_host(call);
}

void Communicator::run(int me, const CollectiveDef& def, Descriptor& d,
                       std::chrono::milliseconds timeout, LocalEngine::Clock::time_point start,
                       DeviceLane* device) {
  Lane& lane = *lanes_[static_cast<std::size_t>(me)];
  if (engine_.total() == 1) return def.single(d, lane.scratch);

  const int first = engine_.first();
  const int parity = static_cast<int>(d.sequence & 1);
  const auto deadline = start + timeout;
  d.timeout = timeout;
  // Across processes the local part always works on the replicas' own buffers, and so does
  // a reduction in the device.
  const Path path = layout_ || device
                        ? Path::kDirect
                        : choose_local_path(def.path_bytes(d), LocalEngine::kStagingBytes, facts_);
  if (path == Path::kStaged && def.stages(d, first + me)) {
    stage(def, d, engine_.staging(me, parity));
  }

  engine_.arrive_and_wait(me, d, deadline, timeout);
  recorders_[me].start();
  const std::span<const Descriptor* const> calls = engine_.calls(me, parity);
  const Peers peers{.me = me,
                    .n = engine_.size(),
                    .path = path,
                    .calls = calls,
                    .staging = engine_.staging_of(me, parity),
                    .scratch = &lane.scratch,
                    .in_ptrs = lane.in_ptrs,
                    .out_ptrs = lane.out_ptrs};
  const bool same = std::all_of(calls.begin(), calls.end(),
                                [&](const Descriptor* c) { return c->matches(*calls[0]); });
  if (layout_ && !same) {
    // This process's replicas disagree: the other processes learn it from this lane's frame
    // (and raise CollectiveMismatch too, sending no data); here each replica raises the
    // mismatch that names every local call.
    try {
      exchange_local_mismatch(peers, *layout_, lane.across, deadline);
    } catch (const CollectiveMismatch&) {
    } catch (const Error& e) {
      fail_across(me, e);
      throw;
    }
    engine_.depart(me);
  }
  check_match(first, first + me, calls);
  if (layout_) {
    try {
      cross_process(peers, *layout_, lane.across, deadline, device);
    } catch (const CollectiveMismatch& e) {
      // Every lane of every process reads the same frames and raises the same mismatch:
      // nobody is left waiting, so the transport stays as it is.
      engine_.fail(first + me, e.what());
      engine_.depart(me);
      throw;
    } catch (const Error& e) {
      // Release this process's other replicas, including those in an exchange (their
      // lanes), and leave only once none of them touches this replica's buffers.
      fail_across(me, e);
      throw;
    }
    engine_.depart(me);
    engine_.check_poison(me);
    return;
  }
  if (device) {
    device_all_reduce(peers, device->stream(first_device(d.call)));
  } else if (def.in_process) {
    def.in_process(peers);
  }
  if (path == Path::kDirect) engine_.arrive_and_wait(me, d, deadline, timeout);
}

}  // namespace replicator::detail
