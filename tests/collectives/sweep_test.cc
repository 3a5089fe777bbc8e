// Parameterised sweep of every collective over replica counts {1, 2, 3, 4, 5, 7, 8, 16},
// sizes {0, 1, 1001, 70001} and every element type, with every reduce op for all_reduce and
// reduce_scatter. 70001 elements is larger than one slice and larger than the staged
// small-message path (used up to min(64 KiB, 256 KiB / R) bytes) for every dtype, u8
// included, so both the staged and the direct algorithms run; 1001 is staged for every
// dtype and R. The size is the buffer of all_reduce, broadcast and permute, and the whole
// array (R blocks) of reduce_scatter's input, all_to_all's input and output, and
// all_gather's output.
//
// Expected values are in closed form and exact in every element type: all inputs and all
// results are small integers (at most 256, which bf16's 8-bit significand still holds) or,
// for mean, halves of them; every partial sum of the canonical tree is such an integer too,
// so no accumulation order can round. Integer wrap-around is checked with modular products
// and sums, which do not depend on the order either.
//
// One Replicator per R and test; each (dtype, size) is one run in which every replica fills
// its inputs, issues all collectives, and checks its outputs, recording what went wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "replicator/replicator.h"

namespace replicator {
namespace {

constexpr std::size_t kSizes[] = {0, 1, 1001, 70001};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

// ---- element types ----------------------------------------------------------------------

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

template <typename T>
T make(double v) {
  if constexpr (kIsHalf<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double value(T x) {
  if constexpr (kIsHalf<T>) {
    return static_cast<float>(x);
  } else {
    return static_cast<double>(x);
  }
}

// Calls fn.template operator()<T>() for every element type.
template <typename Fn>
void for_each_dtype(Fn&& fn) {
  fn.template operator()<float>();
  fn.template operator()<double>();
  fn.template operator()<bfloat16>();
  fn.template operator()<float16>();
  fn.template operator()<std::int32_t>();
  fn.template operator()<std::int64_t>();
  fn.template operator()<std::uint8_t>();
}

// ---- closed forms -----------------------------------------------------------------------
// r is the replica id, k the element index, n the replica count.

// sum/mean input: (r + 1) + k % 7. Over r: n(n+1)/2 + n(k % 7) <= 136 + 96 = 232 for n <= 16.
double sum_input(int r, std::size_t k) { return (r + 1) + static_cast<double>(k % 7); }
double sum_expected(int n, std::size_t k) {
  const int triangle = n * (n + 1) / 2;  // exact: n(n+1) is even
  return triangle + n * static_cast<double>(k % 7);
}
// mean = (n + 1) / 2 + k % 7: a multiple of 1/2 below 16, exact in every float type.
// Integer mean truncates: (n(n+1)/2 + n(k%7)) / n = floor((n+1)/2) + k % 7.
template <typename T>
double mean_expected(int n, std::size_t k) {
  if constexpr (std::is_integral_v<T>) {
    const int half = (n + 1) / 2;  // truncated, as integer mean does
    return half + static_cast<double>(k % 7);
  } else {
    return (n + 1) / 2.0 + static_cast<double>(k % 7);
  }
}
// min/max input: (11r + k) % n + k % 3. As 11 is prime to every n in the sweep, r -> (11r + k)
// % n is a permutation of 0..n-1, so the min is k % 3 and the max n - 1 + k % 3, and the
// replica holding them changes with k.
double minmax_input(int n, int r, std::size_t k) {
  return static_cast<double>((11 * static_cast<std::size_t>(r) + k) % static_cast<std::size_t>(n) +
                             k % 3);
}
double min_expected(int, std::size_t k) { return static_cast<double>(k % 3); }
double max_expected(int n, std::size_t k) { return n - 1 + static_cast<double>(k % 3); }
// prod input: 2 where (r + k) % 4 == 0, else 1. The product is 2^c, c = #{r < n : r % 4 == t}
// with t = (4 - k % 4) % 4; c <= 4, so the product is at most 16.
double prod_input(int r, std::size_t k) { return (r + k) % 4 == 0 ? 2.0 : 1.0; }
double prod_expected(int n, std::size_t k) {
  const int t = static_cast<int>((4 - k % 4) % 4);
  const int c = t < n ? (n - 1 - t) / 4 + 1 : 0;
  return static_cast<double>(1 << c);
}

double input_for(ReduceOp op, int n, int r, std::size_t k) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return sum_input(r, k);
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return minmax_input(n, r, k);
    case ReduceOp::kProd:
      return prod_input(r, k);
  }
  return 0;
}

// Every input above is periodic in k, with this period.
std::size_t period_of(ReduceOp op, int n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return 7;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<std::size_t>(n % 3 == 0 ? n : 3 * n);
    case ReduceOp::kProd:
      return 4;
  }
  return 1;
}

// data[k] = value(k) for a `period`-periodic value: the first period is computed, the rest
// copied in doubling chunks (memcpy: cheap under ThreadSanitizer, which checks it as ranges).
template <typename T, typename Value>
void fill_periodic(std::span<T> data, std::size_t period, Value&& value) {
  const std::size_t first = std::min(period, data.size());
  for (std::size_t k = 0; k < first; ++k) data[k] = value(k);
  for (std::size_t done = first; done < data.size();) {
    const std::size_t chunk = std::min(done, data.size() - done);  // `done` is a multiple of period
    std::memcpy(data.data() + done, data.data(), chunk * sizeof(T));
    done += chunk;
  }
}

template <typename T>
double expected_for(ReduceOp op, int n, std::size_t k) {
  switch (op) {
    case ReduceOp::kSum:
      return sum_expected(n, k);
    case ReduceOp::kMean:
      return mean_expected<T>(n, k);
    case ReduceOp::kMin:
      return min_expected(n, k);
    case ReduceOp::kMax:
      return max_expected(n, k);
    case ReduceOp::kProd:
      return prod_expected(n, k);
  }
  return 0;
}

// Data-movement input: 1 + (37r + 5k) % 255, in [1, 255] (exact in bf16, never zero so a
// permute's zero fill is visible), different for different r at the same k (37 is odd).
double tag(int r, std::size_t k) {
  return 1 + static_cast<double>((37 * static_cast<std::size_t>(r) + 5 * k) % 255);
}
// all_to_all input of replica r, block j, offset i: 1 + (16r + j + i) % 255, unique per
// (r, j) at the same i for r, j < 16.
double a2a_tag(int r, int j, std::size_t i) {
  return 1 + static_cast<double>(
                 (16 * static_cast<std::size_t>(r) + static_cast<std::size_t>(j) + i) % 255);
}

// Wrap-around inputs for integer types: sums of values near the top of the range and
// products of odd numbers overflow; the expected value is the same sum or product done in
// the unsigned type of the same width, whose arithmetic is modulo 2^bits by definition.
template <typename T>
T wrap_sum_input(int r, std::size_t k) {
  using U = std::make_unsigned_t<T>;
  const U top = static_cast<U>(static_cast<U>(~U{0}) / 4 * 3);  // 3/4 of the range
  return static_cast<T>(static_cast<U>(top + static_cast<U>(r) + static_cast<U>(k % 5)));
}
// Odd factors (so the product never becomes 0): 2(r + k % 4) + 1, plus 2^16 for the wide
// types, whose products then exceed 2^32 from two replicas and 2^64 from four.
template <typename T>
T wrap_prod_input(int r, std::size_t k) {
  using U = std::make_unsigned_t<T>;
  const U wide = sizeof(T) >= 4 ? static_cast<U>(0x10000u) : U{0};
  return static_cast<T>(static_cast<U>(2 * (static_cast<U>(r) + static_cast<U>(k % 4)) + 1 + wide));
}
template <typename T>
T wrap_expected(ReduceOp op, int n, std::size_t k) {
  using U = std::make_unsigned_t<T>;
  U acc = op == ReduceOp::kSum ? U{0} : U{1};
  for (int r = 0; r < n; ++r) {
    if (op == ReduceOp::kSum) {
      acc = static_cast<U>(acc + static_cast<U>(wrap_sum_input<T>(r, k)));
    } else {
      acc = static_cast<U>(acc * static_cast<U>(wrap_prod_input<T>(r, k)));
    }
  }
  return static_cast<T>(acc);
}

// ---- checking ---------------------------------------------------------------------------

// Appends to `errors` a line if any got[i] differs from want(i): compared as T when want
// returns a T (integers of any width), else as exact doubles (every value here is exact).
template <typename T, typename Want>
void check(std::string& errors, const std::string& what, std::span<const T> got, Want&& want) {
  constexpr bool kSameType = std::is_same_v<std::invoke_result_t<Want&, std::size_t>, T>;
  const auto equal = [&](std::size_t i) {
    if constexpr (kSameType) {
      return got[i] == want(i);
    } else {
      return value(got[i]) == want(i);
    }
  };
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!equal(i) && bad++ == 0) first = i;
  }
  if (bad > 0) {
    errors += what + ": " + std::to_string(bad) + " of " + std::to_string(got.size()) +
              " elements wrong, first at " + std::to_string(first) + ": got " +
              std::to_string(value(got[first])) + ", want " + std::to_string(value(want(first))) +
              "\n";
  }
}

