// The elastic store (src/engines/store/elastic_store.h) on a folder: URLs, keys that are
// overwritten, created once and counted from many threads and processes, trees deleted.
// The Redis side runs in tests/apps/elastic_job.sh (redis case) against a real server.
#include "src/engines/store/elastic_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

namespace fs = std::filesystem;

class ElasticStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/elastic-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string url() const { return "file://" + dir_.string() + "/job"; }
  fs::path dir_;
};

TEST(ElasticUrlTest, ParsesFileAndRedisForms) {
  const ElasticUrl file = parse_elastic_url("file:///shared/runs/job-1/");
  EXPECT_FALSE(file.redis);
  EXPECT_EQ(file.folder, "/shared/runs/job-1");
  EXPECT_EQ(root_name(file), "job-1");
  EXPECT_EQ(child_url(file, "gen3"), "file:///shared/runs/job-1/gen3");

  const ElasticUrl redis = parse_elastic_url("redis://store.example:7000/team/job");
  EXPECT_TRUE(redis.redis);
  EXPECT_EQ(redis.host, "store.example");
  EXPECT_EQ(redis.port, 7000);
  EXPECT_EQ(redis.prefix, "team/job");
  EXPECT_EQ(root_name(redis), "job");
  EXPECT_EQ(child_url(redis, "gen0"), "redis://store.example:7000/team/job/gen0");

  const ElasticUrl v6 = parse_elastic_url("redis://[::1]/job");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 6379);
  EXPECT_EQ(child_url(v6, "gen1"), "redis://[::1]:6379/job/gen1");
}

TEST(ElasticUrlTest, RejectsWhatCannotWork) {
  for (const char* bad :
       {"", "job", "file://relative/job", "file:///", "file:///a/../b", "file:///a b",
        "redis://host:6379", "redis://host:6379/", "redis://:6379/job", "redis://host:0/job",
        "redis://host:99999/job", "redis://host:x/job", "redis://[::1/job", "redis://u@host/job",
        "redis://host/a//b", "http://host/job"}) {
    try {
      parse_elastic_url(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("redis://host:port/job"), std::string::npos);
    }
  }
}

TEST_F(ElasticStoreTest, PutOverwritesGetReads) {
  ElasticStore store(parse_elastic_url(url()));
  EXPECT_FALSE(store.get("gen0/closed").has_value());
  store.put("gen0/closed", "2 0");
  EXPECT_EQ(store.get("gen0/closed"), "2 0");
  store.put("gen0/closed", "");
  EXPECT_EQ(store.get("gen0/closed"), "");
  EXPECT_THROW(store.put("../outside", "x"), InvalidArgument);
  EXPECT_THROW(store.put("a//b", "x"), InvalidArgument);
}

TEST_F(ElasticStoreTest, CreateHasOneWinnerAmongThreads) {
  constexpr int kThreads = 8;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ElasticStore store(parse_elastic_url(url()));
      if (store.create("gen0/end", "thread " + std::to_string(t))) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
  ElasticStore store(parse_elastic_url(url()));
  EXPECT_TRUE(store.get("gen0/end").value_or("").starts_with("thread "));
  EXPECT_FALSE(store.create("gen0/end", "again"));
  // No temporary file is left next to the key.
  for (const auto& entry : fs::directory_iterator(dir_ / "job" / "gen0")) {
    EXPECT_EQ(entry.path().filename(), "end");
  }
}

TEST_F(ElasticStoreTest, AddCountsEveryIncrementAcrossProcessesAndThreads) {
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
          ElasticStore store(parse_elastic_url(url()));
          for (int i = 0; i < kAdds; ++i) store.add("gen0/slots", 1);
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
  ElasticStore store(parse_elastic_url(url()));
  EXPECT_EQ(store.add("gen0/slots", 0), kProcesses * kThreads * kAdds);
  EXPECT_EQ(store.add("gen0/slots", -5), kProcesses * kThreads * kAdds - 5);
  EXPECT_EQ(store.add("gen1/fresh", 2), 2);
}

TEST_F(ElasticStoreTest, RemoveTreeDeletesAGenerationOnly) {
  ElasticStore store(parse_elastic_url(url()));
  store.put("gen0/closed", "1 0");
  store.put("gen0/heartbeat/0", "7");
  store.add("gen0/slots", 1);
  store.put("gen1/closed", "1 0");
  store.put("current", "1");
  store.remove_tree("gen0");
  EXPECT_FALSE(store.get("gen0/closed").has_value());
  EXPECT_FALSE(store.get("gen0/heartbeat/0").has_value());
  EXPECT_FALSE(fs::exists(dir_ / "job" / "gen0"));
  EXPECT_EQ(store.get("gen1/closed"), "1 0");
  EXPECT_EQ(store.get("current"), "1");
  EXPECT_EQ(store.add("gen0/slots", 1), 1);  // a fresh count
}

TEST_F(ElasticStoreTest, UnusableFolderIsAConfigErrorNamingIt) {
  fs::create_directories(dir_ / "ro");
  std::ofstream(dir_ / "ro" / "file") << "x";
  try {
    ElasticStore store(parse_elastic_url("file://" + (dir_ / "ro" / "file" / "job").string()));
    FAIL() << "a folder below a file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ro/file/job"), std::string::npos) << e.what();
  }
}

TEST(ElasticStoreRedisTest, UnreachableServerIsAConfigErrorNamingIt) {
  try {
    ElasticStore store(parse_elastic_url("redis://127.0.0.1:1/job"));
    FAIL() << "connected to port 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("redis-server"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace replicator::detail
