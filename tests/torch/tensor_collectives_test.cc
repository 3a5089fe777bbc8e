// Tests of the tensor collectives (replicator/torch/tensor_collectives.h) on R = 1..4
// local replicas: every supported dtype and reduce op against closed-form values,
// non-contiguous tensors written through their own strides, fused lists of mixed dtypes,
// zero-element tensors, data movement (broadcast, all_gather, reduce_scatter,
// all_to_all), the errors (shape and dtype mismatches across replicas, unsupported
// dtypes, bad row counts) and broadcast_parameters.
//
// Replica r holds x_r[i] = i % 7 + (i + r) % R at flat index i, so that
//   sum = R·(i % 7) + R(R−1)/2,   max = i % 7 + R − 1,   min = i % 7,
//   mean = i % 7 + (R−1)/2 (integer dtypes: the sum divided by R, truncated),
// and which replica holds the maximum changes from element to element.
// Results are returned from the step and checked on the test thread.
#include "replicator/torch/tensor_collectives.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "replicator/device.h"
#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/cpu_kernels.h"

namespace {

namespace rt = replicator::torch;

// Expects `call` to throw replicator::InvalidArgument whose message holds `text`.
void expect_invalid(const std::function<void()>& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no InvalidArgument; expected one saying \"" << text << "\"";
  } catch (const replicator::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}
using replicator::Config;
using replicator::DType;
using replicator::ReduceOp;
using replicator::ReplicaContext;
using replicator::Replicator;

// "Type: message" of what `fn` throws, or "nothing".
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const replicator::CollectiveMismatch& e) {
    return std::string("CollectiveMismatch: ") + e.what();
  } catch (const replicator::InvalidArgument& e) {
    return std::string("InvalidArgument: ") + e.what();
  } catch (const replicator::Aborted& e) {
    return std::string("Aborted: ") + e.what();
  } catch (const replicator::Error& e) {
    return std::string("replicator::Error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("std::exception: ") + e.what();
  }
  return "nothing";
}

std::string type_of(const std::string& error) { return error.substr(0, error.find(':')); }

// Flat index i of every element of a tensor of `shape` (int64).
torch::Tensor flat_index(torch::IntArrayRef shape) {
  std::int64_t numel = 1;
  for (const std::int64_t d : shape) numel *= d;
  return torch::arange(numel, torch::kLong).view(shape);
}

// x_r (see the file comment), int64.
torch::Tensor replica_values(int r, int replicas, torch::IntArrayRef shape) {
  const torch::Tensor i = flat_index(shape);
  return i.remainder(7) + (i + r).remainder(replicas);
}

// The closed-form result of reducing x_0..x_{R-1} with `op`, as float64.
torch::Tensor expected_reduction(ReduceOp op, int replicas, torch::IntArrayRef shape,
                                 bool integral) {
  const torch::Tensor a = flat_index(shape).remainder(7);
  const std::int64_t r = replicas;
  switch (op) {
    case ReduceOp::kSum:
      return (a * r + r * (r - 1) / 2).to(torch::kFloat64);
    case ReduceOp::kMax:
      return (a + (r - 1)).to(torch::kFloat64);
    case ReduceOp::kMin:
      return a.to(torch::kFloat64);
    case ReduceOp::kMean:
      if (integral) return (a + (r - 1) / 2).to(torch::kFloat64);
      return a.to(torch::kFloat64) + static_cast<double>(r - 1) / 2;
    default:
      break;
  }
  ADD_FAILURE() << "no closed form for this op";
  return {};
}

// Exact comparison after widening to float64 (every value here is exact in every dtype).
::testing::AssertionResult same_values(const torch::Tensor& actual, const torch::Tensor& expected) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << ", expected " << expected.sizes();
  }
  if (!torch::equal(actual.to(torch::kFloat64), expected.to(torch::kFloat64))) {
    return ::testing::AssertionFailure() << "got\n" << actual << "\nexpected\n" << expected;
  }
  return ::testing::AssertionSuccess();
}

const std::vector<torch::ScalarType> kDTypes = {torch::kFloat32, torch::kFloat64, torch::kBFloat16,
                                                torch::kFloat16, torch::kInt32,   torch::kInt64,
                                                torch::kUInt8};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax,
                                    ReduceOp::kMin};

class TensorCollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  int replicas() const { return GetParam(); }
  Config config() const {
    Config c;
    c.local_replicas = replicas();
    return c;
  }
};

TEST_P(TensorCollectivesTest, AllReduceEveryDTypeAndOp) {
  const int n = replicas();
  Replicator repl(config());
  const std::vector<std::vector<std::int64_t>> shapes = {{3, 5}, {4099}};
  // Per replica: the results in the order dtype × op × shape.
  const auto results = repl.run([&](ReplicaContext& ctx) {
    std::vector<torch::Tensor> out;
    for (const torch::ScalarType type : kDTypes) {
      for (const ReduceOp op : kOps) {
        for (const auto& shape : shapes) {
          torch::Tensor t = replica_values(ctx.replica_id(), n, shape).to(type);
          rt::all_reduce(ctx, t, {.op = op});
          out.push_back(t);
        }
      }
    }
    return out;
  });
  for (int r = 0; r < n; ++r) {
    std::size_t k = 0;
    for (const torch::ScalarType type : kDTypes) {
      for (const ReduceOp op : kOps) {
        for (const auto& shape : shapes) {
          SCOPED_TRACE(::testing::Message()
                       << "replica " << r << ", dtype " << type << ", op "
                       << replicator::to_string(op) << ", shape " << torch::IntArrayRef(shape));
          const torch::Tensor& t = results[r][k++];
          EXPECT_EQ(t.scalar_type(), type);
          EXPECT_TRUE(
              same_values(t, expected_reduction(op, n, shape, !torch::isFloatingType(type))));
        }
      }
    }
  }
}

// A transposed tensor and a strided slice are reduced in place through their own strides:
// the tensor and its base see the result, and the elements between the slice's stay.
TEST_P(TensorCollectivesTest, AllReduceNonContiguousInPlace) {
  const int n = replicas();
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    const torch::Tensor base = torch::zeros({4, 6});
    const torch::Tensor transposed = base.t();  // [6, 4], strides (1, 6)
    transposed.copy_(replica_values(r, n, {6, 4}));
    rt::all_reduce(ctx, transposed);

    const torch::Tensor line = torch::full({12}, -1.0, torch::kFloat64);
    const torch::Tensor even = line.slice(0, 0, 12, 2);  // stride 2
    even.copy_(replica_values(r, n, {6}));
    rt::all_reduce(ctx, even, {.op = ReduceOp::kMax});

    // A non-contiguous 16-bit tensor with mean.
    const torch::Tensor half_base = torch::zeros({5, 3}, torch::kBFloat16);
    const torch::Tensor half = half_base.t();
    half.copy_(replica_values(r, n, {3, 5}));
    rt::all_reduce(ctx, half, {.op = ReduceOp::kMean});
    return std::vector<torch::Tensor>{base, transposed, line, even, half_base, half};
  });
  const torch::Tensor sum = expected_reduction(ReduceOp::kSum, n, {6, 4}, false);
  const torch::Tensor max = expected_reduction(ReduceOp::kMax, n, {6}, false);
  const torch::Tensor mean = expected_reduction(ReduceOp::kMean, n, {3, 5}, false);
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    const std::vector<torch::Tensor>& t = results[r];
    EXPECT_FALSE(t[1].is_contiguous());
    EXPECT_FALSE(t[3].is_contiguous());
    EXPECT_TRUE(same_values(t[1], sum));
    EXPECT_TRUE(same_values(t[0], sum.t()));  // written through the view
    EXPECT_TRUE(same_values(t[3], max));
    EXPECT_TRUE(same_values(t[2].slice(0, 1, 12, 2), torch::full({6}, -1.0)))
        << "the elements between the slice's were overwritten";
    EXPECT_TRUE(same_values(t[5], mean));
    EXPECT_TRUE(same_values(t[4], mean.t()));
  }
}