// Appends to `errors` a line if `got` is not bitwise equal to `want` (one memcmp, which
// ThreadSanitizer checks as one range access; every expected value here is exact, never -0
// or NaN, so bitwise equality is value equality).
template <typename T>
void check_equal(std::string& errors, const std::string& what, std::span<const T> got,
                 std::span<const T> want) {
  if (got.size() == want.size() &&
      (got.empty() || std::memcmp(got.data(), want.data(), got.size_bytes()) == 0)) {
    return;
  }
  if (got.size() != want.size()) {
    errors += what + ": " + std::to_string(got.size()) + " elements, want " +
              std::to_string(want.size()) + "\n";
    return;
  }
  check<T>(errors, what, got, [&](std::size_t i) { return value(want[i]); });
}

// table[k] = make<T>(f(k)) for k < count: an expected result, computed once per case on
// the test thread and compared by every replica.
template <typename T, typename F>
std::vector<T> table(std::size_t count, F&& f) {
  std::vector<T> t(count);
  for (std::size_t k = 0; k < count; ++k) t[k] = make<T>(f(k));
  return t;
}

template <typename T>
std::string dtype_name() {
  return std::string(to_string(dtype_of<T>()));
}

Config with_replicas(int n) {
  Config config;
  config.local_replicas = n;
  return config;
}

