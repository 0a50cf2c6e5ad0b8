/*
 * test_struct_layout.c - the layout of every public struct of qc.h against
 * the values recorded for the v0 ABI on x86-64 Linux (LP64).
 *
 * A program compiled against an older qc.h passes these structs by pointer
 * with its own struct_size; the library reads fields by offset. So a field
 * may only ever be appended (struct_size tells the library how far the
 * caller's struct reaches); moving, resizing or removing one breaks every
 * program built before. This test fails on any such change. Appending a
 * field changes sizeof: record the new size here, and the new field's
 * offset, in the same commit (tools/test_gen_bindings.py checks that every
 * field of qc.h is listed below).
 */
#include <stddef.h>
#include <stdio.h>

#define QC_EXPERIMENTAL_API /* the experimental structs have pinned layouts too */
#include "qc.h"

static int failures = 0;

static void expect(const char* what, size_t got, size_t recorded) {
  if (got != recorded) {
    fprintf(stderr, "FAIL: %s is %zu, recorded %zu\n", what, got, recorded);
    ++failures;
  }
}

#define SIZE(T, n) expect("sizeof(" #T ")", sizeof(T), (n))
#define FIELD(T, f, n) expect("offsetof(" #T ", " #f ")", offsetof(T, f), (n))

int main(void) {
#if !(defined(__x86_64__) && defined(__LP64__))
  printf("SKIP: the recorded layout is that of x86-64 LP64\n");
  return 77;
#else
  SIZE(qc_policy_t, 72);
  FIELD(qc_policy_t, struct_size, 0);
  FIELD(qc_policy_t, codec, 8);
  FIELD(qc_policy_t, bits, 12);
  FIELD(qc_policy_t, bucket_size, 16);
  FIELD(qc_policy_t, rounding, 20);
  FIELD(qc_policy_t, algorithm, 24);
  FIELD(qc_policy_t, error_feedback, 28);
  FIELD(qc_policy_t, group_size, 32);
  FIELD(qc_policy_t, topk_ratio, 36);
  FIELD(qc_policy_t, scale_update_period, 40);
  FIELD(qc_policy_t, seed, 48);
  FIELD(qc_policy_t, min_compress_bytes, 56);
  FIELD(qc_policy_t, scale, 64);

  SIZE(qc_comm_config_t, 40);
  FIELD(qc_comm_config_t, struct_size, 0);
  FIELD(qc_comm_config_t, transport, 8);
  FIELD(qc_comm_config_t, mpi_comm, 16);
  FIELD(qc_comm_config_t, nccl_comm, 24);
  FIELD(qc_comm_config_t, timeout_seconds, 32);

  SIZE(qc_transport_callbacks_t, 96);
  FIELD(qc_transport_callbacks_t, struct_size, 0);
  FIELD(qc_transport_callbacks_t, context, 8);
  FIELD(qc_transport_callbacks_t, rank, 16);
  FIELD(qc_transport_callbacks_t, size, 20);
  FIELD(qc_transport_callbacks_t, any_thread, 24);
  FIELD(qc_transport_callbacks_t, post_send, 32);
  FIELD(qc_transport_callbacks_t, post_recv, 40);
  FIELD(qc_transport_callbacks_t, test, 48);
  FIELD(qc_transport_callbacks_t, wait, 56);
  FIELD(qc_transport_callbacks_t, cancel, 64);
  FIELD(qc_transport_callbacks_t, abort, 72);
  FIELD(qc_transport_callbacks_t, error_message, 80);
  FIELD(qc_transport_callbacks_t, destroy, 88);

  SIZE(qc_stats_t, 56);
  FIELD(qc_stats_t, struct_size, 0);
  FIELD(qc_stats_t, calls, 8);
  FIELD(qc_stats_t, logical_bytes, 16);
  FIELD(qc_stats_t, wire_bytes, 24);
  FIELD(qc_stats_t, codec_seconds, 32);
  FIELD(qc_stats_t, transport_seconds, 40);
  FIELD(qc_stats_t, codec_seconds_in_flight, 48);

  SIZE(qc_layer_stats_t, 72);
  FIELD(qc_layer_stats_t, struct_size, 0);
  FIELD(qc_layer_stats_t, calls, 8);
  FIELD(qc_layer_stats_t, count, 16);
  FIELD(qc_layer_stats_t, logical_bytes, 24);
  FIELD(qc_layer_stats_t, wire_bytes, 32);
  FIELD(qc_layer_stats_t, codec_seconds, 40);
  FIELD(qc_layer_stats_t, transport_seconds, 48);
  FIELD(qc_layer_stats_t, last_rel_error, 56);
  FIELD(qc_layer_stats_t, mean_sq_norm, 64);

  SIZE(qc_adapt_config_t, 64);
  FIELD(qc_adapt_config_t, struct_size, 0);
  FIELD(qc_adapt_config_t, method, 8);
  FIELD(qc_adapt_config_t, alpha, 16);
  FIELD(qc_adapt_config_t, num_allowed, 24);
  FIELD(qc_adapt_config_t, allowed_bits, 28);

  SIZE(qc_adapt_report_t, 56);
  FIELD(qc_adapt_report_t, struct_size, 0);
  FIELD(qc_adapt_report_t, layers, 8);
  FIELD(qc_adapt_report_t, predicted_error, 16);
  FIELD(qc_adapt_report_t, error_budget, 24);
  FIELD(qc_adapt_report_t, e4, 32);
  FIELD(qc_adapt_report_t, predicted_bytes, 40);
  FIELD(qc_adapt_report_t, bytes_at_4, 48);

  /* Enums are passed as int: C++ callers see `: int` (QC_ENUM_BASE). */
  SIZE(qc_status_t, 4);
  SIZE(qc_codec_t, 4);
  SIZE(qc_dtype_t, 4);

  if (failures == 0) printf("OK: every public struct has its recorded layout\n");
  return failures == 0 ? 0 : 1;
#endif
}
