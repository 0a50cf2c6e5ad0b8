/*
 * test_abi_basics.c - versions, status names, qc_last_error() and the pinned
 * enum values of the C ABI.
 */
#include "qc_abi_test.h"

/* qc.h's experimental section stays out of a program that did not ask for
 * it (this file does not define QC_EXPERIMENTAL_API). */
#if defined(QC_ADAPT_CONFIG_INIT) || defined(qc_adapt_config_init)
#error "qc.h exposes its experimental section without QC_EXPERIMENTAL_API"
#endif

/* ---- versions ------------------------------------------------------------ */

static void test_version_number_matches_header(void** state) {
  (void)state;
  assert_int_equal(qc_version_number(), QC_VERSION_NUMBER);
  assert_int_equal(QC_VERSION_NUMBER,
                   QC_VERSION_MAJOR * 10000 + QC_VERSION_MINOR * 100 + QC_VERSION_PATCH);
}

static void test_version_string_matches_header(void** state) {
  char want[64];
  const char* got = qc_version_string();
  (void)state;
  snprintf(want, sizeof want, "%d.%d.%d", QC_VERSION_MAJOR, QC_VERSION_MINOR,
           QC_VERSION_PATCH);
  assert_non_null(got);
  assert_string_equal(got, want);
  /* a static string: the same pointer every time */
  assert_ptr_equal(qc_version_string(), got);
}

/* ---- statuses ------------------------------------------------------------ */

typedef struct status_entry {
  qc_status_t status;
  int value;
  const char* name;
} status_entry;

/* Built from the X-macro itself, so it follows the header. */
static const status_entry k_statuses[] = {
#define QCT_STATUS_ENTRY_(name, value, text) {QC_##name, value, "QC_" #name},
    QC_STATUS_MAP(QCT_STATUS_ENTRY_)
#undef QCT_STATUS_ENTRY_
};
#define N_STATUSES (sizeof k_statuses / sizeof k_statuses[0])

static void test_status_values_are_pinned(void** state) {
  size_t i;
  (void)state;
  for (i = 0; i < N_STATUSES; ++i) {
    assert_int_equal((int)k_statuses[i].status, k_statuses[i].value);
  }
  /* The DESIGN.md contract, written out so a renumbering in the map shows. */
  assert_int_equal(QC_SUCCESS, 0);
  assert_int_equal(QC_ERROR_INVALID_ARGUMENT, 1);
  assert_int_equal(QC_ERROR_OUT_OF_MEMORY, 2);
  assert_int_equal(QC_ERROR_UNSUPPORTED, 3);
  assert_int_equal(QC_ERROR_TRANSPORT, 4);
  assert_int_equal(QC_ERROR_MISMATCH, 5);
  assert_int_equal(QC_ERROR_TIMEOUT, 6);
  assert_int_equal(QC_ERROR_CORRUPT_DATA, 7);
  assert_int_equal(QC_ERROR_VERSION, 8);
  assert_int_equal(QC_ERROR_INTERNAL, 9);
}

static void test_status_string_names_every_status(void** state) {
  size_t i;
  (void)state;
  for (i = 0; i < N_STATUSES; ++i) {
    const char* got = qc_status_string(k_statuses[i].status);
    assert_non_null(got);
    assert_string_equal(got, k_statuses[i].name);
  }
  assert_string_equal(qc_status_string(QC_ERROR_TIMEOUT), "QC_ERROR_TIMEOUT");
}

static void test_status_string_of_unknown_value(void** state) {
  int max_value = 0;
  size_t i;
  (void)state;
  for (i = 0; i < N_STATUSES; ++i) {
    if (k_statuses[i].value > max_value) max_value = k_statuses[i].value;
  }
  assert_string_equal(qc_status_string((qc_status_t)12345), "QC_UNKNOWN_STATUS");
  assert_string_equal(qc_status_string((qc_status_t)-1), "QC_UNKNOWN_STATUS");
  assert_string_equal(qc_status_string((qc_status_t)(max_value + 1)), "QC_UNKNOWN_STATUS");
  assert_string_equal(qc_status_string((qc_status_t)INT32_MIN), "QC_UNKNOWN_STATUS");
}

/* ---- other enums: values are pinned forever ------------------------------ */

static void test_enum_values_are_pinned(void** state) {
  (void)state;
  assert_int_equal(QC_DTYPE_FLOAT32, 0);
  assert_int_equal(QC_DTYPE_FLOAT16, 1);
  assert_int_equal(QC_DTYPE_BFLOAT16, 2);
  assert_int_equal(QC_OP_SUM, 0);
  assert_int_equal(QC_OP_AVG, 1);
  assert_int_equal(QC_CODEC_NONE, 0);
  assert_int_equal(QC_CODEC_FP16, 1);
  assert_int_equal(QC_CODEC_BF16, 2);
  assert_int_equal(QC_CODEC_MINMAX, 3);
  assert_int_equal(QC_CODEC_QSGD, 4);
  assert_int_equal(QC_CODEC_GLOBAL_LINEAR, 5);
  assert_int_equal(QC_CODEC_GLOBAL_EXP, 6);
  assert_int_equal(QC_CODEC_ONEBIT, 7);
  assert_int_equal(QC_CODEC_TOPK, 8);
  assert_int_equal(QC_ALGO_AUTO, 0);
  assert_int_equal(QC_ALGO_RING, 1);
  assert_int_equal(QC_ALGO_RECURSIVE_DOUBLING, 2);
  assert_int_equal(QC_ALGO_SRA, 3);
  assert_int_equal(QC_ALGO_TREE, 4);
  assert_int_equal(QC_ALGO_NATIVE, 5);
  assert_int_equal(QC_ROUND_NEAREST_EVEN, 0);
  assert_int_equal(QC_ROUND_STOCHASTIC, 1);
  assert_int_equal(QC_TRANSPORT_LOCAL, 0);
  assert_int_equal(QC_TRANSPORT_MPI, 1);
  assert_int_equal(QC_TRANSPORT_NCCL, 2);
  /* struct_size comes first in every growable struct */
  assert_int_equal(offsetof(qc_policy_t, struct_size), 0);
  assert_int_equal(offsetof(qc_comm_config_t, struct_size), 0);
  assert_int_equal(offsetof(qc_stats_t, struct_size), 0);
}