TEST_P(TensorCollectivesTest, FusedAllReduceMixedDTypes) {
  const int n = replicas();
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    const torch::Tensor transposed_base = torch::zeros({2, 3}, torch::kBFloat16);
    std::vector<torch::Tensor> list = {
        replica_values(r, n, {2, 3}).to(torch::kFloat32),
        replica_values(r, n, {4}).to(torch::kInt64),
        transposed_base.t(),  // [3, 2], non-contiguous
        replica_values(r, n, {5}).to(torch::kUInt8),
        torch::zeros({0}, torch::kFloat64),
        replica_values(r, n, {7}).to(torch::kFloat16),
        replica_values(r, n, {3}).to(torch::kInt32),
    };
    list[2].copy_(replica_values(r, n, {3, 2}));
    rt::all_reduce(ctx, list);
    return list;
  });
  const std::vector<std::vector<std::int64_t>> shapes = {{2, 3}, {4}, {3, 2}, {5}, {0}, {7}, {3}};
  const std::vector<torch::ScalarType> types = {torch::kFloat32, torch::kInt64,   torch::kBFloat16,
                                                torch::kUInt8,   torch::kFloat64, torch::kFloat16,
                                                torch::kInt32};
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(results[r].size(), shapes.size());
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "replica " << r << ", tensor " << k);
      EXPECT_EQ(results[r][k].scalar_type(), types[k]);
      EXPECT_TRUE(
          same_values(results[r][k], expected_reduction(ReduceOp::kSum, n, shapes[k], false)));
    }
  }
}

TEST_P(TensorCollectivesTest, ZeroElementTensors) {
  const int n = replicas();
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const torch::Tensor empty = torch::zeros({0, 3});
    rt::all_reduce(ctx, empty, {.op = ReduceOp::kMean});
    rt::broadcast(ctx, empty, {.root = n - 1});
    const torch::Tensor gathered = rt::all_gather(ctx, empty);
    const torch::Tensor scattered = rt::reduce_scatter(ctx, torch::zeros({0, 3}));
    const torch::Tensor exchanged = rt::all_to_all(ctx, torch::zeros({0, 2}, torch::kInt64));
    return std::vector<torch::Tensor>{empty, gathered, scattered, exchanged};
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r][0].sizes(), torch::IntArrayRef({0, 3}));
    EXPECT_EQ(results[r][1].sizes(), torch::IntArrayRef({n, 0, 3}));
    EXPECT_EQ(results[r][2].sizes(), torch::IntArrayRef({0, 3}));
    EXPECT_EQ(results[r][3].sizes(), torch::IntArrayRef({0, 2}));
  }
}

TEST_P(TensorCollectivesTest, BroadcastFromRootOne) {
  const int n = replicas();
  const int root = n > 1 ? 1 : 0;
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    const torch::Tensor single = torch::arange(6, torch::kFloat32).view({2, 3}) + 100 * r;
    rt::broadcast(ctx, single, {.root = root});
    // Fused, with a non-contiguous int64 tensor and a float16 one.
    const torch::Tensor base = torch::zeros({3, 2}, torch::kInt64);
    const torch::Tensor transposed = base.t();
    transposed.copy_(torch::arange(6).view({2, 3}) + 10 * r);
    const torch::Tensor half = torch::full({4}, r + 0.5, torch::kFloat16);
    rt::broadcast(ctx, std::vector<torch::Tensor>{transposed, half}, {.root = root});
    return std::vector<torch::Tensor>{single, base, transposed, half};
  });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    EXPECT_TRUE(same_values(results[r][0], torch::arange(6).view({2, 3}) + 100 * root));
    EXPECT_TRUE(same_values(results[r][2], torch::arange(6).view({2, 3}) + 10 * root));
    EXPECT_TRUE(same_values(results[r][1], (torch::arange(6).view({2, 3}) + 10 * root).t()));
    EXPECT_TRUE(same_values(results[r][3], torch::full({4}, root + 0.5)));
  }
}