// Runs `body(ctx, errors_of_this_replica)` on every replica and fails the test with
// everything any replica recorded.
template <typename Body>
void run_and_check(Replicator& repl, const std::string& label, Body&& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(repl.num_replicas()));
  repl.run(
      [&](ReplicaContext& ctx) { body(ctx, errors[static_cast<std::size_t>(ctx.replica_id())]); });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    EXPECT_TRUE(errors[r].empty()) << label << ", replica " << r << ":\n" << errors[r];
  }
}

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// The largest collective (in bytes of one replica's input) that takes the staged path, as
// documented by the local engine: min(64 KiB, 256 KiB / R).
std::size_t staged_limit(int n) {
  return std::min<std::size_t>(std::size_t{64} * 1024,
                               std::size_t{256} * 1024 / static_cast<std::size_t>(n));
}

class SweepTest : public ::testing::TestWithParam<int> {};

// ---- all_reduce and reduce_scatter, every op --------------------------------------------

TEST_P(SweepTest, AllReduceAndReduceScatterEveryOp) {
  const int n = GetParam();
  const auto un = static_cast<std::size_t>(n);
  Replicator repl(with_replicas(n));
  for_each_dtype([&]<typename T>() {
    for (const std::size_t size : kSizes) {
      const std::string label =
          "R=" + std::to_string(n) + " " + dtype_name<T>() + " x " + std::to_string(size);
      // reduce_scatter: n blocks of `block`; replica r receives block r of the result.
      const std::size_t block = ceil_div(size, un);
      // Expected results (the same on every replica), per op.
      std::vector<std::vector<T>> reduced, scattered;
      for (const ReduceOp op : kOps) {
        const auto want = [&](std::size_t k) { return expected_for<T>(op, n, k); };
        reduced.push_back(table<T>(size, want));
        scattered.push_back(table<T>(block * un, want));
      }
      std::vector<std::vector<T>> wrapped;  // integer types: wrapping sum, then product
      if constexpr (std::is_integral_v<T>) {
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
          std::vector<T>& w = wrapped.emplace_back(size);
          for (std::size_t k = 0; k < size; ++k) w[k] = wrap_expected<T>(op, n, k);
        }
      }
      run_and_check(repl, label, [&](ReplicaContext& ctx, std::string& errors) {
        const int r = ctx.replica_id();
        // all_reduce: in place, every op.
        std::vector<T> data(size);
        for (std::size_t o = 0; o < std::size(kOps); ++o) {
          const ReduceOp op = kOps[o];
          fill_periodic<T>(data, period_of(op, n),
                           [&](std::size_t k) { return make<T>(input_for(op, n, r, k)); });
          ctx.all_reduce(data, {.op = op});
          check_equal<T>(errors, "all_reduce " + std::string(to_string(op)), data, reduced[o]);
        }
        std::vector<T> input(block * un);
        std::vector<T> output(block);
        for (std::size_t o = 0; o < std::size(kOps); ++o) {
          const ReduceOp op = kOps[o];
          fill_periodic<T>(input, period_of(op, n),
                           [&](std::size_t k) { return make<T>(input_for(op, n, r, k)); });
          std::fill(output.begin(), output.end(), make<T>(99));
          ctx.reduce_scatter(input, output, {.op = op});
          check_equal<T>(
              errors, "reduce_scatter " + std::string(to_string(op)), output,
              std::span<const T>(scattered[o]).subspan(static_cast<std::size_t>(r) * block, block));
        }
        // Integer sums and products wrap modulo 2^bits.
        if constexpr (std::is_integral_v<T>) {
          for (std::size_t w = 0; w < 2; ++w) {
            const ReduceOp op = w == 0 ? ReduceOp::kSum : ReduceOp::kProd;
            fill_periodic<T>(data, 20, [&](std::size_t k) {  // periods 5 and 4
              return op == ReduceOp::kSum ? wrap_sum_input<T>(r, k) : wrap_prod_input<T>(r, k);
            });
            ctx.all_reduce(data, {.op = op});
            check_equal<T>(errors, "wrapping all_reduce " + std::string(to_string(op)), data,
                           wrapped[w]);
          }
        }
      });
    }
  });
}

