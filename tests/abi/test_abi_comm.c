/*
 * test_abi_comm.c - qc_comm_config_init(_sized), qc_comm_create, qc_comm_create_local
 * (with and without a config), qc_comm_destroy, qc_comm_rank, qc_comm_size and
 * qc_comm_get_stats.
 */
#include "qc_abi_test.h"

typedef struct big_config {
  qc_comm_config_t config;
  unsigned char extra[64];
} big_config;

typedef struct big_stats {
  qc_stats_t stats;
  unsigned char extra[64];
} big_stats;

static void assert_config_equal(const qc_comm_config_t* got, const qc_comm_config_t* want) {
  assert_int_equal(got->transport, want->transport);
  assert_int_equal(got->mpi_comm, want->mpi_comm);
  assert_ptr_equal(got->nccl_comm, want->nccl_comm);
  assert_true(got->timeout_seconds == want->timeout_seconds);
}

/* ---- qc_comm_config_init (the macro) and qc_comm_config_init_sized ------ */

static void test_comm_config_init_null(void** state) {
  (void)state;
  QCT_INVALID(qc_comm_config_init_sized(NULL, sizeof(qc_comm_config_t)),
              "qc_comm_config_init_sized", "config");
}

static void test_comm_config_init_fills_defaults_over_garbage(void** state) {
  const qc_comm_config_t want = QC_COMM_CONFIG_INIT;
  qc_comm_config_t c;
  (void)state;
  memset(&c, 0xA5, sizeof c);  /* struct_size included: it is not read */
  QCT_OK(qc_comm_config_init(&c));
  assert_int_equal(c.struct_size, sizeof(qc_comm_config_t));
  assert_config_equal(&c, &want);
  assert_int_equal(c.transport, QC_TRANSPORT_LOCAL);
  assert_int_equal(c.mpi_comm, 0);
  assert_null(c.nccl_comm);
  assert_true(c.timeout_seconds == 300.0);
  memset(&c, 0, sizeof c);
  QCT_OK(qc_comm_config_init(&c));
  assert_config_equal(&c, &want);
}

static void test_comm_config_init_sized_too_small(void** state) {
  qc_comm_config_t c, before;
  (void)state;
  memset(&c, 0x3C, sizeof c);
  before = c;
  QCT_INVALID(qc_comm_config_init_sized(&c, 1), "qc_comm_config_init_sized", "struct_size");
  QCT_INVALID(qc_comm_config_init_sized(&c, sizeof(qc_comm_config_t) - 1),
              "qc_comm_config_init_sized", "struct_size");
  assert_memory_equal(&c, &before, sizeof c);
}

static void test_comm_config_init_sized_too_large(void** state) {
  big_config big;
  size_t i;
  (void)state;
  memset(&big, 0x5A, sizeof big);
  QCT_FAILS(qc_comm_config_init_sized(&big.config, sizeof(qc_comm_config_t) + 8),
            QC_ERROR_VERSION, "qc_comm_config_init_sized", "struct_size");
  /* with the right size, nothing past it is written */
  QCT_OK(qc_comm_config_init_sized(&big.config, sizeof(qc_comm_config_t)));
  for (i = 0; i < sizeof big.extra; ++i) assert_int_equal(big.extra[i], 0x5A);
}

/* ---- qc_comm_create ------------------------------------------------------ */

static void test_comm_create_null_arguments(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  (void)state;
  c.transport = QC_TRANSPORT_MPI;
  QCT_INVALID(qc_comm_create(NULL, &comm), "qc_comm_create", "config");
  QCT_INVALID(qc_comm_create(&c, NULL), "qc_comm_create", "comm");
}

static void test_comm_create_local_transport_points_to_create_local(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  (void)state;
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", NULL);
  /* the message points the caller to the right function */
  assert_non_null(strstr(qc_last_error(), "qc_comm_create_local"));
  assert_null(comm);
}

static void test_comm_create_mpi_unsupported_in_this_build(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  (void)state;
#ifdef QCT_HAVE_MPI
  skip(); /* the MPI transport is built; covered by the MPI tests */
#endif
  c.transport = QC_TRANSPORT_MPI;
  QCT_FAILS(qc_comm_create(&c, &comm), QC_ERROR_UNSUPPORTED, "qc_comm_create", NULL);
  assert_null(comm);
}

/* Without NCCL in the build: UNSUPPORTED. With it: the NULL communicator is
 * refused before NCCL is loaded or touched (a real one needs a GPU). */
