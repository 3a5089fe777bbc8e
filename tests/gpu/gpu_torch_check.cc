// gpu_torch_check: the torch layer on CUDA tensors, as scripts/gpu_check.sh runs it on a
// machine with a GPU, built against that machine's LibTorch (no GoogleTest there):
// - tensor all_reduce on CUDA tensors, R = 1, 2, 4 replicas sharing the GPUs: the bits of
//   the same call on CPU tensors, for every dtype the gradient reducer carries and three ops;
// - GradientReducer over CUDA parameters (f32 and bf16, several buckets, overlap on), R = 1
//   and 2 replicas on one GPU: the bits of the same steps on the CPU, every bucket reduced in
//   synchronize() (autograd runs the hooks on its thread for the GPU, which the replicas
//   share), and no hang;
// - CrossReplicaBatchNorm2d on CUDA: one replica gives LibTorch's training-mode batch norm
//   (forward and input gradient), and two replicas sharing a GPU are refused on every replica
//   before any collective;
// - the classifier's network (examples/models/resnet.h) on CUDA for --steps steps of a
//   random 256-image batch with the replicated optimizer: the loss stays finite, and its
//   images/s is printed.
// Prints one line per failed check and a summary line, and writes the results as JSON.
//
//   gpu_torch_check [--json FILE] [--steps N]
//
// Exit status: 0 every check passed; 1 a check failed; 77 LibTorch or replicator sees no
// CUDA device (what CTest reads as skipped).
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "examples/models/resnet.h"
#include "replicator/errors.h"
#include "replicator/replicator.h"
#include "replicator/torch/batch_norm.h"
#include "replicator/torch/gradient_reducer.h"
#include "replicator/torch/tensor_collectives.h"
#include "tests/gpu/results.h"

namespace {

namespace rt = replicator::torch;
using replicator::Config;
using replicator::ReduceOp;
using replicator::ReplicaContext;
using replicator::Replicator;
using replicator::gpu::Results;

// R replicas on `devices` ("host", or "cuda": replica r on GPU r mod GPUs); a deadline, so
// that a hang is a Timeout.
Config config_on(const char* devices, int replicas) {
  Config config;
  config.local_replicas = replicas;
  config.devices = devices;
  config.timeout = std::chrono::seconds(60);
  return config;
}

// The replica's LibTorch device (torch_device_of, as the classifier job takes it).
torch::Device torch_device(const ReplicaContext& ctx) { return rt::torch_device_of(ctx.device()); }

// "" when `a` and `b` (CPU tensors) hold the same bytes, else what differs.
std::string same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.contiguous(), y = b.contiguous();
  if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type()) {
    return "shape or dtype differs: " + c10::str(x.sizes()) + " against " + c10::str(y.sizes());
  }
  if (std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0) return "";
  const torch::Tensor diff = (x.to(torch::kDouble) - y.to(torch::kDouble)).abs();
  return "bits differ at " + std::to_string(diff.ne(0).sum().item<std::int64_t>()) + " of " +
         std::to_string(x.numel()) + " elements (max |difference| " +
         std::to_string(diff.max().item<double>()) + ")";
}

// The first failure over the replicas' results ("replica r: ...").
std::string first_failure(const std::vector<std::string>& per_replica) {
  for (std::size_t r = 0; r < per_replica.size(); ++r) {
    if (!per_replica[r].empty()) return "replica " + std::to_string(r) + ": " + per_replica[r];
  }
  return "";
}

torch::Tensor random_input(std::int64_t count, c10::ScalarType type) {
  if (c10::isIntegralType(type, /*includeBool=*/false)) {
    return torch::randint(-1000, 1000, {count}).to(type);
  }
  return (torch::randn({count}, torch::kDouble) * 3).to(type);
}

std::string tensor_all_reduce_bits(int replicas, c10::ScalarType type, ReduceOp op,
                                   std::int64_t count) {
  std::vector<torch::Tensor> inputs;
  inputs.reserve(static_cast<std::size_t>(replicas));
  for (int r = 0; r < replicas; ++r) inputs.push_back(random_input(count, type));
  const auto run_on = [&](const char* devices) {
    Replicator repl(config_on(devices, replicas));
    return repl.run([&](ReplicaContext& ctx) {
      torch::Tensor t = inputs[static_cast<std::size_t>(ctx.replica_id())].clone();
      t = t.to(torch_device(ctx));
      rt::all_reduce(ctx, t, {.op = op});
      return t.cpu();
    });
  };
  const auto host = run_on("host");
  const auto gpu = run_on("cuda");
  std::vector<std::string> failures(static_cast<std::size_t>(replicas));
  for (int r = 0; r < replicas; ++r) failures[r] = same_bytes(gpu[r], host[r]);
  return first_failure(failures);
}

