// TrajectoryQueue and RateLimiter: FIFO order, exactly-once delivery under many producer
// and consumer threads, deadlines, close on both sides, the samples-per-insert ratio, the
// counts, and the arguments refused.
#include "replicator/rl/trajectory_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "replicator/rl/rate_limiter.h"

namespace replicator::rl {
namespace {

using std::chrono::milliseconds;

// What an actor would insert: who made it and its place in that actor's stream. The payload
// is move-only, so a copy would not compile and a lost move would show as null.
struct Unroll {
  int producer = 0;
  std::int64_t sequence = 0;
  std::unique_ptr<std::int64_t> payload;
};

Unroll unroll(int producer, std::int64_t sequence) {
  return {producer, sequence, std::make_unique<std::int64_t>(sequence)};
}

// Waits (yielding) until `done()` holds: for another thread to reach a blocking call, as
// its counter in stats() shows. Fails the test after 10 s instead of hanging.
template <typename Done>
void wait_for(Done&& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "condition never held";
    std::this_thread::yield();
  }
}

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

TEST(TrajectoryQueue, FifoOrderAndCounts) {
  TrajectoryQueue<Unroll> queue({.max_size = 8});
  for (int i = 0; i < 5; ++i) queue.insert(unroll(0, i));
  EXPECT_EQ(queue.sample().sequence, 0);
  std::vector<Unroll> batch = queue.sample_batch(3);
  ASSERT_EQ(batch.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(batch[i].sequence, i + 1);
    ASSERT_NE(batch[i].payload, nullptr);
    EXPECT_EQ(*batch[i].payload, i + 1);
  }
  const QueueStats s = queue.stats();
  EXPECT_EQ(s.inserted, 5);
  EXPECT_EQ(s.sampled, 4);
  EXPECT_EQ(s.size, 1);
  EXPECT_EQ(s.max_size, 8);
  EXPECT_EQ(s.inserts_waited, 0);
  EXPECT_EQ(s.samples_waited, 0);
  EXPECT_FALSE(s.closed);
}

TEST(TrajectoryQueue, RejectsBadOptionsAndArguments) {
  EXPECT_THROW(TrajectoryQueue<int>({.max_size = 0}), InvalidArgument);
  EXPECT_THROW(TrajectoryQueue<int>({.max_size = -3}), InvalidArgument);
  EXPECT_THROW(TrajectoryQueue<int>({.timeout = milliseconds(0)}), InvalidArgument);
  EXPECT_THROW(
      TrajectoryQueue<int>({.max_size = 4, .rate_limit = RateLimit{.min_size_to_sample = 5}}),
      InvalidArgument);
  const std::string bad_max =
      message_of<InvalidArgument>([] { TrajectoryQueue<int> q({.max_size = 0}); });
  EXPECT_NE(bad_max.find("max_size must be at least 1, got 0"), std::string::npos) << bad_max;

  TrajectoryQueue<int> queue({.max_size = 4});
  EXPECT_THROW(queue.sample_batch(0), InvalidArgument);
  EXPECT_THROW(queue.sample_batch(-1), InvalidArgument);
  EXPECT_THROW(queue.sample_batch(5), InvalidArgument);
  EXPECT_THROW(queue.insert(1, milliseconds(0)), InvalidArgument);
  EXPECT_THROW(queue.sample(milliseconds(-5)), InvalidArgument);
  EXPECT_EQ(queue.stats().inserted, 0);
}

TEST(RateLimiter, RejectsBadLimits) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double spi : {0.0, -1.0, 1.5, nan, inf}) {
    EXPECT_THROW(RateLimiter({.samples_per_insert = spi}), InvalidArgument) << spi;
  }
  EXPECT_THROW(RateLimiter({.min_size_to_sample = 0}), InvalidArgument);
  // 2·error_buffer >= 1 + spi.
  EXPECT_THROW(RateLimiter({.samples_per_insert = 1, .error_buffer = 0.99}), InvalidArgument);
  EXPECT_THROW(RateLimiter({.samples_per_insert = 0.5, .error_buffer = 0.7}), InvalidArgument);
  EXPECT_THROW(RateLimiter({.error_buffer = nan}), InvalidArgument);
  EXPECT_THROW(RateLimiter({.error_buffer = inf}), InvalidArgument);
  EXPECT_NO_THROW(RateLimiter({.samples_per_insert = 0.5, .error_buffer = 0.75}));
  const std::string m = message_of<InvalidArgument>([] { RateLimiter({.samples_per_insert = 2}); });
  EXPECT_NE(m.find("samples_per_insert must be in (0, 1]"), std::string::npos) << m;
}

