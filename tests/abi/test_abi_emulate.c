/*
 * test_abi_emulate.c - qc_emulate_allreduce and qc_emulate_alltoall: N virtual
 * ranks in one call.
 */
#include "qc_abi_test.h"

#define F32 QC_DTYPE_FLOAT32
enum { R = 4, COUNT = 50 };

/* R ranks of COUNT floats; small integers, so fp32 sums are exact */
typedef struct ranks {
  float send[R][COUNT];
  float recv[R][COUNT];
  const void* sendp[R];
  void* recvp[R];
} ranks;

static void ranks_init(ranks* r) {
  int i;
  int k;
  for (i = 0; i < R; ++i) {
    for (k = 0; k < COUNT; ++k) {
      r->send[i][k] = (float)((k * 7 + i * 13) % 41 - 20);
      r->recv[i][k] = -12345.0f;
    }
    r->sendp[i] = r->send[i];
    r->recvp[i] = r->recv[i];
  }
}

static float exact_sum(const ranks* r, int k) {
  float s = 0.0f;
  int i;
  for (i = 0; i < R; ++i) s += r->send[i][k];
  return s;
}

/* ---- qc_emulate_allreduce: arguments -------------------------------------- */

static void test_emulate_allreduce_bad_nranks(void** state) {
  ranks r;
  const qc_policy_t p = QC_POLICY_INIT;
  const char* fn = "qc_emulate_allreduce";
  (void)state;
  ranks_init(&r);
  QCT_INVALID(qc_emulate_allreduce(0, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL),
              fn, "nranks");
  QCT_INVALID(qc_emulate_allreduce(-1, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL),
              fn, "nranks");
}

/* More ranks than a local group may have (4096): refused before any thread is
 * started. The arrays are valid for every entry, so nothing else is wrong. */
static void test_emulate_allreduce_too_many_ranks(void** state) {
  const int n = 1 << 20;
  float one[1] = {1.0f};
  float out[1];
  const void** send = (const void**)malloc((size_t)n * sizeof(void*));
  void** recv = (void**)malloc((size_t)n * sizeof(void*));
  const qc_policy_t p = QC_POLICY_INIT;
  int i;
  (void)state;
  assert_non_null(send);
  assert_non_null(recv);
  for (i = 0; i < n; ++i) {
    send[i] = one;
    recv[i] = out;
  }
  QCT_INVALID(
      qc_emulate_allreduce(n, send, (void* const*)recv, 1, F32, QC_OP_SUM, NULL, 0, &p, NULL),
      "qc_emulate_allreduce", "nranks");
  free(send);
  free(recv);
}

static void test_emulate_allreduce_null_arrays(void** state) {
  ranks r;
  const qc_policy_t p = QC_POLICY_INIT;
  const char* fn = "qc_emulate_allreduce";
  (void)state;
  ranks_init(&r);
  QCT_INVALID(qc_emulate_allreduce(R, NULL, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL), fn,
              "sendbufs");
  QCT_INVALID(qc_emulate_allreduce(R, r.sendp, NULL, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL), fn,
              "recvbufs");
}

static void test_emulate_allreduce_null_entry(void** state) {
  ranks r;
  const qc_policy_t p = QC_POLICY_INIT;
  const char* fn = "qc_emulate_allreduce";
  (void)state;
  ranks_init(&r);
  r.sendp[2] = NULL;
  QCT_INVALID(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL),
              fn, "sendbufs");
  ranks_init(&r);
  r.recvp[3] = NULL;
  QCT_INVALID(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL),
              fn, "recvbufs");
  /* with count 0, NULL entries are fine */
  QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, 0, F32, QC_OP_SUM, NULL, 0, &p, NULL));
}

static void test_emulate_allreduce_bad_count_dtype_op(void** state) {
  ranks r;
  const qc_policy_t p = QC_POLICY_INIT;
  const char* fn = "qc_emulate_allreduce";
  (void)state;
  ranks_init(&r);
  QCT_INVALID(
      qc_emulate_allreduce(R, r.sendp, r.recvp, SIZE_MAX / 2, F32, QC_OP_SUM, NULL, 0, &p, NULL),
      fn, "count");
  QCT_INVALID(
      qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, (qc_dtype_t)7, QC_OP_SUM, NULL, 0, &p, NULL),
      fn, "dtype");
  QCT_INVALID(
      qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, (qc_reduce_op_t)5, NULL, 0, &p, NULL),
      fn, "op");
}