// ---- data movement: all_gather, broadcast, all_to_all, permute, barrier ------------------

// gather to each of `roots`: the root's output is every replica's input in id order (`own`,
// this replica's block of `gathered`); the others pass an empty output. Then in place at the
// last root.
template <typename T>
void check_gather(ReplicaContext& ctx, std::string& errors, const std::vector<int>& roots,
                  std::span<const T> own, const std::vector<T>& gathered) {
  const int r = ctx.replica_id();
  const std::vector<T> contributed(own.begin(), own.end());
  for (const int root : roots) {
    std::vector<T> at_root(r == root ? gathered.size() : 0, make<T>(7));
    ctx.gather(contributed, at_root, {.root = root});
    if (r == root) {
      check_equal<T>(errors, "gather root " + std::to_string(root), at_root, gathered);
    }
  }
  const int root = roots.back();
  std::vector<T> in_place(gathered.size(), T{});
  const auto offset = own.data() - gathered.data();
  std::copy(own.begin(), own.end(), in_place.begin() + offset);
  const auto block =
      std::span<const T>(in_place).subspan(static_cast<std::size_t>(offset), own.size());
  ctx.gather(block, r == root ? std::span<T>(in_place) : std::span<T>(), {.root = root});
  if (r == root) check_equal<T>(errors, "gather in place", in_place, gathered);
}