TEST_P(TensorCollectivesTest, AllGatherStacksReplicasInOrder) {
  const int n = replicas();
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    const torch::Tensor floats = replica_values(r, n, {2, 3}).to(torch::kFloat32) + 100 * r;
    // A non-contiguous int64 input: the transpose of a [3, 2] tensor.
    const torch::Tensor ints = (replica_values(r, n, {3, 2}) + 1000 * r).t();
    return std::vector<torch::Tensor>{rt::all_gather(ctx, floats), rt::all_gather(ctx, ints)};
  });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    const torch::Tensor& floats = results[r][0];
    const torch::Tensor& ints = results[r][1];
    ASSERT_EQ(floats.sizes(), torch::IntArrayRef({n, 2, 3}));
    ASSERT_EQ(ints.sizes(), torch::IntArrayRef({n, 2, 3}));
    EXPECT_EQ(floats.scalar_type(), torch::kFloat32);
    EXPECT_EQ(ints.scalar_type(), torch::kInt64);
    for (int j = 0; j < n; ++j) {
      EXPECT_TRUE(same_values(floats[j], replica_values(j, n, {2, 3}) + 100 * j)) << "row " << j;
      EXPECT_TRUE(same_values(ints[j], (replica_values(j, n, {3, 2}) + 1000 * j).t()))
          << "row " << j;
    }
  }
}

// Replica r's input for reduce_scatter / all_to_all: [2R, 3], x[i, k] = 100·r + 3·i + k.
torch::Tensor rows_of(int r, int replicas) {
  return torch::arange(6 * replicas, torch::kFloat32).view({2 * replicas, 3}) + 100 * r;
}

TEST_P(TensorCollectivesTest, ReduceScatterOnDimZero) {
  const int n = replicas();
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const torch::Tensor input = rows_of(ctx.replica_id(), n);
    return std::vector<torch::Tensor>{rt::reduce_scatter(ctx, input),
                                      rt::reduce_scatter(ctx, input, {.op = ReduceOp::kMax})};
  });
  torch::Tensor sum = torch::zeros({2 * n, 3}, torch::kFloat64);
  for (int j = 0; j < n; ++j) sum += rows_of(j, n);
  const torch::Tensor max = rows_of(n - 1, n);
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    EXPECT_TRUE(same_values(results[r][0], sum.slice(0, 2 * r, 2 * r + 2)));
    EXPECT_TRUE(same_values(results[r][1], max.slice(0, 2 * r, 2 * r + 2)));
  }
}

TEST_P(TensorCollectivesTest, AllToAllOnDimZero) {
  const int n = replicas();
  Replicator repl(config());
  const auto results = repl.run([&](ReplicaContext& ctx) {
    return rt::all_to_all(ctx, rows_of(ctx.replica_id(), n).to(torch::kInt32));
  });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    ASSERT_EQ(results[r].sizes(), torch::IntArrayRef({2 * n, 3}));
    EXPECT_EQ(results[r].scalar_type(), torch::kInt32);
    for (int j = 0; j < n; ++j) {
      // Block j of replica r's output is block r of replica j's input.
      EXPECT_TRUE(same_values(results[r].slice(0, 2 * j, 2 * j + 2),
                              rows_of(j, n).slice(0, 2 * r, 2 * r + 2)))
          << "block " << j;
    }
  }
}

TEST_P(TensorCollectivesTest, RowsNotMultipleOfReplicasIsInvalidArgument) {
  const int n = replicas();
  Replicator repl(config());
  // With one replica every row count is a multiple; a 0-d tensor has no dim 0.
  const torch::Tensor bad = n > 1 ? torch::zeros({2 * n + 1, 3}) : torch::zeros({});
  const auto errors = repl.run([&](ReplicaContext& ctx) {
    return std::vector<std::string>{error_of([&] { rt::reduce_scatter(ctx, bad); }),
                                    error_of([&] { rt::all_to_all(ctx, bad); })};
  });
  for (int r = 0; r < n; ++r) {
    for (const std::string& e : errors[r]) {
      EXPECT_EQ(type_of(e), "InvalidArgument") << "replica " << r << ": " << e;
    }
  }
}