static void test_emulate_allreduce_null_policy(void** state) {
  ranks r;
  (void)state;
  ranks_init(&r);
  QCT_INVALID(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, NULL, NULL),
              "qc_emulate_allreduce", "policy");
}

static qc_status_t call_emulate_allreduce(qc_policy_t* p, void* ctx) {
  ranks* r = (ranks*)ctx;
  return qc_emulate_allreduce(R, r->sendp, r->recvp, COUNT, F32, QC_OP_SUM, NULL, 0, p, NULL);
}

static void test_emulate_allreduce_policy_struct_size(void** state) {
  ranks r;
  (void)state;
  ranks_init(&r);
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_emulate_allreduce", call_emulate_allreduce, &r);
}

static void test_emulate_allreduce_invalid_policy_fields(void** state) {
  ranks r;
  (void)state;
  ranks_init(&r);
  QCT_CHECK_BAD_POLICY_FIELDS("qc_emulate_allreduce", call_emulate_allreduce, &r);
}

static void test_emulate_allreduce_wrong_error_buffer_count(void** state) {
  ranks r;
  qc_policy_t p = QC_POLICY_INIT;
  qc_error_buffer_t ebs[R] = {NULL, NULL, NULL, NULL};
  int i;
  (void)state;
  ranks_init(&r);
  p.error_feedback = 1;
  for (i = 0; i < R; ++i) QCT_OK(qc_error_buffer_create(NULL, i == 1 ? COUNT + 1 : COUNT, &ebs[i]));
  qct_outcome o;
  o = qct_capture(
      qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, ebs));
  for (i = 0; i < R; ++i) QCT_OK(qc_error_buffer_destroy(ebs[i]));
  QCT_CHECK_OUTCOME(o, QC_ERROR_MISMATCH, "qc_emulate_allreduce", "error_buffers");
}

/* An emulation buffer binds to its virtual rank on first use: handing the
 * buffers to other ranks (or another rank count) later is a mismatch. */
static void test_emulate_allreduce_error_buffers_bind_to_rank(void** state) {
  ranks r;
  qc_policy_t p = QC_POLICY_INIT;
  qc_error_buffer_t ebs[R] = {NULL, NULL, NULL, NULL};
  qc_error_buffer_t swapped[R];
  qct_outcome o;
  int i;
  (void)state;
  ranks_init(&r);
  p.codec = QC_CODEC_MINMAX;
  p.bits = 2;
  p.error_feedback = 1;
  for (i = 0; i < R; ++i) QCT_OK(qc_error_buffer_create(NULL, COUNT, &ebs[i]));
  QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, ebs));
  for (i = 0; i < R; ++i) swapped[i] = ebs[(i + 1) % R];
  o = qct_capture(
      qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, swapped));
  QCT_CHECK_OUTCOME(o, QC_ERROR_MISMATCH, "qc_emulate_allreduce", "belongs to rank 1");
  o = qct_capture(
      qc_emulate_allreduce(R - 1, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, ebs));
  QCT_CHECK_OUTCOME(o, QC_ERROR_MISMATCH, "qc_emulate_allreduce", "error_buffers");
  for (i = 0; i < R; ++i) QCT_OK(qc_error_buffer_destroy(ebs[i]));
}

/* Algorithm native needs a global codec. */
static void test_emulate_allreduce_unsupported(void** state) {
  ranks r;
  qc_policy_t p;
  (void)state;
  ranks_init(&r);
  p = (qc_policy_t)QC_POLICY_INIT;
  p.algorithm = QC_ALGO_NATIVE;
  QCT_FAILS(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL),
            QC_ERROR_UNSUPPORTED, "qc_emulate_allreduce", NULL);
}

/* ---- qc_emulate_allreduce: results ---------------------------------------- */

static void test_emulate_allreduce_sum_is_exact(void** state) {
  ranks r;
  const qc_policy_t p = QC_POLICY_INIT;
  int i;
  int k;
  (void)state;
  ranks_init(&r);
  QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL));
  for (i = 0; i < R; ++i)
    for (k = 0; k < COUNT; ++k) assert_true(r.recv[i][k] == exact_sum(&r, k));
}