TEST_P(SweepTest, DataMovementEveryDType) {
  const int n = GetParam();
  const auto un = static_cast<std::size_t>(n);
  Replicator repl(with_replicas(n));
  std::vector<int> roots = {0, n / 2, n - 1};
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  // A ring shift r -> r + 1, and a partial permutation (even r -> r + 1) that leaves the
  // other replicas with zeros.
  std::vector<PermutePair> ring, partial;
  for (int r = 0; r < n; ++r) {
    ring.push_back({r, (r + 1) % n});
    if (r % 2 == 0) partial.push_back({r, (r + 1) % n});
  }
  const auto source_of = [](const std::vector<PermutePair>& pairs, int dst) {
    for (const auto& [s, d] : pairs) {
      if (d == dst) return s;
    }
    return -1;
  };

  for_each_dtype([&]<typename T>() {
    for (const std::size_t size : kSizes) {
      const std::string label =
          "R=" + std::to_string(n) + " " + dtype_name<T>() + " x " + std::to_string(size);
      // tags[j * size + k] = tag(j, k): block j is replica j's data, which broadcast and
      // permute must deliver.
      const std::vector<T> tags = table<T>(size * un, [size](std::size_t k) {
        return tag(static_cast<int>(k / size), k % size);  // not called when size == 0
      });
      const auto block_of = [&](int j) {
        return std::span<const T>(tags).subspan(static_cast<std::size_t>(j) * size, size);
      };
      const std::vector<T> zeros(size);  // T{} is 0 in every element type
      // all_gather, like reduce_scatter and all_to_all, takes `size` as the whole array (the
      // output; nccl-tests' convention): each replica contributes ceil(size / R) elements,
      // but when the whole array is above the staged limit, so is each contribution (so
      // that the direct path runs for every dtype).
      const bool direct = size * sizeof(T) > staged_limit(n);
      const std::size_t contribution =
          direct ? std::max(ceil_div(size, un), staged_limit(n) / sizeof(T) + 1)
                 : ceil_div(size, un);
      const std::vector<T> gathered = table<T>(contribution * un, [contribution](std::size_t k) {
        return tag(static_cast<int>(k / contribution), k % contribution);
      });
      run_and_check(repl, label, [&](ReplicaContext& ctx, std::string& errors) {
        const int r = ctx.replica_id();
        const std::vector<T> mine(block_of(r).begin(), block_of(r).end());

        // all_gather: block j of the output is replica j's input.
        const auto own = std::span<const T>(gathered).subspan(
            static_cast<std::size_t>(r) * contribution, contribution);
        const std::vector<T> contributed(own.begin(), own.end());
        std::vector<T> out(contribution * un);
        ctx.all_gather(contributed, out);
        check_equal<T>(errors, "all_gather", out, gathered);

        // all_gather in place: the input is this replica's block of the output.
        std::fill(out.begin(), out.end(), T{});
        std::copy(own.begin(), own.end(), out.begin() + (own.data() - gathered.data()));
        ctx.all_gather(std::span<const T>(out).subspan(static_cast<std::size_t>(r) * contribution,
                                                       contribution),
                       out);
        check_equal<T>(errors, "all_gather in place", out, gathered);

        check_gather<T>(ctx, errors, roots, own, gathered);

        // broadcast from several roots: everyone ends with the root's data.
        for (const int root : roots) {
          std::vector<T> data = mine;
          ctx.broadcast(data, {.root = root});
          check_equal<T>(errors, "broadcast root " + std::to_string(root), data, block_of(root));
        }

        // all_to_all: block j of replica r's output is block r of replica j's input.
        const std::size_t block = ceil_div(size, un);
        std::vector<T> a2a_in(block * un), a2a_out(block * un);
        for (int j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < block; ++i) {
            a2a_in[static_cast<std::size_t>(j) * block + i] = make<T>(a2a_tag(r, j, i));
          }
        }
        ctx.all_to_all(a2a_in, a2a_out);
        check<T>(errors, "all_to_all", a2a_out,
                 [&](std::size_t k) { return a2a_tag(static_cast<int>(k / block), r, k % block); });

        // permute: the destination receives the source's input; others get zeros.
        for (const auto* pairs : {&ring, &partial}) {
          std::vector<T> moved(size, make<T>(7));
          ctx.permute(mine, moved, *pairs);
          const int src = source_of(*pairs, r);
          check_equal<T>(errors, pairs == &ring ? "permute ring" : "permute partial", moved,
                         src < 0 ? std::span<const T>(zeros) : block_of(src));
        }
        std::vector<T> none(size, make<T>(7));
        ctx.permute(mine, none, {});
        check_equal<T>(errors, "permute without pairs", none, zeros);

        ctx.barrier();
        // Inputs are left untouched by every collective that has a separate output.
        check_equal<T>(errors, "input after the collectives", mine, block_of(r));
      });
    }
  });
}

