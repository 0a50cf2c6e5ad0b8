// The progress thread of non-blocking calls (core/request_queue.h): its
// transport waits are background waits (core/transports/backoff.h), which
// leave the cores to the caller's own work; a task run inline on the
// caller's thread (QC_PROGRESS_THREAD=0) waits as a blocking call does.
// Internal API: links the internal objects.
#include <gtest/gtest.h>

#include "core/request_queue.h"
#include "core/transports/backoff.h"

namespace {

TEST(RequestQueue, ProgressThreadWaitsInTheBackground) {
  qc::RequestQueue queue;
  bool on_thread = false, inline_run = true;
  auto threaded = queue.start(
      [&] {
        on_thread = qc::tls_background_waits;
        return qc::Status::ok();
      },
      /*inline_run=*/false);
  ASSERT_TRUE(threaded->wait().is_ok());
  // The request completes before its thread is idle; an inline start
  // behind a running thread would be queued there (and waited for).
  queue.drain();
  auto inlined = queue.start(
      [&] {
        inline_run = qc::tls_background_waits;
        return qc::Status::ok();
      },
      /*inline_run=*/true);
  ASSERT_TRUE(inlined->wait().is_ok());
  EXPECT_TRUE(on_thread) << "the progress thread polls as a blocking call would";
  EXPECT_FALSE(inline_run) << "an inline request is the caller's own wait";
  EXPECT_FALSE(qc::tls_background_waits) << "the caller's thread was changed";
}

}  // namespace