static void test_comm_create_nccl(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  (void)state;
  c.transport = QC_TRANSPORT_NCCL;
#ifdef QCT_HAVE_NCCL
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", "nccl_comm");
#else
  QCT_FAILS(qc_comm_create(&c, &comm), QC_ERROR_UNSUPPORTED, "qc_comm_create", NULL);
#endif
  assert_null(comm);
}

static void test_comm_create_unknown_transport(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  (void)state;
  c.transport = (qc_transport_t)9;
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", "transport");
  c.transport = (qc_transport_t)-1;
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", "transport");
  assert_null(comm);
}

static void test_comm_create_bad_timeout(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  (void)state;
  /* argument checks come before "this transport is not built" */
  c.transport = QC_TRANSPORT_MPI;
  c.timeout_seconds = 0.0;
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", "timeout_seconds");
  c.timeout_seconds = -1.0;
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", "timeout_seconds");
  c.timeout_seconds = NAN;
  QCT_INVALID(qc_comm_create(&c, &comm), "qc_comm_create", "timeout_seconds");
  assert_null(comm);
}

static void test_comm_create_config_struct_size(void** state) {
  big_config big;
  qc_comm_t comm = NULL;
  const qc_comm_config_t def = QC_COMM_CONFIG_INIT;
  (void)state;
  memset(&big, 0, sizeof big);
  big.config = def;
  big.config.transport = QC_TRANSPORT_MPI;
  big.config.struct_size = 0;
  QCT_INVALID(qc_comm_create(&big.config, &comm), "qc_comm_create", "struct_size");
  big.config.struct_size = 1;
  QCT_INVALID(qc_comm_create(&big.config, &comm), "qc_comm_create", "struct_size");
  big.config.struct_size = sizeof(qc_comm_config_t) + 8;
  QCT_FAILS(qc_comm_create(&big.config, &comm), QC_ERROR_VERSION, "qc_comm_create",
            "struct_size");
  assert_null(comm);
}

/* ---- qc_comm_create_local ------------------------------------------------ */

static void test_comm_create_local_bad_nranks(void** state) {
  qc_comm_t comms[4] = {NULL, NULL, NULL, NULL};
  (void)state;
  QCT_INVALID(qc_comm_create_local(0, comms), "qc_comm_create_local", "nranks");
  QCT_INVALID(qc_comm_create_local(-1, comms), "qc_comm_create_local", "nranks");
  QCT_INVALID(qc_comm_create_local(INT32_MIN, comms), "qc_comm_create_local", "nranks");
  assert_null(comms[0]);
}

/* At most 4096 ranks; the check comes before anything is written to comms
 * (the array here has room for one). */
static void test_comm_create_local_too_many_ranks(void** state) {
  qc_comm_t comms[1] = {NULL};
  (void)state;
  QCT_INVALID(qc_comm_create_local(1 << 20, comms), "qc_comm_create_local", "nranks");
  QCT_INVALID(qc_comm_create_local(4097, comms), "qc_comm_create_local", "nranks");
  QCT_INVALID(qc_comm_create_local(INT32_MAX, comms), "qc_comm_create_local", "nranks");
  assert_null(comms[0]);
}

static void test_comm_create_local_null_comms(void** state) {
  (void)state;
  QCT_INVALID(qc_comm_create_local(2, NULL), "qc_comm_create_local", "comms");
}

static void test_comm_create_local_one_rank(void** state) {
  qc_comm_t comm = NULL;
  int rank = -1;
  int size = -1;
  (void)state;
  QCT_OK(qc_comm_create_local(1, &comm));
  assert_non_null(comm);
  QCT_OK(qc_comm_rank(comm, &rank));
  QCT_OK(qc_comm_size(comm, &size));
  assert_int_equal(rank, 0);
  assert_int_equal(size, 1);
  QCT_OK(qc_comm_destroy(comm));
}

static void test_comm_create_local_with_null_config(void** state) {
  qc_comm_t comms[2] = {NULL, NULL};
  int size = 0;
  (void)state;
  QCT_OK(qc_comm_create_local_with_config(2, NULL, comms));
  assert_non_null(comms[0]);
  assert_non_null(comms[1]);
  QCT_OK(qc_comm_size(comms[1], &size));
  assert_int_equal(size, 2);
  qct_destroy_group(2, comms);
}

