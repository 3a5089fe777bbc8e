#include "src/collectives/table.h"

#include <cstring>
#include <string>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

// ---- local checks, shared by the entries ----------------------------------------------
// The message is built only when the check fails: these run on every collective.

template <typename Message>
void require(bool ok, Message&& message) {
  if (!ok) throw InvalidArgument(message());
}

template <typename What>
void check_buffer(const Buffer& b, What&& what) {
  require(b.data != nullptr || b.count == 0, [&] {
    return what() + " has " + std::to_string(b.count) + " elements but a null data pointer";
  });
}

bool overlaps(const Buffer& a, const Buffer& b) {
  if (a.count == 0 || b.count == 0) return false;
  const auto* a0 = static_cast<const std::byte*>(a.data);
  const auto* b0 = static_cast<const std::byte*>(b.data);
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

std::string name_of(const Call& call) { return std::string(definition(call.kind).traits.name); }

void check_root(const Call& call, int n) {
  require(call.root >= 0 && call.root < n, [&] {
    return name_of(call) + ": root must be a replica id in [0, " + std::to_string(n) + "), got " +
           std::to_string(call.root);
  });
}

void finish(const Call& call, Descriptor& d) {
  if (call.signature != 0) d.layout = mix_hash(d.layout, call.signature);
}

// In place over a list of buffers (all_reduce, broadcast).
void describe_buffers(const Call& call, Descriptor& d) {
  const auto name = [&] { return name_of(call); };
  std::uint64_t layout = call.buffers.size();
  for (std::size_t i = 0; i < call.buffers.size(); ++i) {
    const Buffer& b = call.buffers[i];
    check_buffer(b, [&] { return name() + " buffer " + std::to_string(i); });
    d.count += b.count;
    layout = mix_hash(mix_hash(layout, static_cast<std::uint64_t>(b.dtype)), b.count);
    for (std::size_t k = 0; k < i; ++k) {
      require(!overlaps(call.buffers[k], b), [&] {
        return name() + ": fused buffers " + std::to_string(k) + " and " + std::to_string(i) +
               " overlap";
      });
    }
  }
  d.dtype = call.buffers.empty() ? DType::kF32 : call.buffers.front().dtype;
  d.layout = call.buffers.size() == 1 ? 0 : layout;
  d.num_buffers = static_cast<std::uint32_t>(call.buffers.size());
}

// From an input to an output of the same dtype.
void describe_input_output(const Call& call, Descriptor& d) {
  const Buffer& in = call.input;
  const Buffer& out = call.output;
  check_buffer(in, [&] { return name_of(call) + " input"; });
  check_buffer(out, [&] { return name_of(call) + " output"; });
  require(in.dtype == out.dtype, [&] {
    return name_of(call) + ": input is " + std::string(to_string(in.dtype)) + " but output is " +
           std::string(to_string(out.dtype));
  });
  d.dtype = in.dtype;
  d.count = in.count;
}

// `out` holds `in` once per replica; the only overlap allowed is `in` being exactly block
// `me` of `out` (in place: the algorithm skips that copy).
void check_gathered_output(const Call& call, int me, int n) {
  const Buffer& in = call.input;
  const Buffer& out = call.output;
  const auto un = static_cast<std::uint64_t>(n);
  require(out.count == in.count * un, [&] {
    return name_of(call) +
           ": output must hold input.size() * num_replicas() = " + std::to_string(in.count * un) +
           " elements, got " + std::to_string(out.count);
  });
  const bool in_place_block = in.data == static_cast<const std::byte*>(out.data) +
                                             static_cast<std::size_t>(me) * in.bytes();
  require(!overlaps(in, out) || in_place_block, [&] {
    return name_of(call) + ": input overlaps output other than as exactly block " +
           std::to_string(me) + " (this replica's own block) of it";
  });
}

void check_same_size(const Call& call) {
  require(call.output.count == call.input.count, [&] {
    return name_of(call) + ": output must hold as many elements as input (" +
           std::to_string(call.input.count) + "), got " + std::to_string(call.output.count);
  });
  require(!overlaps(call.input, call.output),
          [&] { return name_of(call) + ": input and output overlap"; });
}

// ---- the entries' functions -------------------------------------------------------------

void describe_all_reduce(const Call& call, int, int, Descriptor& d) {
  d.op = call.op;
  describe_buffers(call, d);
  finish(call, d);
}

void describe_broadcast(const Call& call, int, int n, Descriptor& d) {
  check_root(call, n);
  d.root = call.root;
  describe_buffers(call, d);
  finish(call, d);
}

void describe_all_gather(const Call& call, int me, int n, Descriptor& d) {
  describe_input_output(call, d);
  check_gathered_output(call, me, n);
  finish(call, d);
}

void describe_reduce_scatter(const Call& call, int, int n, Descriptor& d) {
  describe_input_output(call, d);
  d.op = call.op;
  const auto un = static_cast<std::uint64_t>(n);
  require(call.input.count == call.output.count * un, [&] {
    return name_of(call) + ": input must hold output.size() * num_replicas() = " +
           std::to_string(call.output.count * un) + " elements, got " +
           std::to_string(call.input.count);
  });
  require(!overlaps(call.input, call.output),
          [&] { return name_of(call) + ": input and output overlap"; });
  finish(call, d);
}

void describe_all_to_all(const Call& call, int, int n, Descriptor& d) {
  describe_input_output(call, d);
  check_same_size(call);
  require(call.input.count % static_cast<std::uint64_t>(n) == 0, [&] {
    return name_of(call) + ": input size " + std::to_string(call.input.count) +
           " is not a multiple of num_replicas() = " + std::to_string(n);
  });
  finish(call, d);
}

void describe_permute(const Call& call, int, int n, Descriptor& d) {
  describe_input_output(call, d);
  check_same_size(call);
  // Pairs are few; a quadratic duplicate check needs no scratch memory.
  std::uint64_t layout = call.pairs.size();
  for (std::size_t i = 0; i < call.pairs.size(); ++i) {
    const int src = call.pairs[i].first;  // named, not bound: the messages capture them
    const int dst = call.pairs[i].second;
    require(src >= 0 && src < n && dst >= 0 && dst < n, [&] {
      return name_of(call) + ": pair (" + std::to_string(src) + ", " + std::to_string(dst) +
             ") names a replica outside [0, " + std::to_string(n) + ")";
    });
    for (std::size_t k = 0; k < i; ++k) {
      require(call.pairs[k].first != src, [&] {
        return name_of(call) + ": replica " + std::to_string(src) + " is the source of two pairs";
      });
      require(call.pairs[k].second != dst, [&] {
        return name_of(call) + ": replica " + std::to_string(dst) +
               " is the destination of two pairs";
      });
    }
    layout = mix_hash(mix_hash(layout, static_cast<std::uint64_t>(src)),
                      static_cast<std::uint64_t>(dst));
  }
  d.layout = layout;
  finish(call, d);
}

// The root's output holds every replica's input in id order; the others' output is not
// used (it may be empty).
void describe_gather(const Call& call, int me, int n, Descriptor& d) {
  check_root(call, n);
  d.root = call.root;
  describe_input_output(call, d);
  if (me == call.root) check_gathered_output(call, me, n);
  finish(call, d);
}

void describe_nothing(const Call& call, int, int, Descriptor& d) { finish(call, d); }

std::size_t packed_bytes(const Descriptor& d) {
  std::size_t bytes = 0;
  for (const Buffer& b : d.call.buffers) bytes += packed_size(b);
  return bytes;
}
std::size_t input_bytes(const Descriptor& d) { return d.call.input.bytes(); }
std::size_t no_bytes(const Descriptor&) { return 0; }

bool always(const Descriptor&, int) { return true; }
bool never(const Descriptor&, int) { return false; }
bool at_root(const Descriptor& d, int me) { return d.root == me; }

// ---- one replica ---------------------------------------------------------------------------

// sum, min, max, prod and mean of one replica are the identity (16-bit floats too); a
// broadcast or barrier moves nothing.
void single_nothing(const Descriptor&, ReduceScratch&) {}

void single_reduce_scatter(const Descriptor& d, ReduceScratch& scratch) {
  const void* in = d.call.input.data;
  void* out = d.call.output.data;
  tree_reduce(d.op, d.dtype, &in, 1, &out, 1, d.count, 1, scratch);
}

void single_copy(const Descriptor& d, ReduceScratch&) {
  if (d.count > 0 && d.call.output.data != d.call.input.data) {
    std::memcpy(d.call.output.data, d.call.input.data, d.call.input.bytes());
  }
}

void single_permute(const Descriptor& d, ReduceScratch&) {
  if (d.count == 0) return;
  if (d.call.pairs.empty()) {
    std::memset(d.call.output.data, 0, d.call.output.bytes());
  } else {
    std::memcpy(d.call.output.data, d.call.input.data, d.call.input.bytes());
  }
}

constexpr OpTraits kAllReduceTraits{.name = "all_reduce", .shows_op = true};
constexpr OpTraits kReduceScatterTraits{.name = "reduce_scatter", .shows_op = true};
constexpr OpTraits kBroadcastTraits{.name = "broadcast", .shows_root = true};
constexpr OpTraits kGatherTraits{.name = "gather", .shows_root = true};

constexpr OpTraits kBarrierTraits{.name = "barrier", .shows_shape = false};
constexpr OpTraits kEndStepTraits{.name = "end of step", .phrase = "return from the step function"};

// ---- how benchmarks measure them (Measures) ------------------------------------------------
// Bus factors (nccl-tests): an all-reduce crosses the bus twice (a reduce-scatter, then an
// all-gather), a collective of blocks with all but one block, a broadcast or a permute with
// the whole buffer once. Traffic in one process, for S bytes among R replicas: all-reduce,
// all-gather, all-to-all and permute read and write every replica's S (2R·S); reduce-scatter
// reads every input and writes one block of each ((R+1)·S); broadcast reads the root's S for
// each of the R-1 others and writes theirs (2(R-1)·S); gather reads the R blocks and writes
// them into the root's output (2·S).

double twice_but_one(double r) { return 2 * (r - 1) / r; }
double all_but_one(double r) { return (r - 1) / r; }
double once(double) { return 1.0; }
double nothing(double) { return 0.0; }
double each_read_and_written(double r) { return 2 * r; }

constexpr Measures kAllReduceMeasures{
    .bus_factor = twice_but_one,
    .traffic = each_read_and_written,
    .blocked = false,
    .updates = true,
    .native_f32_sum = [](NativeCollectives& engine, float* data, std::size_t count) {
      engine.native_all_reduce_f32(data, count);
    }};
constexpr Measures kAllGatherMeasures{
    .bus_factor = all_but_one, .traffic = each_read_and_written, .blocked = true};
constexpr Measures kBroadcastMeasures{.bus_factor = once,
                                      .traffic = [](double r) { return 2 * (r - 1); }};
constexpr Measures kReduceScatterMeasures{
    .bus_factor = all_but_one, .traffic = [](double r) { return r + 1; }, .blocked = true};
constexpr Measures kAllToAllMeasures{
    .bus_factor = all_but_one, .traffic = each_read_and_written, .blocked = true};
constexpr Measures kPermuteMeasures{.bus_factor = once, .traffic = each_read_and_written};
constexpr Measures kGatherMeasures{
    .bus_factor = all_but_one, .traffic = [](double) { return 2.0; }, .blocked = true};
constexpr Measures kBarrierMeasures{.bus_factor = nothing, .traffic = nothing};

// One row per collective, in OpKind order: traits, describe, in place, path bytes, stages,
// in one process, across processes, one replica, measures.
// clang-format off
const CollectiveDef kTable[] = {
    {kAllReduceTraits, describe_all_reduce, true, packed_bytes, always,
     all_reduce, all_reduce_across, single_nothing, &kAllReduceMeasures},
    {{.name = "all_gather"}, describe_all_gather, false, input_bytes, always,
     all_gather, all_gather_across, single_copy, &kAllGatherMeasures},
    {kBroadcastTraits, describe_broadcast, true, packed_bytes, at_root,
     broadcast, broadcast_across, single_nothing, &kBroadcastMeasures},
    {kReduceScatterTraits, describe_reduce_scatter, false, input_bytes, always,
     reduce_scatter, reduce_scatter_across, single_reduce_scatter, &kReduceScatterMeasures},
    {{.name = "all_to_all"}, describe_all_to_all, false, input_bytes, always,
     all_to_all, all_to_all_across, single_copy, &kAllToAllMeasures},
    {{.name = "permute", .shows_pairs = true}, describe_permute, false, input_bytes, always,
     permute, permute_across, single_permute, &kPermuteMeasures},
    {kGatherTraits, describe_gather, false, input_bytes, always,
     gather, gather_across, single_copy, &kGatherMeasures},
    {kBarrierTraits, describe_nothing, false, no_bytes, never,
     nullptr, frames_only_across, single_nothing, &kBarrierMeasures},
    {kEndStepTraits, describe_nothing, false, no_bytes, never,
     nullptr, frames_only_across, single_nothing, nullptr},
};
// clang-format on
static_assert(std::size(kTable) == static_cast<std::size_t>(OpKind::kCount),
              "one table entry per OpKind, in order");

}  // namespace

const CollectiveDef& definition(std::uint8_t kind) {
  if (kind >= std::size(kTable)) {
    throw InvalidArgument("unknown collective kind " + std::to_string(kind));
  }
  return kTable[kind];
}

void stage(const CollectiveDef& def, const Descriptor& d, std::byte* staging) {
  if (def.in_place) {
    for (const Buffer& b : d.call.buffers) {
      if (b.count > 0) std::memcpy(staging, b.data, b.bytes());
      staging += packed_size(b);
    }
  } else if (d.call.input.count > 0) {
    std::memcpy(staging, d.call.input.data, d.call.input.bytes());
  }
}

std::pair<std::uint64_t, std::uint64_t> slice_of(std::uint64_t total, int r, int n) {
  const auto boundary = [&](int k) -> std::uint64_t {
    if (k >= n) return total;
    const auto un = static_cast<std::uint64_t>(n);
    const auto uk = static_cast<std::uint64_t>(k);
    const std::uint64_t exact = total / un * uk + total % un * uk / un;  // no overflow
    return exact & ~std::uint64_t{63};
  };
  return {boundary(r), boundary(r + 1)};
}

}  // namespace replicator::detail