// Reverb's window and the largest batch that cannot wait for ever.
TEST(RateLimiter, WindowAndMaxBatch) {
  const RateLimiter a({.samples_per_insert = 1, .min_size_to_sample = 1, .error_buffer = 5});
  EXPECT_DOUBLE_EQ(a.min_diff(), -4);
  EXPECT_DOUBLE_EQ(a.max_diff(), 6);
  // Inserts wait at 6 items inside (I − S + 1 > 6), so a batch of 6 can always go ahead, one
  // of 7 not.
  EXPECT_EQ(a.max_batch(), 6);
  EXPECT_TRUE(a.can_insert(5, 0));
  EXPECT_FALSE(a.can_insert(6, 0));
  EXPECT_TRUE(a.can_sample(6, 0, 6));

  const RateLimiter b({.samples_per_insert = 1, .min_size_to_sample = 10, .error_buffer = 2});
  EXPECT_EQ(b.max_batch(), 3);  // 2·2 − 1
  // Below min_size_to_sample inserts are free and samples wait.
  EXPECT_TRUE(b.can_insert(9, 0));
  EXPECT_FALSE(b.can_sample(9, 0, 1));
  EXPECT_TRUE(b.can_sample(10, 0, 1));
}

TEST(TrajectoryQueue, RefusesBatchesThatCouldWaitForEver) {
  TrajectoryQueue<int> queue(
      {.max_size = 100, .rate_limit = RateLimit{.min_size_to_sample = 1, .error_buffer = 5}});
  const std::string m = message_of<InvalidArgument>([&] { queue.sample_batch(7); });
  EXPECT_NE(m.find("at most 6"), std::string::npos) << m;
}

TEST(TrajectoryQueue, InsertTimesOutWhenFullAndKeepsTheItem) {
  TrajectoryQueue<Unroll> queue({.max_size = 2});
  queue.insert(unroll(0, 0));
  queue.insert(unroll(0, 1));
  Unroll third = unroll(0, 2);
  const auto start = std::chrono::steady_clock::now();
  try {
    queue.insert(std::move(third), milliseconds(30));
    FAIL() << "insert into a full queue returned";
  } catch (const Timeout& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("TrajectoryQueue::insert timed out after 30ms: the queue stayed full "
                     "(inserted 2, sampled 0, 2 of max_size 2 items inside)"),
              std::string::npos)
        << m;
    EXPECT_EQ(e.op(), "TrajectoryQueue::insert");
    EXPECT_EQ(e.deadline(), milliseconds(30));
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
  ASSERT_NE(third.payload, nullptr);  // not moved from
  EXPECT_EQ(*third.payload, 2);
  const QueueStats s = queue.stats();
  EXPECT_EQ(s.inserted, 2);
  EXPECT_EQ(s.size, 2);
  EXPECT_EQ(s.inserts_waited, 1);
  EXPECT_GE(s.insert_wait, milliseconds(30));
  EXPECT_EQ(s.inserts_waiting, 0);
}