static void test_comm_create_local_with_config_checks(void** state) {
  qc_comm_config_t c = QC_COMM_CONFIG_INIT;
  qc_comm_t comms[2] = {NULL, NULL};
  const char* fn = "qc_comm_create_local_with_config";
  (void)state;
  c.transport = QC_TRANSPORT_MPI;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "transport");
  c.transport = (qc_transport_t)9;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "transport");
  c.transport = QC_TRANSPORT_LOCAL;
  c.timeout_seconds = 0.0;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "timeout_seconds");
  c.timeout_seconds = -3.0;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "timeout_seconds");
  c.timeout_seconds = NAN;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "timeout_seconds");
  c.timeout_seconds = 1.0;
  c.struct_size = 0;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "struct_size");
  c.struct_size = 1;
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, comms), fn, "struct_size");
  c.struct_size = sizeof c;
  QCT_INVALID(qc_comm_create_local_with_config(0, &c, comms), fn, "nranks");
  QCT_INVALID(qc_comm_create_local_with_config(2, &c, NULL), fn, "comms");
  assert_null(comms[0]);
  assert_null(comms[1]);
}

static void test_comm_create_local_with_config_struct_size_too_large(void** state) {
  big_config big;
  qc_comm_t comms[2] = {NULL, NULL};
  const qc_comm_config_t def = QC_COMM_CONFIG_INIT;
  (void)state;
  memset(&big, 0, sizeof big);
  big.config = def;
  big.config.struct_size = sizeof(qc_comm_config_t) + 8;
  QCT_FAILS(qc_comm_create_local_with_config(2, &big.config, comms), QC_ERROR_VERSION,
            "qc_comm_create_local_with_config", "struct_size");
  assert_null(comms[0]);
}

/* ---- destroy, rank, size ------------------------------------------------- */

static void test_comm_destroy_null_is_success(void** state) {
  (void)state;
  QCT_OK(qc_comm_destroy(NULL));
}

static void test_comm_rank_size_null_arguments(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  int v = 0;
  QCT_INVALID(qc_comm_rank(NULL, &v), "qc_comm_rank", "comm");
  QCT_INVALID(qc_comm_size(NULL, &v), "qc_comm_size", "comm");
  QCT_INVALID(qc_comm_rank(comm, NULL), "qc_comm_rank", "rank");
  QCT_INVALID(qc_comm_size(comm, NULL), "qc_comm_size", "size");
}

static void test_comm_rank_size_of_three_rank_group(void** state) {
  qc_comm_t comms[3] = {NULL, NULL, NULL};
  int i;
  (void)state;
  QCT_OK(qc_comm_create_local(3, comms));
  for (i = 0; i < 3; ++i) {
    int rank = -1;
    int size = -1;
    assert_non_null(comms[i]);
    QCT_OK(qc_comm_rank(comms[i], &rank));
    QCT_OK(qc_comm_size(comms[i], &size));
    assert_int_equal(rank, i);
    assert_int_equal(size, 3);
  }
  /* each communicator is destroyed on its own, in any order */
  QCT_OK(qc_comm_destroy(comms[1]));
  QCT_OK(qc_comm_destroy(comms[0]));
  QCT_OK(qc_comm_destroy(comms[2]));
}

/* ---- qc_comm_get_async_error --------------------------------------------- */

static void test_comm_get_async_error_null_arguments(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_status_t e = QC_ERROR_INTERNAL;
  QCT_INVALID(qc_comm_get_async_error(NULL, &e), "qc_comm_get_async_error", "comm");
  QCT_INVALID(qc_comm_get_async_error(comm, NULL), "qc_comm_get_async_error", "async_error");
  assert_int_equal(e, QC_ERROR_INTERNAL); /* untouched on a failed query */
  QCT_OK(qc_comm_get_async_error(comm, &e));
  assert_int_equal(e, QC_SUCCESS);
}

static void test_comm_get_async_error_reports_the_broken_group(void** state) {
  qc_comm_t comms[2] = {NULL, NULL};
  float x[4] = {1, 2, 3, 4};
  float y[4];
  qc_status_t e = QC_ERROR_INTERNAL;
  (void)state;
  QCT_OK(qc_comm_create_local(2, comms));
  QCT_OK(qc_comm_destroy(comms[1]));
  /* the call fails on the departed peer and breaks the group for good */
  assert_int_equal(qc_allreduce(comms[0], x, y, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL),
                   QC_ERROR_TRANSPORT);
  QCT_OK(qc_comm_get_async_error(comms[0], &e));
  assert_int_equal(e, QC_ERROR_TRANSPORT);
  assert_non_null(strstr(qc_last_error(), "qc_comm_get_async_error: "));
  QCT_OK(qc_comm_destroy(comms[0]));
  /* a destroyed communicator is not live: the query itself fails */
  QCT_INVALID(qc_comm_get_async_error(comms[0], &e), "qc_comm_get_async_error", "comm");
}

/* ---- qc_comm_get_stats --------------------------------------------------- */