/* ---- qc_last_error ------------------------------------------------------- */

typedef struct thread_probe {
  int message_was_null;
  char message_before[QCT_MSG_MAX];
  qc_status_t status;
  char message_after[QCT_MSG_MAX];
} thread_probe;

static void* probe_fresh_thread(void* p) {
  thread_probe* probe = (thread_probe*)p;
  const char* msg = qc_last_error();
  probe->message_was_null = (msg == NULL);
  snprintf(probe->message_before, sizeof probe->message_before, "%s", msg ? msg : "");
  /* a failure of its own: qc_policy_init_sized(NULL, ...) */
  probe->status = qc_policy_init_sized(NULL, sizeof(qc_policy_t));
  qct_copy_last_error(probe->message_after, sizeof probe->message_after);
  return NULL;
}

static void test_last_error_is_empty_on_fresh_thread(void** state) {
  pthread_t t;
  thread_probe probe;
  (void)state;
  memset(&probe, 0, sizeof probe);
  assert_int_equal(pthread_create(&t, NULL, probe_fresh_thread, &probe), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_false(probe.message_was_null);
  assert_string_equal(probe.message_before, "");
}

static void test_last_error_names_function_and_argument(void** state) {
  float x[4] = {0};
  (void)state;
  QCT_INVALID(qc_allreduce(NULL, x, x, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "comm");
  QCT_INVALID(qc_policy_init_sized(NULL, sizeof(qc_policy_t)), "qc_policy_init_sized", "policy");
  {
    int size = 0;
    QCT_INVALID(qc_comm_size(NULL, &size), "qc_comm_size", "comm");
  }
}

static void test_last_error_is_thread_local(void** state) {
  pthread_t t;
  thread_probe probe;
  char before[QCT_MSG_MAX];
  char after[QCT_MSG_MAX];
  int rank = 0;
  (void)state;

  /* this thread fails in qc_comm_rank */
  QCT_INVALID(qc_comm_rank(NULL, &rank), "qc_comm_rank", "comm");
  qct_copy_last_error(before, sizeof before);

  /* another thread fails in qc_policy_init_sized and sees only its own message */
  memset(&probe, 0, sizeof probe);
  assert_int_equal(pthread_create(&t, NULL, probe_fresh_thread, &probe), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_string_equal(probe.message_before, "");
  assert_int_equal(probe.status, QC_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(probe.message_after, "qc_policy_init_sized"));
  assert_null(strstr(probe.message_after, "qc_comm_rank"));

  /* ...and this thread's message is unchanged */
  qct_copy_last_error(after, sizeof after);
  assert_string_equal(after, before);
  assert_non_null(strstr(after, "qc_comm_rank"));
}

/* "the calling thread's most recent failed qc call": successful calls do
 * not clear it. */
static void test_last_error_survives_successful_calls(void** state) {
  qc_policy_t p = QC_POLICY_INIT;
  int rank = 0;
  (void)state;
  QCT_INVALID(qc_comm_rank(NULL, &rank), "qc_comm_rank", "comm");
  QCT_OK(qc_policy_init(&p));
  (void)qc_version_string();
  (void)qc_status_string(QC_SUCCESS);
  qct_check_message("qc_comm_rank", "comm", __FILE__, __LINE__);
}

static void test_last_error_is_replaced_by_next_failure(void** state) {
  int rank = 0;
  (void)state;
  QCT_INVALID(qc_comm_rank(NULL, &rank), "qc_comm_rank", "comm");
  QCT_INVALID(qc_policy_init_sized(NULL, sizeof(qc_policy_t)), "qc_policy_init_sized", "policy");
  assert_null(strstr(qc_last_error(), "qc_comm_rank"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version_number_matches_header),
      cmocka_unit_test(test_version_string_matches_header),
      cmocka_unit_test(test_status_values_are_pinned),
      cmocka_unit_test(test_status_string_names_every_status),
      cmocka_unit_test(test_status_string_of_unknown_value),
      cmocka_unit_test(test_enum_values_are_pinned),
      cmocka_unit_test(test_last_error_is_empty_on_fresh_thread),
      cmocka_unit_test(test_last_error_names_function_and_argument),
      cmocka_unit_test(test_last_error_is_thread_local),
      cmocka_unit_test(test_last_error_survives_successful_calls),
      cmocka_unit_test(test_last_error_is_replaced_by_next_failure),
  };
  return cmocka_run_group_tests_name("abi_basics", tests, NULL, NULL);
}