static void test_emulate_allreduce_avg(void** state) {
  ranks r;
  const qc_policy_t p = QC_POLICY_INIT;
  int i;
  int k;
  (void)state;
  ranks_init(&r);
  QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_AVG, NULL, 0, &p, NULL));
  for (i = 0; i < R; ++i)
    for (k = 0; k < COUNT; ++k) assert_true(r.recv[i][k] == exact_sum(&r, k) * 0.25f);
}

static void test_emulate_allreduce_every_algorithm(void** state) {
  ranks r;
  qc_policy_t p = QC_POLICY_INIT;
  static const qc_algorithm_t algos[] = {QC_ALGO_AUTO, QC_ALGO_RING,
                                         QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE};
  size_t a;
  int i;
  int k;
  (void)state;
  for (a = 0; a < sizeof algos / sizeof algos[0]; ++a) {
    ranks_init(&r);
    p.algorithm = algos[a];
    QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, NULL));
    for (i = 0; i < R; ++i) {
      for (k = 0; k < COUNT; ++k) {
        if (r.recv[i][k] != exact_sum(&r, k)) {
          print_error("algorithm %d rank %d element %d: got %g, expected %g\n", (int)algos[a],
                      i, k, (double)r.recv[i][k], (double)exact_sum(&r, k));
          fail();
        }
      }
    }
  }
}

/* "error_buffers is NULL or an array of nranks error buffers (entries may be
 * NULL)" */
static void test_emulate_allreduce_error_buffers(void** state) {
  ranks r;
  qc_policy_t p = QC_POLICY_INIT;
  qc_error_buffer_t ebs[R] = {NULL, NULL, NULL, NULL};
  int i;
  int k;
  (void)state;
  ranks_init(&r);
  p.error_feedback = 1;
  QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, ebs));
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &ebs[0]));
  QCT_OK(qc_error_buffer_create(NULL, COUNT, &ebs[2]));
  QCT_OK(qc_emulate_allreduce(R, r.sendp, r.recvp, COUNT, F32, QC_OP_SUM, NULL, 0, &p, ebs));
  for (i = 0; i < R; ++i)
    for (k = 0; k < COUNT; ++k) assert_true(r.recv[i][k] == exact_sum(&r, k));
  for (i = 0; i < R; ++i) {
    double norm = -1.0;
    if (ebs[i] == NULL) continue;
    QCT_OK(qc_error_buffer_norm(ebs[i], &norm));
    assert_true(norm == 0.0); /* codec none is lossless */
    QCT_OK(qc_error_buffer_destroy(ebs[i]));
  }
}

static void test_emulate_allreduce_one_rank(void** state) {
  float x[3] = {1.0f, -2.0f, 0.5f};
  float y[3] = {0};
  const void* s[1];
  void* d[1];
  const qc_policy_t p = QC_POLICY_INIT;
  (void)state;
  s[0] = x;
  d[0] = y;
  QCT_OK(qc_emulate_allreduce(1, s, d, 3, F32, QC_OP_AVG, NULL, 0, &p, NULL));
  assert_memory_equal(y, x, sizeof x);
}

/* ---- qc_emulate_alltoall -------------------------------------------------- */

enum { A = 3, CPR = 5 };

typedef struct a2a {
  float send[A][A * CPR];
  float recv[A][A * CPR];
  const void* sendp[A];
  void* recvp[A];
} a2a;

static void a2a_init(a2a* t) {
  int i;
  int j;
  for (i = 0; i < A; ++i) {
    for (j = 0; j < A * CPR; ++j) {
      t->send[i][j] = (float)(100 * i + j);
      t->recv[i][j] = -1.0f;
    }
    t->sendp[i] = t->send[i];
    t->recvp[i] = t->recv[i];
  }
}

static void test_emulate_alltoall_exchanges_blocks(void** state) {
  a2a t;
  const qc_policy_t p = QC_POLICY_INIT;
  int i;
  int j;
  (void)state;
  a2a_init(&t);
  QCT_OK(qc_emulate_alltoall(A, t.sendp, t.recvp, CPR, F32, NULL, 0, &p));
  /* recv[i] block j == send[j] block i */
  for (i = 0; i < A; ++i)
    for (j = 0; j < A; ++j)
      assert_memory_equal(&t.recv[i][j * CPR], &t.send[j][i * CPR], CPR * sizeof(float));
}

