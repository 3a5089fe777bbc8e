// Tests of checkpoints (replicator/torch/checkpoint.h): a save/load round trip into a
// freshly built model and optimizer restores parameters, buffers, the optimizer's momentum
// (one more step on both gives bitwise equal parameters), the position and the default
// generator; files are replaced atomically; missing, corrupt, truncated and foreign
// checkpoints raise DataError naming the file.
#include "replicator/torch/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/torch/batch_norm.h"

namespace {

namespace fs = std::filesystem;
namespace rt = replicator::torch;
using replicator::DataError;

// Linear → CrossReplicaBatchNorm1d → ReLU → Linear; `hidden` changes the shapes only.
struct SmallNetImpl : torch::nn::Module {
  explicit SmallNetImpl(std::int64_t hidden = 8)
      : fc1(register_module("fc1", torch::nn::Linear(4, hidden))),
        bn(register_module("bn", rt::CrossReplicaBatchNorm1d(hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }

  torch::nn::Linear fc1;
  rt::CrossReplicaBatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(SmallNet);

// Different parameter names.
struct OtherNetImpl : torch::nn::Module {
  OtherNetImpl() : body(register_module("body", torch::nn::Linear(4, 3))) {}
  torch::nn::Linear body;
};
TORCH_MODULE(OtherNet);

struct Training {
  SmallNet model;
  std::shared_ptr<torch::optim::SGD> optimizer;
};

Training make_training(std::uint64_t seed, std::int64_t hidden = 8) {
  torch::manual_seed(seed);
  SmallNet model(hidden);
  auto optimizer = std::make_shared<torch::optim::SGD>(
      model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  return {model, optimizer};
}

struct Batch {
  torch::Tensor x, y;
};

std::vector<Batch> make_batches(int count) {
  torch::manual_seed(77);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    batches.push_back({torch::randn({6, 4}) * 2 + 1, torch::randint(3, {6}, torch::kLong)});
  }
  return batches;
}

void train_step(Training& t, const Batch& batch) {
  t.optimizer->zero_grad();
  torch::nn::functional::cross_entropy(t.model(batch.x), batch.y).backward();
  t.optimizer->step();
}

// Every parameter and buffer, by name, compared bitwise.
::testing::AssertionResult same_state(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto ap = a.named_parameters(), bp = b.named_parameters();
  const auto ab = a.named_buffers(), bb = b.named_buffers();
  if (ap.size() != bp.size() || ab.size() != bb.size()) {
    return ::testing::AssertionFailure() << "different numbers of tensors";
  }
  for (const auto& p : ap) {
    if (!bp.contains(p.key()) || !torch::equal(p.value(), bp[p.key()])) {
      return ::testing::AssertionFailure() << "parameter " << p.key() << " differs";
    }
  }
  for (const auto& x : ab) {
    if (!bb.contains(x.key()) || !torch::equal(x.value(), bb[x.key()])) {
      return ::testing::AssertionFailure() << "buffer " << x.key() << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("replicator_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Expects load_checkpoint(path, ...) to throw DataError naming `path`.
  void expect_data_error(const fs::path& path, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer) {
    try {
      rt::load_checkpoint(path, model, optimizer);
      ADD_FAILURE() << "load_checkpoint(" << path << ") did not throw";
    } catch (const DataError& e) {
      EXPECT_EQ(e.path(), path.string());
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "load_checkpoint(" << path
                    << ") threw something else than DataError: " << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripRestoresModelOptimizerPositionAndGenerator) {
  const std::vector<Batch> batches = make_batches(4);
  Training saved = make_training(1);
  for (int i = 0; i < 3; ++i) train_step(saved, batches[i]);
  const fs::path path = dir_ / "model.ckpt";
  rt::save_checkpoint(path, *saved.model, *saved.optimizer, {.step = 3, .epoch = 2, .batch = 5});
  const torch::Tensor drawn_after_save = torch::rand({8});
  EXPECT_EQ(files_in(dir_), std::set<std::string>{"model.ckpt"}) << "a temporary file is left";

  Training loaded = make_training(2);
  ASSERT_FALSE(same_state(*loaded.model, *saved.model)) << "the fresh model must differ";
  const rt::TrainingPosition position = rt::load_checkpoint(path, *loaded.model, *loaded.optimizer);
  EXPECT_EQ(position.step, 3);
  EXPECT_EQ(position.epoch, 2);
  EXPECT_EQ(position.batch, 5);
  EXPECT_TRUE(torch::equal(torch::rand({8}), drawn_after_save))
      << "the default generator was not restored";
  EXPECT_TRUE(same_state(*loaded.model, *saved.model));
  EXPECT_EQ(loaded.model->bn->num_batches_tracked.item<std::int64_t>(), 3);

  // The momentum buffers came back too: one more step agrees bitwise.
  train_step(saved, batches[3]);
  train_step(loaded, batches[3]);
  EXPECT_TRUE(same_state(*loaded.model, *saved.model)) << "after one more step";
}

TEST_F(CheckpointTest, SaveReplacesAnExistingCheckpoint) {
  const std::vector<Batch> batches = make_batches(3);
  Training training = make_training(1);
  const fs::path path = dir_ / "model.ckpt";
  train_step(training, batches[0]);
  rt::save_checkpoint(path, *training.model, *training.optimizer, {.step = 1});
  train_step(training, batches[1]);
  train_step(training, batches[2]);
  rt::save_checkpoint(path, *training.model, *training.optimizer,
                      {.step = 3, .epoch = 1, .batch = 0});
  EXPECT_EQ(files_in(dir_), std::set<std::string>{"model.ckpt"}) << "a temporary file is left";

  Training loaded = make_training(2);
  const rt::TrainingPosition position = rt::load_checkpoint(path, *loaded.model, *loaded.optimizer);
  EXPECT_EQ(position.step, 3);
  EXPECT_EQ(position.epoch, 1);
  EXPECT_TRUE(same_state(*loaded.model, *training.model));
}

TEST_F(CheckpointTest, SaveIntoMissingFolderIsDataError) {
  Training training = make_training(1);
  const fs::path path = dir_ / "no" / "such" / "model.ckpt";
  EXPECT_THROW(rt::save_checkpoint(path, *training.model, *training.optimizer, {}), DataError);
  EXPECT_TRUE(files_in(dir_).empty());
}

TEST_F(CheckpointTest, MissingFileIsDataErrorNamingIt) {
  Training training = make_training(1);
  const Training reference = make_training(1);
  expect_data_error(dir_ / "absent.ckpt", *training.model, *training.optimizer);
  EXPECT_TRUE(same_state(*training.model, *reference.model)) << "the model was changed";
}

TEST_F(CheckpointTest, CorruptFileIsDataError) {
  Training training = make_training(1);
  train_step(training, make_batches(1)[0]);
  const fs::path real = dir_ / "real.ckpt";
  rt::save_checkpoint(real, *training.model, *training.optimizer, {.step = 1});
  const std::string bytes = read_bytes(real);
  ASSERT_GT(bytes.size(), 1000u);

  std::string garbage(4096, '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i) {
    garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  write_bytes(dir_ / "garbage.ckpt", garbage);
  write_bytes(dir_ / "empty.ckpt", "");
  write_bytes(dir_ / "half.ckpt", bytes.substr(0, bytes.size() / 2));
  write_bytes(dir_ / "short.ckpt", bytes.substr(0, bytes.size() - 50));
  for (const char* name : {"garbage.ckpt", "empty.ckpt", "half.ckpt", "short.ckpt"}) {
    SCOPED_TRACE(name);
    Training fresh = make_training(2);
    expect_data_error(dir_ / name, *fresh.model, *fresh.optimizer);
  }
}

// LibTorch's reader checks no checksum (and can crash on a changed TorchScript source):
// load_checkpoint checks every entry's CRC-32 first and names the entry that changed.
TEST_F(CheckpointTest, ChangedByteIsDataErrorNamingTheEntry) {
  Training training = make_training(1);
  train_step(training, make_batches(1)[0]);
  const fs::path real = dir_ / "real.ckpt";
  rt::save_checkpoint(real, *training.model, *training.optimizer, {.step = 1});
  std::string bytes = read_bytes(real);
  const std::string entry = "archive/data.pkl";
  const std::size_t local = bytes.find(entry) - 30;  // its local header comes first
  ASSERT_EQ(bytes.compare(local, 4, "PK\x03\x04"), 0);
  const std::size_t extra =
      static_cast<unsigned char>(bytes[local + 28]) |
      (static_cast<std::size_t>(static_cast<unsigned char>(bytes[local + 29])) << 8);
  bytes[local + 30 + entry.size() + extra + 2] ^= 0x20;
  const fs::path changed = dir_ / "changed.ckpt";
  write_bytes(changed, bytes);
  Training fresh = make_training(2);
  expect_data_error(changed, *fresh.model, *fresh.optimizer);
  try {
    rt::load_checkpoint(changed, *fresh.model, *fresh.optimizer);
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + entry + "'"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, DifferentArchitectureIsDataError) {
  Training training = make_training(1);
  train_step(training, make_batches(1)[0]);
  const fs::path path = dir_ / "model.ckpt";
  rt::save_checkpoint(path, *training.model, *training.optimizer, {.step = 1});

  {
    SCOPED_TRACE("same names, other shapes");
    Training wider = make_training(2, /*hidden=*/16);
    expect_data_error(path, *wider.model, *wider.optimizer);
  }
  {
    SCOPED_TRACE("other names");
    OtherNet other;
    torch::optim::SGD optimizer(other->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    expect_data_error(path, *other, optimizer);
  }
}

}  // namespace

namespace {

// ---- CheckpointFolder: numbered checkpoints, the newest kept, resume past torn ones --------

TEST_F(CheckpointTest, FolderKeepsTheNewestAndListsThemNewestFirst) {
  const std::vector<Batch> batches = make_batches(5);
  Training training = make_training(1);
  rt::CheckpointFolder folder(dir_ / "run", 2);
  EXPECT_TRUE(folder.list().empty()) << "a missing folder has no checkpoint";
  for (int step = 1; step <= 5; ++step) {
    train_step(training, batches[static_cast<std::size_t>(step - 1)]);
    folder.save(*training.model, *training.optimizer, {.step = step});
  }
  // Not checkpoints: a temporary file of an unfinished save, and other names.
  write_bytes(dir_ / "run" / ".checkpoint-000000006.pt.tmp.1", "partial");
  write_bytes(dir_ / "run" / "checkpoint-latest.pt", "x");
  write_bytes(dir_ / "run" / "metrics.jsonl", "{}");
  const std::vector<fs::path> listed = folder.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0], folder.path_for(5));
  EXPECT_EQ(listed[1], folder.path_for(4));
  EXPECT_EQ(folder.path_for(12).filename(), "checkpoint-000000012.pt");
  EXPECT_THROW(rt::CheckpointFolder(dir_, 0), replicator::InvalidArgument);
}

TEST_F(CheckpointTest, FolderResumesFromTheNewestThatLoadsWarningAboutTornOnes) {
  const std::vector<Batch> batches = make_batches(3);
  Training training = make_training(1);
  rt::CheckpointFolder folder(dir_, 3);
  train_step(training, batches[0]);
  folder.save(*training.model, *training.optimizer, {.step = 1});
  train_step(training, batches[1]);
  folder.save(*training.model, *training.optimizer, {.step = 2, .epoch = 1});
  const std::string whole = read_bytes(folder.path_for(2));
  train_step(training, batches[2]);
  folder.save(*training.model, *training.optimizer, {.step = 3});
  write_bytes(folder.path_for(3), whole.substr(0, whole.size() / 2));  // torn by a crash

  Training loaded = make_training(2);
  std::vector<std::string> warnings;
  const auto resumed = folder.resume(*loaded.model, *loaded.optimizer,
                                     [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->first.step, 2);
  EXPECT_EQ(resumed->first.epoch, 1);
  EXPECT_EQ(resumed->second, folder.path_for(2));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(folder.path_for(3).string()), std::string::npos) << warnings[0];

  // Nothing loads: a DataError naming the folder, after a warning for each.
  write_bytes(folder.path_for(1), "not a checkpoint");
  write_bytes(folder.path_for(2), "not a checkpoint");
  warnings.clear();
  EXPECT_THROW(folder.resume(*loaded.model, *loaded.optimizer,
                             [&](const std::string& w) { warnings.push_back(w); }),
               DataError);
  EXPECT_EQ(warnings.size(), 3u);

  rt::CheckpointFolder empty(dir_ / "empty", 1);
  EXPECT_FALSE(empty.resume(*loaded.model, *loaded.optimizer, [](const std::string&) {}));
}

}  // namespace
