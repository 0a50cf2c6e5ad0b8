// Handles (src/core/handle_table.h): a destroyed handle stays invalid even
// when malloc gives its memory to a new object, and a destroy never frees an
// object under a call running on another thread (issue 28, items 2 and 3).
// Internal API only to see when a call holds its handle (leases()).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/api_checks.h"
#include "core/communicator.h"
#include "core/error_buffer.h"
#include "qc.h"

namespace {

using Clock = std::chrono::steady_clock;

bool last_error_has(const char* text) {
  return std::string(qc_last_error()).find(text) != std::string::npos;
}

// Waits (at most 10 s) until `count` calls hold a lease on `handle`.
template <typename T>
bool wait_for_leases(qc::HandleTable<T>& table, const void* handle, int count) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (table.leases(qc::handle_value(handle)) < count) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

qc_comm_config_t config_with_timeout(double seconds) {
  qc_comm_config_t config = QC_COMM_CONFIG_INIT;
  config.timeout_seconds = seconds;
  return config;
}

// ---------------------------------------------------------------------------
// Stale handles (item 3): one create/destroy after another makes malloc hand
// out the same memory again, which revived the old handle when handles were
// addresses. Without ASan, whose quarantine delays reuse and hides this.
// ---------------------------------------------------------------------------
TEST(StaleHandle, ADestroyedCommunicatorStaysInvalidAfterItsMemoryIsReused) {
  for (int i = 0; i < 100; ++i) {
    qc_comm_t stale = nullptr;
    ASSERT_EQ(qc_comm_create_local(1, &stale), QC_SUCCESS);
    ASSERT_EQ(qc_comm_destroy(stale), QC_SUCCESS);
    qc_comm_t fresh = nullptr;
    ASSERT_EQ(qc_comm_create_local(1, &fresh), QC_SUCCESS);
    int rank = -1;
    EXPECT_EQ(qc_comm_rank(stale, &rank), QC_ERROR_INVALID_ARGUMENT) << "round " << i;
    EXPECT_EQ(qc_comm_destroy(stale), QC_ERROR_INVALID_ARGUMENT) << "round " << i;
    EXPECT_TRUE(last_error_has("destroyed")) << qc_last_error();
    // The stale destroy left the new communicator alone.
    EXPECT_EQ(qc_comm_rank(fresh, &rank), QC_SUCCESS) << "round " << i;
    ASSERT_EQ(qc_comm_destroy(fresh), QC_SUCCESS) << "round " << i;
  }
}

TEST(StaleHandle, ADestroyedErrorBufferStaysInvalidAfterItsMemoryIsReused) {
  for (int i = 0; i < 100; ++i) {
    qc_error_buffer_t stale = nullptr;
    ASSERT_EQ(qc_error_buffer_create(nullptr, 8, &stale), QC_SUCCESS);
    ASSERT_EQ(qc_error_buffer_destroy(stale), QC_SUCCESS);
    qc_error_buffer_t fresh = nullptr;
    ASSERT_EQ(qc_error_buffer_create(nullptr, 8, &fresh), QC_SUCCESS);
    EXPECT_EQ(qc_error_buffer_reset(stale), QC_ERROR_INVALID_ARGUMENT) << "round " << i;
    EXPECT_EQ(qc_error_buffer_destroy(stale), QC_ERROR_INVALID_ARGUMENT) << "round " << i;
    EXPECT_TRUE(last_error_has("destroyed")) << qc_last_error();
    double norm = -1;
    EXPECT_EQ(qc_error_buffer_norm(fresh, &norm), QC_SUCCESS) << "round " << i;
    ASSERT_EQ(qc_error_buffer_destroy(fresh), QC_SUCCESS) << "round " << i;
  }
}

// The second case: a stale handle drove a collective on a new group.
TEST(StaleHandle, AStaleHandleCannotJoinANewGroupsCollective) {
  qc_comm_t old_group[2] = {nullptr, nullptr};
  ASSERT_EQ(qc_comm_create_local(2, old_group), QC_SUCCESS);
  for (qc_comm_t c : old_group) ASSERT_EQ(qc_comm_destroy(c), QC_SUCCESS);
  qc_comm_t group[2] = {nullptr, nullptr};
  ASSERT_EQ(qc_comm_create_local(2, group), QC_SUCCESS);

  std::vector<float> x(64, 1.0f), y(64, 0.0f);
  EXPECT_EQ(qc_allreduce(old_group[0], x.data(), y.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                         nullptr, nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  // The new group is untouched: both of its ranks still sum.
  std::vector<float> y1(64, 0.0f);
  qc_status_t s0 = QC_ERROR_INTERNAL, s1 = QC_ERROR_INTERNAL;
  std::thread peer([&] {
    s1 = qc_allreduce(group[1], x.data(), y1.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                      nullptr, nullptr, nullptr);
  });
  s0 = qc_allreduce(group[0], x.data(), y.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                    nullptr, nullptr);
  peer.join();
  EXPECT_EQ(s0, QC_SUCCESS);
  EXPECT_EQ(s1, QC_SUCCESS);
  EXPECT_EQ(y[0], 2.0f);
  for (qc_comm_t c : group) EXPECT_EQ(qc_comm_destroy(c), QC_SUCCESS);
}

// Handles of one kind are not taken for the other.
TEST(StaleHandle, AHandleOfTheOtherKindIsRefused) {
  qc_comm_t comm = nullptr;
  ASSERT_EQ(qc_comm_create_local(1, &comm), QC_SUCCESS);
  qc_error_buffer_t eb = nullptr;
  ASSERT_EQ(qc_error_buffer_create(comm, 4, &eb), QC_SUCCESS);
  int rank = -1;
  EXPECT_EQ(qc_comm_rank(reinterpret_cast<qc_comm_t>(eb), &rank), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_error_buffer_reset(reinterpret_cast<qc_error_buffer_t>(comm)),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_error_buffer_destroy(eb), QC_SUCCESS);
  EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
}

// ---------------------------------------------------------------------------
// Destroy while another thread is in a call (item 2): a watchdog's move.
// ---------------------------------------------------------------------------
enum class BlockedCall { kCompressedAllreduce, kUncompressedAllreduce, kAlltoall };

class DestroyWhileBlocked : public ::testing::TestWithParam<BlockedCall> {};

// Rank 0 calls on a thread; rank 1 never does. The main thread destroys
// rank 0's communicator once the call holds it: destroy succeeds, and the
// blocked call ends with TRANSPORT (the destroy), not a use-after-free and
// not the 30 s timeout.
TEST_P(DestroyWhileBlocked, TheCallFailsWithTransportAndTheDestroyWaitsForIt) {
  const qc_comm_config_t config = config_with_timeout(30.0);
  qc_comm_t group[2] = {nullptr, nullptr};
  ASSERT_EQ(qc_comm_create_local_with_config(2, &config, group), QC_SUCCESS);
  qc_policy_t policy = QC_POLICY_INIT;
  policy.codec = GetParam() == BlockedCall::kUncompressedAllreduce ? QC_CODEC_NONE
                                                                    : QC_CODEC_MINMAX;
  policy.min_compress_bytes = 0;
  ASSERT_EQ(qc_comm_set_layer_policy(group[0], "*", &policy), QC_SUCCESS);

  const size_t count = 4096;
  std::vector<float> x(2 * count, 1.0f), y(2 * count, 0.0f);
  qc_status_t blocked = QC_ERROR_INTERNAL;
  std::string message;
  std::thread caller([&] {
    blocked = GetParam() == BlockedCall::kAlltoall
                  ? qc_alltoall(group[0], x.data(), y.data(), count, QC_DTYPE_FLOAT32, nullptr,
                                nullptr)
                  : qc_allreduce(group[0], x.data(), y.data(), count, QC_DTYPE_FLOAT32,
                                 QC_OP_SUM, nullptr, nullptr, nullptr);
    message = qc_last_error();
  });
  ASSERT_TRUE(wait_for_leases(qc::live_communicators(), group[0], 1));
  EXPECT_EQ(qc_comm_destroy(group[0]), QC_SUCCESS);
  caller.join();  // done once destroy returned: destroy waited for the call
  EXPECT_EQ(blocked, QC_ERROR_TRANSPORT) << message;
  EXPECT_NE(message.find("destroyed"), std::string::npos) << message;
  // The handle is dead, and the peer's group is broken (not left to time out).
  int rank = -1;
  EXPECT_EQ(qc_comm_rank(group[0], &rank), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_allreduce(group[1], x.data(), y.data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                         nullptr, nullptr, nullptr),
            QC_ERROR_TRANSPORT);
  EXPECT_EQ(qc_comm_destroy(group[1]), QC_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(Local, DestroyWhileBlocked,
                         ::testing::Values(BlockedCall::kCompressedAllreduce,
                                           BlockedCall::kUncompressedAllreduce,
                                           BlockedCall::kAlltoall));

// Two threads destroy one handle at once: exactly one succeeds.
TEST(DestroyRace, OneOfTwoConcurrentDestroysSucceeds) {
  for (int i = 0; i < 50; ++i) {
    qc_comm_t comm = nullptr;
    ASSERT_EQ(qc_comm_create_local(1, &comm), QC_SUCCESS);
    qc_status_t a = QC_ERROR_INTERNAL, b = QC_ERROR_INTERNAL;
    std::thread other([&] { b = qc_comm_destroy(comm); });
    a = qc_comm_destroy(comm);
    other.join();
    EXPECT_EQ((a == QC_SUCCESS) + (b == QC_SUCCESS), 1) << qc_status_string(a) << " "
                                                         << qc_status_string(b);
    EXPECT_EQ((a == QC_ERROR_INVALID_ARGUMENT) + (b == QC_ERROR_INVALID_ARGUMENT), 1);
  }
}

// An error buffer in use by a blocked collective: its destroy is refused
// (the call may wait until its timeout), and so is a second call that would
// use it at the same time; once the call has returned, the destroy succeeds.
TEST(ErrorBufferInUse, DestroyAndConcurrentUseAreRefusedUntilTheCallReturns) {
  const qc_comm_config_t config = config_with_timeout(30.0);
  qc_comm_t group[2] = {nullptr, nullptr};
  ASSERT_EQ(qc_comm_create_local_with_config(2, &config, group), QC_SUCCESS);
  qc_policy_t policy = QC_POLICY_INIT;
  policy.codec = QC_CODEC_MINMAX;
  policy.error_feedback = 1;
  policy.min_compress_bytes = 0;
  ASSERT_EQ(qc_comm_set_layer_policy(group[0], "*", &policy), QC_SUCCESS);
  const size_t count = 1024;
  qc_error_buffer_t eb = nullptr;
  ASSERT_EQ(qc_error_buffer_create(group[0], count, &eb), QC_SUCCESS);

  std::vector<float> x(count, 1.0f), y(count, 0.0f);
  qc_status_t blocked = QC_ERROR_INTERNAL;
  std::thread caller([&] {
    blocked = qc_allreduce(group[0], x.data(), y.data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                           nullptr, eb, nullptr);
  });
  ASSERT_TRUE(wait_for_leases(qc::live_error_buffers(), eb, 1));
  EXPECT_EQ(qc_error_buffer_destroy(eb), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_has("in use")) << qc_last_error();
  double norm = 0;
  EXPECT_EQ(qc_error_buffer_norm(eb, &norm), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_has("in use")) << qc_last_error();

  ASSERT_EQ(qc_comm_destroy(group[0]), QC_SUCCESS);  // ends the blocked call
  caller.join();
  EXPECT_EQ(blocked, QC_ERROR_TRANSPORT);
  EXPECT_EQ(qc_error_buffer_norm(eb, &norm), QC_SUCCESS);
  EXPECT_EQ(norm, 0.0) << "a failed call leaves the residuals as they were";
  EXPECT_EQ(qc_error_buffer_destroy(eb), QC_SUCCESS);
  EXPECT_EQ(qc_comm_destroy(group[1]), QC_SUCCESS);
}

// A query on another thread (qc_comm_get_stats, as a monitor would) does not
// break the group when the communicator is destroyed beside it.
TEST(DestroyWhileQueried, QueriesAreWaitedForNotAborted) {
  qc_comm_t group[2] = {nullptr, nullptr};
  ASSERT_EQ(qc_comm_create_local(2, group), QC_SUCCESS);
  auto& table = qc::live_communicators();
  {
    // A query's lease, held as a stats call holds it.
    qc::CommLease query = table.lease(qc::handle_value(group[0]), /*collective=*/false);
    ASSERT_TRUE(query);
    qc_status_t destroyed = QC_ERROR_INTERNAL;
    std::thread destroyer([&] { destroyed = qc_comm_destroy(group[0]); });
    // The destroy waits for the lease; meanwhile the handle is already dead.
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    int rank = -1;
    while (qc_comm_rank(group[0], &rank) == QC_SUCCESS && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(qc_comm_rank(group[0], &rank), QC_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(query->transport->failure().code(), QC_SUCCESS) << "a query is not interrupted";
    query = qc::CommLease();
    destroyer.join();
    EXPECT_EQ(destroyed, QC_SUCCESS);
  }
  qc_status_t healthy = QC_ERROR_INTERNAL;
  EXPECT_EQ(qc_comm_get_async_error(group[1], &healthy), QC_SUCCESS);
  EXPECT_EQ(healthy, QC_SUCCESS);
  EXPECT_EQ(qc_comm_destroy(group[1]), QC_SUCCESS);
}

}  // namespace
