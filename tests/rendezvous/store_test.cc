// The rendezvous store (replicator/rendezvous/store.h) on a folder: URLs, keys that are
// overwritten, created once and counted from many threads and processes, trees deleted,
// failures typed. The Redis side runs in tests/apps/elastic_job.sh (redis case) against a
// real server.
#include "replicator/rendezvous/store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "replicator/errors.h"

namespace replicator::rendezvous {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rendezvous-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string url() const { return "file://" + dir_.string() + "/job"; }
  fs::path dir_;
};

TEST(StoreUrlTest, ParsesFileAndRedisForms) {
  const StoreUrl file = parse_store_url("file:///shared/runs/job-1/");
  EXPECT_FALSE(file.redis);
  EXPECT_EQ(file.folder, "/shared/runs/job-1");
  EXPECT_EQ(root_name(file), "job-1");
  EXPECT_EQ(child_url(file, "gen3"), "file:///shared/runs/job-1/gen3");

  const StoreUrl redis = parse_store_url("redis://store.example:7000/team/job");
  EXPECT_TRUE(redis.redis);
  EXPECT_EQ(redis.host, "store.example");
  EXPECT_EQ(redis.port, 7000);
  EXPECT_EQ(redis.prefix, "team/job");
  EXPECT_EQ(root_name(redis), "job");
  EXPECT_EQ(child_url(redis, "gen0"), "redis://store.example:7000/team/job/gen0");

  const StoreUrl v6 = parse_store_url("redis://[::1]/job");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 6379);
  EXPECT_EQ(child_url(v6, "gen1"), "redis://[::1]:6379/job/gen1");
}

TEST(StoreUrlTest, RejectsWhatCannotWork) {
  for (const char* bad :
       {"", "job", "file://relative/job", "file:///", "file:///a/../b", "file:///a b",
        "redis://host:6379", "redis://host:6379/", "redis://:6379/job", "redis://host:0/job",
        "redis://host:99999/job", "redis://host:x/job", "redis://[::1/job", "redis://u@host/job",
        "redis://host/a//b", "http://host/job"}) {
    try {
      parse_store_url(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("redis://host:port/job"), std::string::npos);
    }
  }
}

TEST_F(StoreTest, PutOverwritesGetReads) {
  const auto store = open_store(url());
  EXPECT_FALSE(store->get("gen0/closed").has_value());
  store->put("gen0/closed", "2 0");
  EXPECT_EQ(store->get("gen0/closed"), "2 0");
  store->put("gen0/closed", "");
  EXPECT_EQ(store->get("gen0/closed"), "");
  EXPECT_THROW(store->put("../outside", "x"), InvalidArgument);
  EXPECT_THROW(store->put("a//b", "x"), InvalidArgument);
}

TEST_F(StoreTest, CreateHasOneWinnerAmongThreads) {
  constexpr int kThreads = 8;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto store = open_store(url());
      if (store->create("gen0/end", "thread " + std::to_string(t))) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
  const auto store = open_store(url());
  EXPECT_TRUE(store->get("gen0/end").value_or("").starts_with("thread "));
  EXPECT_FALSE(store->create("gen0/end", "again"));
  // No temporary file is left next to the key.
  for (const auto& entry : fs::directory_iterator(dir_ / "job" / "gen0")) {
    EXPECT_EQ(entry.path().filename(), "end");
  }
}

TEST_F(StoreTest, AddCountsEveryIncrementAcrossProcessesAndThreads) {
  constexpr int kProcesses = 3;
  constexpr int kThreads = 3;
  constexpr int kAdds = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
          const auto store = open_store(url());
          for (int i = 0; i < kAdds; ++i) store->add("gen0/slots", 1);
        });
      }
      for (auto& t : threads) t.join();
      _exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto store = open_store(url());
  EXPECT_EQ(store->add("gen0/slots", 0), kProcesses * kThreads * kAdds);
  EXPECT_EQ(store->add("gen0/slots", -5), kProcesses * kThreads * kAdds - 5);
  EXPECT_EQ(store->add("gen1/fresh", 2), 2);
}

TEST_F(StoreTest, RemoveTreeDeletesAGenerationOnly) {
  const auto store = open_store(url());
  store->put("gen0/closed", "1 0");
  store->put("gen0/heartbeat/0", "7");
  store->add("gen0/slots", 1);
  store->put("gen1/closed", "1 0");
  store->put("current", "1");
  store->remove_tree("gen0");
  EXPECT_FALSE(store->get("gen0/closed").has_value());
  EXPECT_FALSE(store->get("gen0/heartbeat/0").has_value());
  EXPECT_FALSE(fs::exists(dir_ / "job" / "gen0"));
  EXPECT_EQ(store->get("gen1/closed"), "1 0");
  EXPECT_EQ(store->get("current"), "1");
  EXPECT_EQ(store->add("gen0/slots", 1), 1);  // a fresh count
}

TEST_F(StoreTest, UnusableFolderIsAStoreErrorNamingIt) {
  fs::create_directories(dir_ / "ro");
  std::ofstream(dir_ / "ro" / "file") << "x";
  const std::string url = "file://" + (dir_ / "ro" / "file" / "job").string();
  try {
    const auto store = open_store(url);
    FAIL() << "a folder below a file was accepted";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("ro/file/job"), std::string::npos) << e.what();
    EXPECT_EQ(e.url(), url);
  }
}

// A store that fails after it was opened: its folder was replaced by a file.
TEST_F(StoreTest, AFailedWriteIsAStoreErrorNamingTheStore) {
  const auto store = open_store(url());
  store->put("gen0/closed", "1 0");
  fs::remove_all(dir_ / "job" / "gen0");
  std::ofstream(dir_ / "job" / "gen0") << "x";
  try {
    store->put("gen0/closed", "2 0");
    FAIL() << "a key below a file was written";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(url()), std::string::npos) << e.what();
    EXPECT_EQ(e.url(), url());
  }
  EXPECT_THROW(store->add("gen0/slots", 1), StoreError);
}

TEST(RedisStoreTest, UnreachableServerIsAStoreErrorNamingIt) {
  try {
    const auto store = open_store("redis://127.0.0.1:1/job");
    FAIL() << "connected to port 1";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("redis-server"), std::string::npos) << e.what();
    EXPECT_EQ(e.url(), "redis://127.0.0.1:1/job");
  } catch (const ConfigError& e) {
    // A build without hiredis says so.
    EXPECT_NE(std::string(e.what()).find("no Redis client"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace replicator::rendezvous