// ---- fused all_reduce and broadcast: several buffers of different dtypes and sizes -------

// v[k] = f(n, r, k).
template <typename T>
void fill(std::vector<T>& v, double (*f)(int, int, std::size_t), int n, int r) {
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = make<T>(f(n, r, k));
}

TEST_P(SweepTest, FusedAllReduceAndBroadcast) {
  const int n = GetParam();
  Replicator repl(with_replicas(n));
  for (const std::size_t size : kSizes) {
    const std::string label = "R=" + std::to_string(n) + " fused, size " + std::to_string(size);
    run_and_check(repl, label, [&](ReplicaContext& ctx, std::string& errors) {
      const int r = ctx.replica_id();
      std::vector<float> a(size);
      std::vector<std::uint8_t> b(size / 3 + 1);
      std::vector<double> c(17);
      std::vector<bfloat16> d(size / 2);
      std::vector<std::int64_t> e;  // empty, in the middle of the list
      std::vector<float16> f(size + 5);
      std::vector<std::int32_t> g(size);
      const Buffer buffers[] = {Buffer::of(std::span(a)), Buffer::of(std::span(b)),
                                Buffer::of(std::span(c)), Buffer::of(std::span(d)),
                                Buffer::of(std::span(e)), Buffer::of(std::span(f)),
                                Buffer::of(std::span(g))};
      const auto fill_all = [&](double (*input)(int, int, std::size_t)) {
        fill(a, input, n, r);
        fill(b, input, n, r);
        fill(c, input, n, r);
        fill(d, input, n, r);
        fill(f, input, n, r);
        fill(g, input, n, r);
      };
      const auto check_all = [&](const std::string& what, auto want) {
        check<float>(errors, what + " f32", a, want);
        check<std::uint8_t>(errors, what + " u8", b, want);
        check<double>(errors, what + " f64", c, want);
        check<bfloat16>(errors, what + " bf16", d, want);
        check<float16>(errors, what + " f16", f, want);
        check<std::int32_t>(errors, what + " i32", g, want);
      };

      fill_all([](int, int replica, std::size_t k) { return sum_input(replica, k); });
      ctx.all_reduce(buffers, {.op = ReduceOp::kSum});
      check_all("fused all_reduce sum", [&](std::size_t k) { return sum_expected(n, k); });

      fill_all([](int m, int replica, std::size_t k) { return minmax_input(m, replica, k); });
      ctx.all_reduce(buffers, {.op = ReduceOp::kMax});
      check_all("fused all_reduce max", [&](std::size_t k) { return max_expected(n, k); });

      for (const int root : {n - 1, 0}) {
        fill_all([](int, int replica, std::size_t k) { return tag(replica, k); });
        ctx.broadcast(buffers, {.root = root});
        check_all("fused broadcast root " + std::to_string(root),
                  [&](std::size_t k) { return tag(root, k); });
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(ReplicaCounts, SweepTest, ::testing::Values(1, 2, 3, 4, 5, 7, 8, 16),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "R" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace replicator