TEST(TrajectoryQueue, SampleTimesOutWhenEmpty) {
  TrajectoryQueue<int> queue({.max_size = 4, .timeout = milliseconds(20)});
  const std::string empty = message_of<Timeout>([&] { queue.sample(); });  // default deadline
  EXPECT_NE(empty.find("TrajectoryQueue::sample timed out after 20ms: the queue stayed empty"),
            std::string::npos)
      << empty;
  queue.insert(1);
  queue.insert(2);
  const std::string batch = message_of<Timeout>([&] { queue.sample_batch(3, milliseconds(10)); });
  EXPECT_NE(batch.find("sample_batch timed out after 10ms: the queue never held the 3 items "
                       "asked for (inserted 2, sampled 0, 2 of max_size 4 items inside)"),
            std::string::npos)
      << batch;
  // All or nothing: the two items are still there, in order.
  EXPECT_EQ(queue.sample_batch(2), (std::vector<int>{1, 2}));
  EXPECT_EQ(queue.stats().samples_waited, 2);
}

TEST(TrajectoryQueue, SampleUnblocksInsert) {
  TrajectoryQueue<int> queue({.max_size = 1});
  queue.insert(1);
  std::thread producer([&] { queue.insert(2, milliseconds(10000)); });
  wait_for([&] { return queue.stats().inserts_waiting == 1; });
  EXPECT_EQ(queue.sample(), 1);
  producer.join();
  EXPECT_EQ(queue.sample(), 2);
  const QueueStats s = queue.stats();
  EXPECT_EQ(s.inserts_waited, 1);
  EXPECT_GT(s.insert_wait.count(), 0);
}

TEST(TrajectoryQueue, CloseReleasesWaitingSamplersAndLaterCallsFail) {
  TrajectoryQueue<int> queue({.max_size = 4});
  std::vector<std::string> errors(3);
  std::vector<std::thread> samplers;
  samplers.reserve(3);
  for (int i = 0; i < 3; ++i) {
    samplers.emplace_back([&, i] {
      errors[i] = message_of<Aborted>([&] {
        if (i == 2) {
          queue.sample_batch(2, milliseconds(10000));
        } else {
          queue.sample(milliseconds(10000));
        }
      });
    });
  }
  wait_for([&] { return queue.stats().samples_waiting == 3; });
  EXPECT_TRUE(queue.close().empty());
  for (std::thread& t : samplers) t.join();
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("the queue was closed"), std::string::npos) << e;
  }
  EXPECT_THROW(queue.insert(1), Aborted);
  EXPECT_THROW(queue.sample(), Aborted);
  EXPECT_THROW(queue.sample_batch(2), Aborted);
  EXPECT_TRUE(queue.stats().closed);
}

TEST(TrajectoryQueue, CloseReleasesWaitingInsertersAndHandsBackTheItems) {
  TrajectoryQueue<Unroll> queue({.max_size = 2});
  queue.insert(unroll(0, 0));
  queue.insert(unroll(0, 1));
  std::vector<std::thread> producers;
  producers.reserve(2);
  std::atomic<int> aborted{0};
  for (int p = 1; p <= 2; ++p) {
    producers.emplace_back([&, p] {
      Unroll u = unroll(p, 0);
      try {
        queue.insert(std::move(u), milliseconds(10000));
      } catch (const Aborted&) {
        if (u.payload != nullptr) ++aborted;  // released, and still holding its item
      }
    });
  }
  wait_for([&] { return queue.stats().inserts_waiting == 2; });
  std::vector<Unroll> left = queue.close();
  for (std::thread& t : producers) t.join();
  EXPECT_EQ(aborted.load(), 2);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].sequence, 0);
  EXPECT_EQ(left[1].sequence, 1);
  EXPECT_TRUE(queue.close().empty());  // idempotent
  const QueueStats s = queue.stats();
  EXPECT_EQ(s.left_at_close, 2);
  EXPECT_EQ(s.size, 0);
  EXPECT_EQ(s.inserts_waited, 2);
}

