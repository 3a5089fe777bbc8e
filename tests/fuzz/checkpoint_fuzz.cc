// The checkpoint loader (load_checkpoint_bytes, what load_checkpoint runs on a file's bytes)
// on any bytes, into the model of checkpoint_model.h.
//
// Promises: DataError naming the checkpoint, or a model whose parameters and buffers keep
// their names, shapes and dtypes. LibTorch's own reader (miniz, the unpickler) runs inside;
// a crash there is reported like one of ours.
#include <string>
#include <string_view>
#include <vector>

#include "replicator/errors.h"
#include "src/torch/checkpoint_reader.h"
#include "tests/fuzz/checkpoint_model.h"
#include "tests/fuzz/fuzz.h"

using replicator::fuzz::require;

namespace {

// Names, shapes and dtypes of every parameter and buffer of `module`.
std::vector<std::string> signature(const ::torch::nn::Module& module) {
  std::vector<std::string> out;
  for (const auto& p : module.named_parameters()) {
    out.push_back(p.key() + c10::str(p.value().sizes()) + c10::toString(p.value().scalar_type()));
  }
  for (const auto& b : module.named_buffers()) {
    out.push_back(b.key() + c10::str(b.value().sizes()) + c10::toString(b.value().scalar_type()));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool kOneThread = [] {
    ::torch::set_num_threads(1);
    return true;
  }();
  (void)kOneThread;
  replicator::fuzz::CheckpointNet net;
  const auto optimizer = replicator::fuzz::make_checkpoint_optimizer(net);
  const std::vector<std::string> before = signature(net);
  const std::string name = "checkpoint.pt";
  try {
    replicator::torch::detail::load_checkpoint_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), name, net, {optimizer.get()});
  } catch (const replicator::DataError& e) {
    require(e.path() == name, "the error names the checkpoint");
    return 0;
  }
  require(signature(net) == before, "a loaded model keeps its parameters' shapes and dtypes");
  return 0;
}