static void test_emulate_alltoall_arguments(void** state) {
  a2a t;
  const qc_policy_t p = QC_POLICY_INIT;
  const char* fn = "qc_emulate_alltoall";
  (void)state;
  a2a_init(&t);
  QCT_INVALID(qc_emulate_alltoall(0, t.sendp, t.recvp, CPR, F32, NULL, 0, &p), fn, "nranks");
  QCT_INVALID(qc_emulate_alltoall(-3, t.sendp, t.recvp, CPR, F32, NULL, 0, &p), fn, "nranks");
  QCT_INVALID(qc_emulate_alltoall(A, NULL, t.recvp, CPR, F32, NULL, 0, &p), fn, "sendbufs");
  QCT_INVALID(qc_emulate_alltoall(A, t.sendp, NULL, CPR, F32, NULL, 0, &p), fn, "recvbufs");
  QCT_INVALID(qc_emulate_alltoall(A, t.sendp, t.recvp, CPR, (qc_dtype_t)7, NULL, 0, &p), fn,
              "dtype");
  QCT_INVALID(qc_emulate_alltoall(A, t.sendp, t.recvp, CPR, F32, NULL, 0, NULL), fn, "policy");
  /* count_per_rank x 4 bytes fits, x nranks does not */
  QCT_INVALID(qc_emulate_alltoall(A, t.sendp, t.recvp, SIZE_MAX / 8, F32, NULL, 0, &p), fn,
              "count_per_rank");
  t.sendp[1] = NULL;
  QCT_INVALID(qc_emulate_alltoall(A, t.sendp, t.recvp, CPR, F32, NULL, 0, &p), fn, "sendbufs");
  a2a_init(&t);
  t.recvp[0] = NULL;
  QCT_INVALID(qc_emulate_alltoall(A, t.sendp, t.recvp, CPR, F32, NULL, 0, &p), fn, "recvbufs");
}

static qc_status_t call_emulate_alltoall(qc_policy_t* p, void* ctx) {
  a2a* t = (a2a*)ctx;
  return qc_emulate_alltoall(A, t->sendp, t->recvp, CPR, F32, NULL, 0, p);
}

static void test_emulate_alltoall_policy_struct_size(void** state) {
  a2a t;
  (void)state;
  a2a_init(&t);
  QCT_CHECK_POLICY_STRUCT_SIZES("qc_emulate_alltoall", call_emulate_alltoall, &t);
}

static void test_emulate_alltoall_invalid_policy_fields(void** state) {
  a2a t;
  (void)state;
  a2a_init(&t);
  QCT_CHECK_BAD_POLICY_FIELDS("qc_emulate_alltoall", call_emulate_alltoall, &t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_emulate_allreduce_bad_nranks),
      cmocka_unit_test(test_emulate_allreduce_too_many_ranks),
      cmocka_unit_test(test_emulate_allreduce_null_arrays),
      cmocka_unit_test(test_emulate_allreduce_null_entry),
      cmocka_unit_test(test_emulate_allreduce_bad_count_dtype_op),
      cmocka_unit_test(test_emulate_allreduce_null_policy),
      cmocka_unit_test(test_emulate_allreduce_policy_struct_size),
      cmocka_unit_test(test_emulate_allreduce_invalid_policy_fields),
      cmocka_unit_test(test_emulate_allreduce_wrong_error_buffer_count),
      cmocka_unit_test(test_emulate_allreduce_error_buffers_bind_to_rank),
      cmocka_unit_test(test_emulate_allreduce_unsupported),
      cmocka_unit_test(test_emulate_allreduce_sum_is_exact),
      cmocka_unit_test(test_emulate_allreduce_avg),
      cmocka_unit_test(test_emulate_allreduce_every_algorithm),
      cmocka_unit_test(test_emulate_allreduce_error_buffers),
      cmocka_unit_test(test_emulate_allreduce_one_rank),
      cmocka_unit_test(test_emulate_alltoall_exchanges_blocks),
      cmocka_unit_test(test_emulate_alltoall_arguments),
      cmocka_unit_test(test_emulate_alltoall_policy_struct_size),
      cmocka_unit_test(test_emulate_alltoall_invalid_policy_fields),
  };
  return cmocka_run_group_tests_name("abi_emulate", tests, NULL, NULL);
}
