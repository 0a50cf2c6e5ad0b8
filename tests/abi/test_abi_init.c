/*
 * test_abi_init.c - every struct of qc.h filled the way a C user writes it
 * (issue 30): on the stack with garbage in it, or memset to 0, then its init
 * call; the result is the defaults of the caller's layout, and fields set
 * afterwards are honoured by the calls that take the struct.
 */
#define QC_EXPERIMENTAL_API /* tests qc_comm_adapt_policies and its structs */
#include "qc_abi_test.h"

/* The two ways a struct starts out in C code. */
static void fill_garbage(void* p, size_t n) { memset(p, 0xA5, n); }
static void fill_zero(void* p, size_t n) { memset(p, 0, n); }
typedef void (*fill_fn)(void* p, size_t n);
static const fill_fn k_fills[] = {fill_garbage, fill_zero};
#define QCT_NFILLS (sizeof k_fills / sizeof k_fills[0])

static void test_policy_naive_use(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  size_t f;
  for (f = 0; f < QCT_NFILLS; ++f) {
    qc_policy_t p, back;
    k_fills[f](&p, sizeof p);
    QCT_OK(qc_policy_init(&p));
    p.codec = QC_CODEC_MINMAX;
    p.min_compress_bytes = 0;  /* a field of the appended layout: must be honoured */
    QCT_OK(qc_comm_set_layer_policy(comm, "naive", &p));
    k_fills[f](&back, sizeof back);
    QCT_OK(qc_policy_init(&back));
    QCT_OK(qc_comm_get_layer_policy(comm, "naive", &back));
    assert_int_equal(back.codec, QC_CODEC_MINMAX);
    assert_int_equal(back.min_compress_bytes, 0);
    assert_int_equal(back.bits, 4);  /* the defaults under what was set */
    assert_int_equal(back.bucket_size, 128);
  }
}

static void test_comm_config_naive_use(void** state) {
  size_t f;
  (void)state;
  for (f = 0; f < QCT_NFILLS; ++f) {
    qc_comm_config_t c;
    qc_comm_t comms[2] = {NULL, NULL};
    float x[8] = {0}, y[8];
    struct timespec t0, t1;
    double waited;
    k_fills[f](&c, sizeof c);
    QCT_OK(qc_comm_config_init(&c));
    assert_int_equal(c.transport, QC_TRANSPORT_LOCAL);
    c.timeout_seconds = 0.2;
    QCT_OK(qc_comm_create_local_with_config(2, &c, comms));
    /* rank 1 never joins: rank 0 gives up after the timeout set above */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    QCT_STATUS(qc_allreduce(comms[0], x, y, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL),
               QC_ERROR_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_true(waited < 100.0);  /* not the default 300 s */
    QCT_OK(qc_comm_destroy(comms[0]));
    QCT_OK(qc_comm_destroy(comms[1]));
  }
}

static void test_stats_naive_use(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[16] = {1}, y[16];
  size_t f;
  QCT_OK(qc_allreduce(comm, x, y, 16, QC_DTYPE_FLOAT32, QC_OP_SUM, "s", NULL, NULL));
  for (f = 0; f < QCT_NFILLS; ++f) {
    qc_stats_t s;
    qc_layer_stats_t l;
    k_fills[f](&s, sizeof s);
    QCT_OK(qc_stats_init(&s));
    assert_int_equal(s.struct_size, sizeof(qc_stats_t));
    assert_int_equal(s.calls, 0);
    assert_true(s.codec_seconds_in_flight == 0.0);
    QCT_OK(qc_comm_get_stats(comm, &s));
    assert_true(s.calls >= 1);
    k_fills[f](&l, sizeof l);
    QCT_OK(qc_layer_stats_init(&l));
    assert_int_equal(l.calls, 0);
    QCT_OK(qc_comm_get_layer_stats(comm, "s", &l));
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.count, 16);
  }
}