// Replica 0 passes [2, 3], replica 1 [3, 2] (same element count): every replica raises
// CollectiveMismatch; then the Replicator still works.
TEST_P(TensorCollectivesTest, ShapeAndDTypeMismatchOnEveryReplica) {
  const int n = replicas();
  if (n < 2) GTEST_SKIP() << "needs two replicas";
  Replicator repl(config());
  struct Case {
    const char* name;
    std::function<void(ReplicaContext&)> call;
  };
  const auto shape = [](const ReplicaContext& ctx) {
    return ctx.replica_id() == 1 ? std::vector<std::int64_t>{3, 2}
                                 : std::vector<std::int64_t>{2, 3};
  };
  const std::vector<Case> cases = {
      {"all_reduce", [&](ReplicaContext& ctx) { rt::all_reduce(ctx, torch::zeros(shape(ctx))); }},
      {"all_reduce fused",
       [&](ReplicaContext& ctx) {
         rt::all_reduce(ctx,
                        std::vector<torch::Tensor>{torch::zeros({4}), torch::zeros(shape(ctx))});
       }},
      {"all_reduce rank",
       [&](ReplicaContext& ctx) {
         rt::all_reduce(ctx, ctx.replica_id() == 1 ? torch::zeros({6}) : torch::zeros({2, 3}));
       }},
      {"broadcast", [&](ReplicaContext& ctx) { rt::broadcast(ctx, torch::zeros(shape(ctx))); }},
      {"all_gather", [&](ReplicaContext& ctx) { rt::all_gather(ctx, torch::zeros(shape(ctx))); }},
      {"all_reduce dtype",
       [&](ReplicaContext& ctx) {
         rt::all_reduce(
             ctx, torch::zeros({2, 3}, ctx.replica_id() == 1 ? torch::kFloat64 : torch::kFloat32));
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto errors =
        repl.run([&](ReplicaContext& ctx) { return error_of([&] { c.call(ctx); }); });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(type_of(errors[r]), "CollectiveMismatch") << "replica " << r << ": " << errors[r];
    }
    const auto healthy = repl.run([&](ReplicaContext& ctx) {
      torch::Tensor t = torch::ones({2, 3});
      rt::all_reduce(ctx, t);
      return t;
    });
    for (int r = 0; r < n; ++r) EXPECT_TRUE(same_values(healthy[r], torch::full({2, 3}, n)));
  }
}

TEST_P(TensorCollectivesTest, UnsupportedDTypeIsInvalidArgument) {
  const int n = replicas();
  Replicator repl(config());
  const auto errors = repl.run([&](ReplicaContext& ctx) {
    return std::vector<std::string>{
        error_of([&] { rt::all_reduce(ctx, torch::zeros({3}, torch::kBool)); }),
        error_of([&] { rt::all_reduce(ctx, torch::zeros({3}, torch::kComplexFloat)); }),
        error_of([&] { rt::all_reduce(ctx, torch::zeros({3}, torch::kInt8)); }),
        error_of([&] {
          rt::all_reduce(
              ctx, std::vector<torch::Tensor>{torch::zeros({3}), torch::zeros({3}, torch::kBool)});
        }),
        error_of([&] { rt::broadcast(ctx, torch::zeros({3}, torch::kComplexDouble)); }),
        error_of([&] { rt::all_gather(ctx, torch::zeros({3}, torch::kBool)); }),
        error_of([&] { rt::reduce_scatter(ctx, torch::zeros({n}, torch::kBool)); }),
        error_of([&] { rt::all_to_all(ctx, torch::zeros({n}, torch::kInt16)); }),
        error_of([&] { rt::all_reduce(ctx, torch::Tensor()); }),
    };
  });
  for (int r = 0; r < n; ++r) {
    for (std::size_t k = 0; k < errors[r].size(); ++k) {
      EXPECT_EQ(type_of(errors[r][k]), "InvalidArgument")
          << "replica " << r << ", call " << k << ": " << errors[r][k];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, TensorCollectivesTest, ::testing::Values(1, 2, 3, 4),
                         ::testing::PrintToStringParamName());

TEST(TensorDTypeTest, MapsSupportedTypesAndRejectsOthers) {
  EXPECT_EQ(rt::dtype_of(torch::kFloat32), DType::kF32);
  EXPECT_EQ(rt::dtype_of(torch::kFloat64), DType::kF64);
  EXPECT_EQ(rt::dtype_of(torch::kBFloat16), DType::kBF16);
  EXPECT_EQ(rt::dtype_of(torch::kFloat16), DType::kF16);
  EXPECT_EQ(rt::dtype_of(torch::kInt32), DType::kI32);
  EXPECT_EQ(rt::dtype_of(torch::kInt64), DType::kI64);
  EXPECT_EQ(rt::dtype_of(torch::kUInt8), DType::kU8);
  for (const torch::ScalarType type :
       {torch::kBool, torch::kComplexFloat, torch::kComplexDouble, torch::kInt8, torch::kInt16}) {
    EXPECT_THROW(rt::dtype_of(type), replicator::InvalidArgument) << type;
  }
}

// A small module with parameters and buffers (BatchNorm's running statistics and its int64
// counter).
torch::nn::Sequential make_module(std::uint64_t seed, int fill) {
  torch::manual_seed(seed);
  torch::nn::Sequential m(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                          torch::nn::Linear(3, 2));
  const torch::NoGradGuard no_grad;
  for (auto& buffer : m->named_buffers()) buffer.value().fill_(fill);
  return m;
}

TEST_P(TensorCollectivesTest, BroadcastParametersMakesModulesIdentical) {
  const int n = replicas();
  const int root = n - 1;
  std::vector<torch::nn::Sequential> modules;
  for (int r = 0; r < n; ++r) modules.push_back(make_module(100 + r, r + 1));
  // The root's own values, and a check that the replicas' modules really differ.
  std::vector<torch::Tensor> root_values;
  for (const auto& p : modules[root]->named_parameters()) root_values.push_back(p.value().clone());
  for (const auto& b : modules[root]->named_buffers()) root_values.push_back(b.value().clone());
  if (n > 1) {
    ASSERT_FALSE(torch::equal(modules[0]->parameters()[0], modules[root]->parameters()[0]));
    ASSERT_FALSE(torch::equal(modules[0]->buffers()[0], modules[root]->buffers()[0]));
  }

  Replicator repl(config());
  repl.run([&](ReplicaContext& ctx) {
    rt::broadcast_parameters(ctx, *modules[ctx.local_replica_id()], {.root = root});
  });

  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(::testing::Message() << "replica " << r);
    std::vector<torch::Tensor> values;
    for (const auto& p : modules[r]->named_parameters()) {
      EXPECT_TRUE(p.value().requires_grad()) << p.key();
      EXPECT_TRUE(p.value().is_leaf()) << p.key();
      values.push_back(p.value());
    }
    for (const auto& b : modules[r]->named_buffers()) values.push_back(b.value());
    ASSERT_EQ(values.size(), root_values.size());
    ASSERT_EQ(values.size(), 9u);  // 2 Linear × 2, BatchNorm: 2 parameters and 3 buffers
    for (std::size_t k = 0; k < values.size(); ++k) {
      EXPECT_EQ(values[k].scalar_type(), root_values[k].scalar_type()) << "tensor " << k;
      EXPECT_TRUE(torch::equal(values[k], root_values[k])) << "tensor " << k;
    }
  }
}

// buffer_of: the tensor's own elements (no copy), or a clear refusal.
TEST(BufferOfTest, CoversAContiguousTensorAndRefusesOthers) {
  const torch::Tensor t = torch::arange(6, torch::kFloat64);
  const replicator::Buffer b = rt::buffer_of(t);
  EXPECT_EQ(b.data, t.data_ptr());
  EXPECT_EQ(b.count, 6u);
  EXPECT_EQ(b.dtype, DType::kF64);
  EXPECT_THROW(rt::buffer_of(t.view({2, 3}).t()), replicator::InvalidArgument);
  EXPECT_THROW(rt::buffer_of(torch::Tensor()), replicator::InvalidArgument);
  EXPECT_THROW(rt::buffer_of(torch::zeros({2}, torch::kBool)), replicator::InvalidArgument);
}

// device_of: the CPU is the host, cuda:n is CUDA device n (where the build has the CUDA
// device path), and any other device is refused by name, before any communication.
TEST(DeviceOfTest, MapsCpuAndCudaAndRefusesOtherDevices) {
  EXPECT_EQ(rt::device_of(c10::Device(c10::kCPU)), replicator::Device{});
  const c10::Device cuda3(c10::kCUDA, 3);
  if (replicator::built_with_cuda()) {
    EXPECT_EQ(rt::device_of(cuda3), (replicator::Device{replicator::MemoryKind::kCuda, 3}));
  } else {
    expect_invalid([&] { rt::device_of(cuda3); }, "no CUDA device path");
  }
  expect_invalid([] { rt::device_of(c10::Device(c10::kMeta)); }, "got one on meta");

  const torch::Tensor meta = torch::empty({4}, torch::TensorOptions().device(c10::kMeta));
  replicator::Config config;
  config.local_replicas = 1;
  replicator::Replicator repl(config);
  repl.run([&](replicator::ReplicaContext& ctx) {
    expect_invalid([&] { rt::all_reduce(ctx, meta); }, "all_reduce: tensors must be on the CPU or");
    expect_invalid([&] { rt::all_gather(ctx, meta); }, "all_gather: tensors must be on the CPU");
    expect_invalid([&] { rt::buffer_of(meta); }, "buffer_of: tensors must be on the CPU");
  });
}

// torch_device_of: the host is the CPU and a fake device is refused by name. cuda:0 loads
// LibTorch's CUDA library (it loads without a GPU) and then gives cuda:0, or says that
// LibTorch sees no such GPU.
TEST(TorchDeviceOfTest, MapsTheHostAndCudaAndRefusesFakeDevices) {
  using replicator::Device;
  using replicator::MemoryKind;
  EXPECT_EQ(rt::torch_device_of(Device{}), c10::Device(c10::kCPU));
  expect_invalid(
      [] {
        (void)rt::torch_device_of(Device{MemoryKind::kFake, 1});
      },
      "fake:1 holds no LibTorch tensors");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "LibTorch's CUDA library is not loaded under a sanitizer";
#else
  try {
    EXPECT_EQ(rt::torch_device_of(Device{MemoryKind::kCuda, 0}), c10::Device(c10::kCUDA, 0));
  } catch (const replicator::Error& e) {
    EXPECT_NE(std::string(e.what()).find("so there is no cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_NE(::dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD), nullptr)
      << "LibTorch's CUDA library is not loaded";
#endif
}

// require_own_backward_thread: CPU tensors and one-replica processes pass; a CUDA tensor of
// a process with several replicas passes only on a GPU the replica has to itself, so a
// replica bound to the host or to another device is refused by name.
TEST(RequireOwnBackwardThreadTest, RefusesAGpuAReplicaMayShare) {
  const c10::Device cuda0(c10::kCUDA, 0);
  const c10::Device cpu(c10::kCPU);
  replicator::Config config;
  config.local_replicas = 1;
  replicator::Replicator(config).run([&](replicator::ReplicaContext& ctx) {
    rt::require_own_backward_thread(ctx, cuda0, "Layer");
    rt::require_own_backward_thread(ctx, cpu, "Layer");
  });
  config.local_replicas = 3;
  for (const char* devices : {"host", "fake:3"}) {
    config.devices = devices;
    replicator::Replicator(config).run([&](replicator::ReplicaContext& ctx) {
      rt::require_own_backward_thread(ctx, cpu, "Layer");
      const std::string expected = replicator::built_with_cuda()
                                       ? "Layer: a tensor on cuda:0 while replica " +
                                             std::to_string(ctx.replica_id()) + " is bound to " +
                                             replicator::to_string(ctx.device()) +
                                             ", not cuda:0, and this process runs 3 replicas"
                                       : "no CUDA device path";
      expect_invalid([&] { rt::require_own_backward_thread(ctx, cuda0, "Layer"); }, expected);
    });
  }
}

// prepare_cpu_kernels leaves LibTorch's results as they were.
TEST(PrepareCpuKernelsTest, RunsTwiceAndChangesNoResult) {
  const torch::Tensor x = torch::linspace(-3, 3, 64).view({8, 8});
  const torch::Tensor before = torch::tanh(torch::mm(x, x));
  rt::prepare_cpu_kernels();
  rt::prepare_cpu_kernels();
  EXPECT_TRUE(torch::equal(torch::tanh(torch::mm(x, x)), before));
}

}  // namespace