static void test_comm_get_stats_null_arguments(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  QCT_INVALID(qc_comm_get_stats(NULL, &s), "qc_comm_get_stats", "comm");
  QCT_INVALID(qc_comm_get_stats(comm, NULL), "qc_comm_get_stats", "stats");
}

static void test_comm_get_stats_struct_size(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  big_stats big;
  size_t i;
  memset(&big, 0x5A, sizeof big);
  big.stats.struct_size = 0;
  QCT_INVALID(qc_comm_get_stats(comm, &big.stats), "qc_comm_get_stats", "struct_size");
  big.stats.struct_size = 1;
  QCT_INVALID(qc_comm_get_stats(comm, &big.stats), "qc_comm_get_stats", "struct_size");
  /* one byte short of the first layout (up to transport_seconds) */
  big.stats.struct_size = offsetof(qc_stats_t, codec_seconds_in_flight) - 1;
  QCT_INVALID(qc_comm_get_stats(comm, &big.stats), "qc_comm_get_stats", "struct_size");
  /* the first layout: its fields written, the appended one not */
  memset(&big, 0x5A, sizeof big);
  big.stats.struct_size = offsetof(qc_stats_t, codec_seconds_in_flight);
  QCT_OK(qc_comm_get_stats(comm, &big.stats));
  assert_int_equal(big.stats.struct_size, offsetof(qc_stats_t, codec_seconds_in_flight));
  for (i = 0; i < sizeof(double); ++i) {
    assert_int_equal(((const unsigned char*)&big.stats.codec_seconds_in_flight)[i], 0x5A);
  }
  big.stats.struct_size = sizeof(qc_stats_t) + 8;
  QCT_FAILS(qc_comm_get_stats(comm, &big.stats), QC_ERROR_VERSION, "qc_comm_get_stats",
            "struct_size");
  /* the right size writes nothing past the struct */
  big.stats.struct_size = sizeof(qc_stats_t);
  QCT_OK(qc_comm_get_stats(comm, &big.stats));
  for (i = 0; i < sizeof big.extra; ++i) assert_int_equal(big.extra[i], 0x5A);
}

static void test_comm_get_stats_start_at_zero(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_stats_t s;
  memset(&s, 0x5A, sizeof s);
  s.struct_size = sizeof s;
  QCT_OK(qc_comm_get_stats(comm, &s));
  assert_int_equal(s.calls, 0);
  assert_int_equal(s.logical_bytes, 0);
  assert_int_equal(s.wire_bytes, 0);
  assert_true(s.codec_seconds == 0.0);
  assert_true(s.transport_seconds == 0.0);
}

int main(void) {
#define WITH_COMM(t) cmocka_unit_test_setup_teardown(t, qct_setup_comm1, qct_teardown_comm)
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_comm_config_init_null),
      cmocka_unit_test(test_comm_config_init_fills_defaults_over_garbage),
      cmocka_unit_test(test_comm_config_init_sized_too_small),
      cmocka_unit_test(test_comm_config_init_sized_too_large),
      cmocka_unit_test(test_comm_create_null_arguments),
      cmocka_unit_test(test_comm_create_local_transport_points_to_create_local),
      cmocka_unit_test(test_comm_create_mpi_unsupported_in_this_build),
      cmocka_unit_test(test_comm_create_nccl),
      cmocka_unit_test(test_comm_create_unknown_transport),
      cmocka_unit_test(test_comm_create_bad_timeout),
      cmocka_unit_test(test_comm_create_config_struct_size),
      cmocka_unit_test(test_comm_create_local_bad_nranks),
      cmocka_unit_test(test_comm_create_local_too_many_ranks),
      cmocka_unit_test(test_comm_create_local_null_comms),
      cmocka_unit_test(test_comm_create_local_one_rank),
      cmocka_unit_test(test_comm_create_local_with_null_config),
      cmocka_unit_test(test_comm_create_local_with_config_checks),
      cmocka_unit_test(test_comm_create_local_with_config_struct_size_too_large),
      cmocka_unit_test(test_comm_destroy_null_is_success),
      WITH_COMM(test_comm_rank_size_null_arguments),
      cmocka_unit_test(test_comm_rank_size_of_three_rank_group),
      WITH_COMM(test_comm_get_async_error_null_arguments),
      cmocka_unit_test(test_comm_get_async_error_reports_the_broken_group),
      WITH_COMM(test_comm_get_stats_null_arguments),
      WITH_COMM(test_comm_get_stats_struct_size),
      WITH_COMM(test_comm_get_stats_start_at_zero),
  };
#undef WITH_COMM
  return cmocka_run_group_tests_name("abi_comm", tests, NULL, NULL);
}