static void test_adapt_structs_naive_use(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  const qc_adapt_config_t want = QC_ADAPT_CONFIG_INIT;
  size_t f;
  for (f = 0; f < QCT_NFILLS; ++f) {
    qc_adapt_config_t c;
    qc_adapt_report_t r;
    k_fills[f](&c, sizeof c);
    QCT_OK(qc_adapt_config_init(&c));
    assert_int_equal(c.struct_size, want.struct_size);  /* fields: it has padding */
    assert_int_equal(c.method, want.method);
    assert_true(c.alpha == want.alpha);
    assert_int_equal(c.num_allowed, want.num_allowed);
    assert_memory_equal(c.allowed_bits, want.allowed_bits, sizeof c.allowed_bits);
    c.method = QC_ADAPT_LINEAR;
    c.alpha = 3.0;
    k_fills[f](&r, sizeof r);
    QCT_OK(qc_adapt_report_init(&r));
    assert_int_equal(r.struct_size, sizeof(qc_adapt_report_t));
    assert_int_equal(r.layers, 0);
    QCT_OK(qc_comm_adapt_policies(comm, &c, &r));
    assert_true(r.error_budget >= 0.0);
  }
}

/* The initializer macros give what the init calls give. */
static void test_macros_equal_init_calls(void** state) {
  (void)state;
  {
    const qc_stats_t m = QC_STATS_INIT;
    qc_stats_t s;
    fill_garbage(&s, sizeof s);
    QCT_OK(qc_stats_init(&s));
    assert_memory_equal(&s, &m, sizeof s);
  }
  {
    const qc_layer_stats_t m = QC_LAYER_STATS_INIT;
    qc_layer_stats_t s;
    fill_garbage(&s, sizeof s);
    QCT_OK(qc_layer_stats_init(&s));
    assert_memory_equal(&s, &m, sizeof s);
  }
  {
    const qc_adapt_report_t m = QC_ADAPT_REPORT_INIT;
    qc_adapt_report_t s;
    fill_garbage(&s, sizeof s);
    QCT_OK(qc_adapt_report_init(&s));
    assert_memory_equal(&s, &m, sizeof s);
  }
  {
    const qc_comm_config_t m = QC_COMM_CONFIG_INIT;
    qc_comm_config_t s;
    fill_garbage(&s, sizeof s);
    QCT_OK(qc_comm_config_init(&s));
    assert_int_equal(s.struct_size, m.struct_size);
    assert_int_equal(s.transport, m.transport);
    assert_true(s.timeout_seconds == m.timeout_seconds);
  }
}

/* Every init refuses sizes it cannot serve, naming the argument. */
static void test_sized_inits_refuse_bad_sizes(void** state) {
  qc_stats_t s;
  qc_layer_stats_t l;
  qc_adapt_config_t c;
  qc_adapt_report_t r;
  (void)state;
  QCT_INVALID(qc_stats_init_sized(&s, 8), "qc_stats_init_sized", "struct_size");
  QCT_FAILS(qc_stats_init_sized(&s, sizeof s + 8), QC_ERROR_VERSION, "qc_stats_init_sized",
            "struct_size");
  QCT_INVALID(qc_stats_init_sized(NULL, sizeof s), "qc_stats_init_sized", "stats");
  QCT_INVALID(qc_layer_stats_init_sized(&l, 8), "qc_layer_stats_init_sized", "struct_size");
  QCT_INVALID(qc_adapt_config_init_sized(&c, 8), "qc_adapt_config_init_sized", "struct_size");
  QCT_INVALID(qc_adapt_report_init_sized(&r, 8), "qc_adapt_report_init_sized", "struct_size");
  QCT_INVALID(qc_adapt_report_init_sized(NULL, sizeof r), "qc_adapt_report_init_sized", "report");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_policy_naive_use, qct_setup_comm1, qct_teardown_comm),
      cmocka_unit_test(test_comm_config_naive_use),
      cmocka_unit_test_setup_teardown(test_stats_naive_use, qct_setup_comm1, qct_teardown_comm),
      cmocka_unit_test_setup_teardown(test_adapt_structs_naive_use, qct_setup_comm1,
                                      qct_teardown_comm),
      cmocka_unit_test(test_macros_equal_init_calls),
      cmocka_unit_test(test_sized_inits_refuse_bad_sizes),
  };
  return cmocka_run_group_tests_name("abi_init", tests, NULL, NULL);
}