// Two steps of a reducer over w (f32) and v (bf16), whose gradients are exactly the
// replica's coefficients (the loss is linear in them); the reduced gradients of each step,
// and how many buckets backward reduced.
struct ReducerRun {
  std::vector<torch::Tensor> grads;
  std::vector<std::size_t> in_backward;
};

std::string reducer_bits(int replicas) {
  constexpr std::int64_t kW = 5003, kV = 1201;
  std::vector<torch::Tensor> cw, cv;
  cw.reserve(static_cast<std::size_t>(replicas));
  cv.reserve(static_cast<std::size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    cw.push_back(random_input(kW, torch::kFloat));
    cv.push_back(random_input(kV, torch::kBFloat16));
  }
  const auto run_on = [&](const char* devices) {
    Replicator repl(config_on(devices, replicas));
    return repl.run([&](ReplicaContext& ctx) {
      const torch::Device dev = torch_device(ctx);  // every replica on GPU 0 ("cuda:1")
      const torch::Tensor w = torch::zeros({kW}, torch::TensorOptions(dev)).requires_grad_();
      const torch::Tensor v =
          torch::zeros({kV}, torch::TensorOptions(dev).dtype(torch::kBFloat16)).requires_grad_();
      rt::GradientReducer reducer(ctx, {w, v}, {.bucket_bytes = 4096});
      const auto r = static_cast<std::size_t>(ctx.replica_id());
      ReducerRun out;
      for (int step = 1; step <= 2; ++step) {
        reducer.zero_grad();
        const torch::Tensor a = cw[r].to(dev) * step, b = cv[r].to(dev);
        ((w * a).sum() + (v * b).sum().to(torch::kFloat)).backward();
        reducer.synchronize();
        out.grads.push_back(w.grad().cpu());
        out.grads.push_back(v.grad().cpu());
        out.in_backward.push_back(reducer.buckets_reduced_in_backward());
      }
      return out;
    });
  };
  const auto host = run_on("host");
  const auto gpu = run_on("cuda:1");
  std::vector<std::string> failures(static_cast<std::size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    for (std::size_t k = 0; k < host[r].grads.size() && failures[r].empty(); ++k) {
      failures[r] = same_bytes(gpu[r].grads[k], host[r].grads[k]);
      if (!failures[r].empty()) failures[r] = "gradient " + std::to_string(k) + ": " + failures[r];
    }
    for (const std::size_t n : gpu[r].in_backward) {
      if (n != 0 && failures[r].empty()) {
        failures[r] = std::to_string(n) + " CUDA buckets reduced from within backward";
      }
    }
  }
  return first_failure(failures);
}

// One replica: CrossReplicaBatchNorm2d's output and input gradient against LibTorch's own
// training-mode batch norm on the same CUDA input.
std::string batch_norm_matches_libtorch() {
  Replicator repl(config_on("cuda", 1));
  return repl.run([&](ReplicaContext& ctx) -> std::string {
    const torch::Tensor x0 = (torch::randn({8, 3, 5, 5}) * 2 + 1).to(torch_device(ctx));
    const torch::Tensor dy = torch::randn({8, 3, 5, 5}).to(torch_device(ctx));
    rt::CrossReplicaBatchNorm2d bn(3);
    bn->to(torch_device(ctx));
    const torch::Tensor x = x0.clone().requires_grad_();
    const torch::Tensor y = bn(x);
    (y * dy).sum().backward();
    const torch::Tensor x_ref = x0.clone().requires_grad_();
    const torch::Tensor y_ref = torch::batch_norm(x_ref, {}, {}, {}, {}, /*training=*/true, 0.1,
                                                  1e-5, /*cudnn_enabled=*/true);
    (y_ref * dy).sum().backward();
    if (!torch::allclose(y, y_ref, 1e-4, 1e-4)) return "the output differs from LibTorch's";
    if (!torch::allclose(x.grad(), x_ref.grad(), 1e-4, 1e-4)) {
      return "the input gradient differs from LibTorch's";
    }
    return "";
  })[0];
}

// Two replicas sharing a GPU: training-mode forward refuses on every replica with
// InvalidArgument before any collective.
std::string batch_norm_refuses_a_shared_gpu() {
  Replicator repl(config_on("cuda:1", 2));
  const auto got = repl.run([&](ReplicaContext& ctx) -> std::string {
    rt::CrossReplicaBatchNorm2d bn(3);
    bn->to(torch_device(ctx));
    try {
      bn(torch::randn({4, 3, 2, 2}).to(torch_device(ctx)));
      return "no InvalidArgument";
    } catch (const replicator::InvalidArgument& e) {
      return std::strstr(e.what(), "2 replicas of this process share cuda:0") != nullptr
                 ? ""
                 : std::string("InvalidArgument without the reason: ") + e.what();
    }
  });
  return first_failure({got[0], got[1]});
}