// spi = 0.5, min_size_to_sample 1, error buffer 1: min_diff −0.5, max_diff 1.5.
TEST(TrajectoryQueue, RatioHoldsInsertsAndSamples) {
  TrajectoryQueue<int> queue(
      {.max_size = 100,
       .rate_limit =
           RateLimit{.samples_per_insert = 0.5, .min_size_to_sample = 1, .error_buffer = 1}});
  // Inserts run ahead: the 4th would make 4·0.5 − 0 = 2 > 1.5.
  for (int i = 0; i < 3; ++i) queue.insert(int{i}, milliseconds(1000));
  const std::string ahead = message_of<Timeout>([&] { queue.insert(3, milliseconds(10)); });
  EXPECT_NE(ahead.find("inserts were held back by the samples-per-insert ratio"), std::string::npos)
      << ahead;
  EXPECT_NE(ahead.find("inserted 3, sampled 0, 3 of max_size 100"), std::string::npos) << ahead;

  // A waiting insert goes ahead once a sample is taken.
  std::thread producer([&] { queue.insert(3, milliseconds(10000)); });
  wait_for([&] { return queue.stats().inserts_waiting == 1; });
  EXPECT_EQ(queue.sample(milliseconds(1000)), 0);
  producer.join();
  queue.insert(4, milliseconds(1000));  // 5·0.5 − 1 = 1.5
  EXPECT_THROW(queue.insert(5, milliseconds(10)), Timeout);

  // Samples lag to the ratio: after 5 inserts at most 3 samples (2.5 − 3 >= −0.5), although
  // two items are still inside.
  EXPECT_EQ(queue.sample(milliseconds(1000)), 1);
  EXPECT_EQ(queue.sample(milliseconds(1000)), 2);
  const std::string behind = message_of<Timeout>([&] { queue.sample(milliseconds(10)); });
  EXPECT_NE(behind.find("samples were held back by the samples-per-insert ratio"),
            std::string::npos)
      << behind;
  EXPECT_NE(behind.find("inserted 5, sampled 3, 2 of max_size 100"), std::string::npos) << behind;
  queue.insert(5, milliseconds(1000));
  queue.insert(6, milliseconds(1000));  // 7·0.5 − 3 = 0.5: one more sample
  EXPECT_EQ(queue.sample(milliseconds(1000)), 3);
}

TEST(TrajectoryQueue, MinSizeToSample) {
  TrajectoryQueue<int> queue(
      {.max_size = 10, .rate_limit = RateLimit{.min_size_to_sample = 3, .error_buffer = 2}});
  queue.insert(0);
  queue.insert(1);
  const std::string m = message_of<Timeout>([&] { queue.sample(milliseconds(10)); });
  EXPECT_NE(m.find("min_size_to_sample: 2 items inside, a sample needs 3"), std::string::npos) << m;
  queue.insert(2);
  EXPECT_EQ(queue.sample(milliseconds(1000)), 0);
}

// With spi < 1 the queue fills up; once full, samples go ahead whatever the ratio, so a
// long run never stalls.
TEST(TrajectoryQueue, RatioBelowOneNeverStalls) {
  TrajectoryQueue<int> queue(
      {.max_size = 6,
       .rate_limit =
           RateLimit{.samples_per_insert = 0.25, .min_size_to_sample = 2, .error_buffer = 1}});
  constexpr int kItems = 2000;
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) queue.insert(int{i}, milliseconds(20000));
  });
  std::vector<int> got;
  while (static_cast<int>(got.size()) < kItems - 6)
    got.push_back(queue.sample(milliseconds(20000)));
  producer.join();
  for (int& x : queue.close()) got.push_back(x);
  ASSERT_EQ(static_cast<int>(got.size()), kItems);
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(got[i], i);
}

struct StressCase {
  int producers;
  int consumers;
  int items_per_producer;
  std::int64_t max_size;
  std::optional<RateLimit> rate_limit;
};

