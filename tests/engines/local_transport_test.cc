// The local transport: the Transport of a one-process job (no peers, messages to itself).

#include "src/engines/local/local_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "replicator/config.h"
#include "replicator/errors.h"
#include "src/engines/make_transport.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(1); }

TEST(LocalTransport, IsAJobOfOneProcess) {
  auto t = make_local_transport({.lanes = 3});
  EXPECT_EQ(t->name(), "local");
  EXPECT_EQ(t->rank(), 0);
  EXPECT_EQ(t->size(), 1);
  EXPECT_EQ(t->num_lanes(), 3);
  EXPECT_EQ(t->traits().shared_step_bytes, 0u);
  EXPECT_THROW(make_local_transport({.lanes = 0}), InvalidArgument);
}

TEST(LocalTransport, TheEngineOfAConfigOfOneProcess) {
  Config config;
  config.engine = Engine::kLocal;
  config.local_replicas = 2;
  auto t = make_transport(config);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "local");
  EXPECT_EQ(t->num_lanes(), 2);
}

TEST(LocalTransport, MessagesToItselfLandInOrder) {
  auto t = make_local_transport({.lanes = 2});
  const std::vector<std::uint32_t> a = {1, 2, 3};
  const std::uint32_t b = 7;
  std::vector<std::uint32_t> got_a(3, 0);
  std::uint32_t got_b = 0;
  const SendOp sends[] = {{0, a.data(), 12}, {0, &b, 4}};
  const RecvOp recvs[] = {{0, got_a.data(), 12}, {0, &got_b, 4}};
  const Transport::Ticket first = t->post(1, sends, recvs);
  EXPECT_EQ(got_a, a);  // copied by the post itself
  EXPECT_EQ(got_b, 7u);
  t->wait(1, first, soon());
  EXPECT_EQ(t->post(1, {}, {}), first + 1);
  EXPECT_EQ(t->post(0, {}, {}), 1u);  // each lane counts its own
  t->exchange(0, {}, {}, soon());
}

TEST(LocalTransport, BadCallsAreInvalidArgument) {
  auto t = make_local_transport({.lanes = 1});
  std::uint32_t x = 0;
  const SendOp to_peer[] = {{1, &x, 4}};
  const RecvOp from_peer[] = {{1, &x, 4}};
  EXPECT_THROW(t->post(0, to_peer, {}), InvalidArgument);
  EXPECT_THROW(t->post(0, {}, from_peer), InvalidArgument);
  EXPECT_THROW(t->post(1, {}, {}), InvalidArgument);
  EXPECT_THROW(t->wait(-1, 0, soon()), InvalidArgument);
  const SendOp one[] = {{0, &x, 4}};
  const RecvOp shorter[] = {{0, &x, 2}};
  EXPECT_THROW(t->post(0, one, {}), InvalidArgument);       // nobody receives it
  EXPECT_THROW(t->post(0, {}, shorter), InvalidArgument);   // nobody sends it
  EXPECT_THROW(t->post(0, one, shorter), InvalidArgument);  // sizes differ
}

TEST(LocalTransport, AbortPoisonsEveryLaterCall) {
  auto t = make_local_transport({.lanes = 2});
  const Transport::Ticket ticket = t->post(0, {}, {});
  t->abort("step failed", 5);
  try {
    t->wait(0, ticket, soon());
    ADD_FAILURE() << "no error";
  } catch (const Aborted& e) {
    EXPECT_NE(std::string(e.what()).find("step failed"), std::string::npos) << e.what();
    EXPECT_EQ(e.cause_replica(), 5);
  }
  EXPECT_THROW(t->post(1, {}, {}), Aborted);
}

}  // namespace
}  // namespace replicator::detail