// The classifier's network on one GPU; returns images/s over the steps after the first 5.
double classifier_steps(Results& results, int steps) {
  constexpr std::int64_t kBatch = 256;
  Replicator repl(config_on("cuda", 1));
  return repl.run([&](ReplicaContext& ctx) {
    const torch::Device dev = torch_device(ctx);
    replicator::examples::ResNet model;
    model->to(dev);
    rt::to_memory_format(*model, memory_format(model->options()));
    rt::ReplicatedOptimizer optimizer(
        ctx, std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.05).momentum(0.9)));
    const torch::Tensor images =
        torch::randn({kBatch, 1, 28, 28}).to(dev).contiguous(memory_format(model->options()));
    const torch::Tensor labels = torch::randint(10, {kBatch}, torch::kLong).to(dev);
    constexpr int kWarmUp = 5;
    auto start = std::chrono::steady_clock::now();
    double first = 0, last = 0;
    for (int s = 0; s < steps + kWarmUp; ++s) {
      if (s == kWarmUp) {
        torch::cuda::synchronize();
        start = std::chrono::steady_clock::now();
      }
      optimizer.zero_grad();
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(images), labels);
      loss.backward();
      optimizer.step();
      if (s == 0) first = loss.item<double>();
      if (s + 1 == steps + kWarmUp) last = loss.item<double>();
    }
    torch::cuda::synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    results.check("classifier: finite loss",
                  std::isfinite(first) && std::isfinite(last)
                      ? ""
                      : "loss " + std::to_string(first) + " then " + std::to_string(last));
    results.check(
        "classifier: the loss falls on a batch it sees again",
        last < first ? "" : "loss " + std::to_string(first) + " then " + std::to_string(last));
    return static_cast<double>(steps) * kBatch / seconds;
  })[0];
}

void run_checks(Results& results, int steps) {
  const std::vector<c10::ScalarType> types = {torch::kFloat, torch::kDouble, torch::kBFloat16,
                                              torch::kHalf, torch::kInt};
  for (const int R : {1, 2, 4}) {
    for (const c10::ScalarType type : types) {
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
        for (const std::int64_t count :
             {std::int64_t{0}, std::int64_t{1}, std::int64_t{4099}, std::int64_t{1} << 20}) {
          results.check("tensor all_reduce R=" + std::to_string(R) + " " + c10::toString(type) +
                            " " + std::string(replicator::to_string(op)) + " x" +
                            std::to_string(count),
                        tensor_all_reduce_bits(R, type, op, count));
        }
      }
    }
  }
  for (const int R : {1, 2}) {
    results.check("gradient reducer R=" + std::to_string(R) + " on one GPU", reducer_bits(R));
  }
  results.check("batch norm against LibTorch's", batch_norm_matches_libtorch());
  results.check("batch norm refuses a shared GPU", batch_norm_refuses_a_shared_gpu());
  const double rate = classifier_steps(results, steps);
  std::printf("classifier on cuda:0: %d steps of 256 images, %.0f images/s\n", steps, rate);
  results.rows.push_back(
      "{\"model\": \"classifier\", \"batch\": 256, \"steps\": " + std::to_string(steps) +
      ", \"images_per_s\": " + std::to_string(rate) + "}");
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  int steps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: gpu_torch_check [--json FILE] [--steps N]\n");
      return 2;
    }
  }
  if (!torch::cuda::is_available() ||
      replicator::device_count(replicator::MemoryKind::kCuda) == 0) {
    std::printf(
        "gpu_torch_check: no CUDA device visible (LibTorch %s, replicator %s); nothing "
        "checked\n",
        torch::cuda::is_available() ? "sees one" : "sees none",
        replicator::built_with_cuda() ? "sees none" : "built without CUDA");
    return 77;
  }
  torch::manual_seed(7);
  Results results;
  try {
    run_checks(results, steps);
  } catch (const std::exception& e) {
    results.check("gpu_torch_check", std::string("stopped: ") + e.what());
  }
  if (!json.empty()) replicator::gpu::write_json(json, results, "classifier");
  std::printf("gpu_torch_check: %s, %d checks passed, %zu failed\n",
              results.failed.empty() ? "PASS" : "FAIL", results.passed, results.failed.size());
  return results.failed.empty() ? 0 : 1;
}