// Many actors insert, many learners take single items and batches; every unroll comes out
// exactly once (sampled, or handed back by close), and each consumer sees each producer's
// unrolls in the order they were inserted.
void stress(const StressCase& c) {
  TrajectoryQueue<Unroll> queue(
      {.max_size = c.max_size, .rate_limit = c.rate_limit, .timeout = milliseconds(60000)});
  std::vector<std::vector<Unroll>> received(c.consumers);
  std::vector<std::thread> threads;
  threads.reserve(c.consumers);
  for (int k = 0; k < c.consumers; ++k) {
    threads.emplace_back([&, k] {
      const std::int64_t n = k % 3 == 0 ? 1 : std::min<std::int64_t>(1 + k % 3, c.max_size);
      try {
        for (;;) {
          if (n == 1) {
            received[k].push_back(queue.sample());
          } else {
            for (Unroll& u : queue.sample_batch(n)) received[k].push_back(std::move(u));
          }
        }
      } catch (const Aborted&) {
      }
    });
  }
  std::vector<std::thread> producers;
  producers.reserve(c.producers);
  for (int p = 0; p < c.producers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < c.items_per_producer; ++i) queue.insert(unroll(p, i));
    });
  }
  for (std::thread& t : producers) t.join();
  // Let the consumers take what they can: done when every one of them waits.
  wait_for([&] { return queue.stats().samples_waiting == c.consumers; });
  std::vector<Unroll> left = queue.close();
  for (std::thread& t : threads) t.join();

  const QueueStats s = queue.stats();
  const std::int64_t total = static_cast<std::int64_t>(c.producers) * c.items_per_producer;
  EXPECT_EQ(s.inserted, total);
  EXPECT_EQ(s.sampled + s.left_at_close, total);
  EXPECT_EQ(s.left_at_close, static_cast<std::int64_t>(left.size()));
  EXPECT_EQ(s.size, 0);

  std::vector<std::vector<int>> seen(c.producers, std::vector<int>(c.items_per_producer, 0));
  std::int64_t sampled = 0;
  auto record = [&](const std::vector<Unroll>& items) {
    std::vector<std::int64_t> last(c.producers, -1);
    for (const Unroll& u : items) {
      ASSERT_GE(u.producer, 0);
      ASSERT_LT(u.producer, c.producers);
      ASSERT_NE(u.payload, nullptr);
      ASSERT_EQ(*u.payload, u.sequence);
      ASSERT_GT(u.sequence, last[u.producer]) << "producer " << u.producer << " out of order";
      last[u.producer] = u.sequence;
      ++seen[u.producer][u.sequence];
    }
  };
  for (const auto& r : received) {
    record(r);
    sampled += static_cast<std::int64_t>(r.size());
  }
  record(left);
  EXPECT_EQ(sampled, s.sampled);
  for (int p = 0; p < c.producers; ++p) {
    for (int i = 0; i < c.items_per_producer; ++i) {
      ASSERT_EQ(seen[p][i], 1) << "producer " << p << " unroll " << i;
    }
  }
}

TEST(TrajectoryQueue, ManyProducersAndConsumersExactlyOnce) {
  stress({.producers = 4, .consumers = 3, .items_per_producer = 2000, .max_size = 16});
}

TEST(TrajectoryQueue, ManyProducersAndConsumersTinyQueue) {
  stress({.producers = 5, .consumers = 4, .items_per_producer = 500, .max_size = 1});
}

TEST(TrajectoryQueue, ManyProducersAndConsumersUnderRatio) {
  stress({.producers = 4,
          .consumers = 3,
          .items_per_producer = 1000,
          .max_size = 32,
          .rate_limit =
              RateLimit{.samples_per_insert = 1, .min_size_to_sample = 4, .error_buffer = 4}});
  stress({.producers = 3,
          .consumers = 3,
          .items_per_producer = 1000,
          .max_size = 12,
          .rate_limit =
              RateLimit{.samples_per_insert = 0.5, .min_size_to_sample = 2, .error_buffer = 3}});
}

}  // namespace
}  // namespace replicator::rl
