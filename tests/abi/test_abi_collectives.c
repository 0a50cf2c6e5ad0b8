/*
 * test_abi_collectives.c - qc_allreduce and qc_alltoall through the C ABI:
 * argument checks, 1-rank behaviour, local groups driven by threads,
 * timeouts, mismatches and stats.
 */
#include "qc_abi_test.h"

#define F32 QC_DTYPE_FLOAT32

/* ======================================================================== */
/* qc_allreduce: arguments                                                  */
/* ======================================================================== */

static void test_allreduce_null_comm(void** state) {
  float x[4] = {1, 2, 3, 4};
  float y[4];
  (void)state;
  QCT_INVALID(qc_allreduce(NULL, x, y, 4, F32, QC_OP_SUM, NULL, NULL, NULL), "qc_allreduce",
              "comm");
}

static void test_allreduce_null_buffers_with_count(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {1, 2, 3, 4};
  float y[4];
  QCT_INVALID(qc_allreduce(comm, NULL, y, 4, F32, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "sendbuf");
  QCT_INVALID(qc_allreduce(comm, x, NULL, 4, F32, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "recvbuf");
}

static void test_allreduce_null_buffers_with_zero_count(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  QCT_OK(qc_allreduce(comm, NULL, NULL, 0, F32, QC_OP_SUM, NULL, NULL, NULL));
}

static void test_allreduce_count_overflow(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  QCT_INVALID(qc_allreduce(comm, x, y, SIZE_MAX / 2, F32, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "count");
  QCT_INVALID(qc_allreduce(comm, x, y, SIZE_MAX / 4 + 1, F32, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "count");
  QCT_INVALID(qc_allreduce(comm, x, y, SIZE_MAX, F32, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "count");
  QCT_INVALID(qc_allreduce(comm, x, y, SIZE_MAX / 2 + 1, QC_DTYPE_FLOAT16, QC_OP_SUM, NULL,
                           NULL, NULL),
              "qc_allreduce", "count");
}

static void test_allreduce_unknown_dtype(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  QCT_INVALID(qc_allreduce(comm, x, y, 4, (qc_dtype_t)7, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "dtype");
  QCT_INVALID(qc_allreduce(comm, x, y, 4, (qc_dtype_t)-1, QC_OP_SUM, NULL, NULL, NULL),
              "qc_allreduce", "dtype");
}

static void test_allreduce_unknown_op(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  QCT_INVALID(qc_allreduce(comm, x, y, 4, F32, (qc_reduce_op_t)5, NULL, NULL, NULL),
              "qc_allreduce", "op");
  QCT_INVALID(qc_allreduce(comm, x, y, 4, F32, (qc_reduce_op_t)-1, NULL, NULL, NULL),
              "qc_allreduce", "op");
}

static void test_allreduce_stream_unsupported(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {1, 2, 3, 4};
  float y[4];
  int not_a_stream = 0;
  QCT_FAILS(qc_allreduce(comm, x, y, 4, F32, QC_OP_SUM, NULL, NULL, &not_a_stream),
            QC_ERROR_UNSUPPORTED, "qc_allreduce", "stream");
}

static void check_overlap_message(void) {
  const char* msg = qc_last_error();
  assert_non_null(msg);
  assert_non_null(strstr(msg, "qc_allreduce"));
  assert_true(strstr(msg, "sendbuf") != NULL || strstr(msg, "recvbuf") != NULL);
}

static void test_allreduce_partial_overlap(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float buf[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  QCT_STATUS(qc_allreduce(comm, buf, buf + 1, 8, F32, QC_OP_SUM, NULL, NULL, NULL),
             QC_ERROR_INVALID_ARGUMENT);
  check_overlap_message();
  QCT_STATUS(qc_allreduce(comm, buf + 1, buf, 8, F32, QC_OP_SUM, NULL, NULL, NULL),
             QC_ERROR_INVALID_ARGUMENT);
  check_overlap_message();
  /* the last element of one overlaps the first of the other */
  {
    float big[15] = {0};
    QCT_STATUS(qc_allreduce(comm, big, big + 7, 8, F32, QC_OP_SUM, NULL, NULL, NULL),
               QC_ERROR_INVALID_ARGUMENT);
    check_overlap_message();
  }
  /* adjacent, not overlapping: fine */
  {
    float adj[16];
    int i;
    for (i = 0; i < 8; ++i) adj[i] = (float)i;
    QCT_OK(qc_allreduce(comm, adj, adj + 8, 8, F32, QC_OP_SUM, NULL, NULL, NULL));
    for (i = 0; i < 8; ++i) assert_true(adj[8 + i] == (float)i);
  }
}

static void test_allreduce_in_place(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float buf[5] = {1.5f, -2.0f, 3.25f, 1e-3f, 1e6f};
  const float want[5] = {1.5f, -2.0f, 3.25f, 1e-3f, 1e6f};
  QCT_OK(qc_allreduce(comm, buf, buf, 5, F32, QC_OP_SUM, NULL, NULL, NULL));
  assert_memory_equal(buf, want, sizeof want);
}

/* ======================================================================== */
/* qc_allreduce on one rank                                                 */
/* ======================================================================== */

static void test_allreduce_one_rank_sum_copies(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[7] = {0.0f, 1.0f, -1.0f, 3.14159f, 1e-30f, -6.5e20f, 12345.678f};
  float y[7];
  memset(y, 0xFF, sizeof y);
  QCT_OK(qc_allreduce(comm, x, y, 7, F32, QC_OP_SUM, "fc1.weight", NULL, NULL));
  assert_memory_equal(y, x, sizeof x);
}

static void test_allreduce_one_rank_avg_equals_input(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[7] = {0.0f, 1.0f, -1.0f, 3.14159f, 1e-30f, -6.5e20f, 12345.678f};
  float y[7];
  memset(y, 0xFF, sizeof y);
  QCT_OK(qc_allreduce(comm, x, y, 7, F32, QC_OP_AVG, NULL, NULL, NULL));
  assert_memory_equal(y, x, sizeof x);
}

static void test_allreduce_one_rank_half_types_copy(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  /* 1, 2, -0.5, 65504 (max), 2^-14 (min normal), 0 */
  const uint16_t h[6] = {0x3C00u, 0x4000u, 0xB800u, 0x7BFFu, 0x0400u, 0x0000u};
  /* 1, 2, -0.5, 3.0e38-ish, 2^-126, 0 */
  const uint16_t b[6] = {0x3F80u, 0x4000u, 0xBF00u, 0x7F00u, 0x0080u, 0x0000u};
  uint16_t out[6];
  memset(out, 0xFF, sizeof out);
  QCT_OK(qc_allreduce(comm, h, out, 6, QC_DTYPE_FLOAT16, QC_OP_SUM, NULL, NULL, NULL));
  assert_memory_equal(out, h, sizeof h);
  memset(out, 0xFF, sizeof out);
  QCT_OK(qc_allreduce(comm, b, out, 6, QC_DTYPE_BFLOAT16, QC_OP_SUM, NULL, NULL, NULL));
  assert_memory_equal(out, b, sizeof b);
}

static void test_allreduce_zero_count_with_buffers(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[1] = {1.0f};
  float y[1] = {2.0f};
  QCT_OK(qc_allreduce(comm, x, y, 0, F32, QC_OP_SUM, NULL, NULL, NULL));
  assert_true(y[0] == 2.0f);
}

static void set_feedback_policy(qc_comm_t comm, const char* pattern) {
  qc_policy_t p = QC_POLICY_INIT;
  p.error_feedback = 1;
  QCT_OK(qc_comm_set_layer_policy(comm, pattern, &p));
}

static void test_allreduce_error_buffer_wrong_count(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_error_buffer_t eb = NULL;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float y[8];
  set_feedback_policy(comm, "ef");
  qct_outcome o;
  QCT_OK(qc_error_buffer_create(comm, 16, &eb));
  o = qct_capture(qc_allreduce(comm, x, y, 8, F32, QC_OP_SUM, "ef", eb, NULL));
  QCT_OK(qc_error_buffer_destroy(eb));
  QCT_CHECK_OUTCOME(o, QC_ERROR_MISMATCH, "qc_allreduce", "error_buffer");
}

/* An error buffer belongs to a rank of a group of some size: rank 1 of a
 * pair cannot lend its residuals to the rank of a one-rank group. Another
 * communicator with the same rank and size is fine (a rebuilt group). */
static void test_allreduce_error_buffer_of_another_rank(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_comm_t pair[2] = {NULL, NULL};
  qc_comm_t single = NULL;
  qc_error_buffer_t eb = NULL;
  qc_error_buffer_t eb_single = NULL;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float y[8];
  qct_outcome o;
  set_feedback_policy(comm, "ef");
  QCT_OK(qc_comm_create_local(2, pair));
  QCT_OK(qc_error_buffer_create(pair[1], 8, &eb));
  o = qct_capture(qc_allreduce(comm, x, y, 8, F32, QC_OP_SUM, "ef", eb, NULL));
  QCT_OK(qc_error_buffer_destroy(eb));
  QCT_OK(qc_comm_destroy(pair[0]));
  QCT_OK(qc_comm_destroy(pair[1]));
  QCT_CHECK_OUTCOME(o, QC_ERROR_MISMATCH, "qc_allreduce", "rank 1 of a group of 2");
  /* The MISMATCH broke comm (qc.h), so the rebuilt group is a new one. */
  QCT_STATUS(qc_allreduce(comm, x, y, 8, F32, QC_OP_SUM, "ef", NULL, NULL), QC_ERROR_MISMATCH);
  QCT_OK(qc_comm_create_local(1, &single));
  QCT_OK(qc_error_buffer_create(single, 8, &eb_single));
  QCT_OK(qc_comm_destroy(single));
  QCT_OK(qc_comm_create_local(1, &single));
  set_feedback_policy(single, "ef");
  o = qct_capture(qc_allreduce(single, x, y, 8, F32, QC_OP_SUM, "ef", eb_single, NULL));
  QCT_OK(qc_error_buffer_destroy(eb_single));
  QCT_OK(qc_comm_destroy(single));
  QCT_CHECK_OUTCOME(o, QC_SUCCESS, NULL, NULL);
}

static void test_allreduce_error_buffer_with_lossless_codec(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_error_buffer_t eb = NULL;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float y[8];
  double norm = -1.0;
  set_feedback_policy(comm, "ef");
  QCT_OK(qc_error_buffer_create(comm, 8, &eb));
  QCT_OK(qc_allreduce(comm, x, y, 8, F32, QC_OP_SUM, "ef", eb, NULL));
  assert_memory_equal(y, x, sizeof x);
  /* codec none loses nothing, so nothing is left over */
  QCT_OK(qc_error_buffer_norm(eb, &norm));
  assert_true(norm == 0.0);
  QCT_OK(qc_error_buffer_destroy(eb));
}

/* Error feedback with a lossy codec: the residual is what the 2-bit grid
 * could not carry, and output + residual is exactly the input (one rank). */
static void test_allreduce_error_feedback_lossy_codec(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_policy_t p = QC_POLICY_INIT;
  qc_error_buffer_t eb = NULL;
  float x[4] = {1, 2, 3, 5};
  float y[4];
  float e[4];
  unsigned char image[256];
  size_t size = 0;
  double norm = 0.0;
  int i;
  p.codec = QC_CODEC_MINMAX;
  p.bits = 2;
  p.error_feedback = 1;
  p.min_compress_bytes = 0; /* 16 bytes: compressed only when asked to */
  QCT_OK(qc_comm_set_layer_policy(comm, "emb", &p));
  QCT_OK(qc_error_buffer_create(comm, 4, &eb));
  QCT_OK(qc_allreduce(comm, x, y, 4, F32, QC_OP_SUM, "emb", eb, NULL));
  QCT_OK(qc_error_buffer_norm(eb, &norm));
  assert_true(norm > 0.0);
  QCT_OK(qc_error_buffer_save(eb, image, sizeof image, &size));
  assert_int_equal(size, 56 + 4 * 4);
  memcpy(e, image + 56, sizeof e); /* little-endian float32 on this host */
  for (i = 0; i < 4; ++i) assert_true(y[i] + e[i] == x[i]);
  QCT_OK(qc_error_buffer_destroy(eb));
}

/* What cannot work is refused with QC_ERROR_UNSUPPORTED before any message
 * is sent, so the communicator stays usable. */
static void test_allreduce_unsupported_keeps_comm_usable(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  qc_policy_t p = QC_POLICY_INIT;
  float x[4] = {1, 2, 3, 4};
  float y[4];
  /* algorithm native needs a global codec */
  p.algorithm = QC_ALGO_NATIVE;
  QCT_OK(qc_comm_set_layer_policy(comm, "native", &p));
  QCT_FAILS(qc_allreduce(comm, x, y, 4, F32, QC_OP_SUM, "native", NULL, NULL),
            QC_ERROR_UNSUPPORTED, "qc_allreduce", NULL);
  memset(y, 0, sizeof y);
  QCT_OK(qc_allreduce(comm, x, y, 4, F32, QC_OP_SUM, "fc", NULL, NULL));
  assert_memory_equal(y, x, sizeof x);
}

static void test_allreduce_updates_stats(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[10] = {0};
  uint16_t h[6] = {0};
  float y[10];
  uint16_t hy[6];
  qc_stats_t s;
  QCT_OK(qc_allreduce(comm, x, y, 10, F32, QC_OP_SUM, NULL, NULL, NULL));
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  QCT_OK(qc_comm_get_stats(comm, &s));
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.logical_bytes, 10 * 4);
  QCT_OK(qc_allreduce(comm, h, hy, 6, QC_DTYPE_FLOAT16, QC_OP_SUM, NULL, NULL, NULL));
  QCT_OK(qc_comm_get_stats(comm, &s));
  assert_int_equal(s.calls, 2);
  assert_int_equal(s.logical_bytes, 10 * 4 + 6 * 2);
  assert_true(s.codec_seconds >= 0.0);
  assert_true(s.transport_seconds >= 0.0);
}

/* ======================================================================== */
/* qc_alltoall: arguments and one rank                                      */
/* ======================================================================== */

static void test_alltoall_null_comm(void** state) {
  float x[4] = {0};
  float y[4];
  (void)state;
  QCT_INVALID(qc_alltoall(NULL, x, y, 4, F32, NULL, NULL), "qc_alltoall", "comm");
}

static void test_alltoall_null_buffers_with_count(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  QCT_INVALID(qc_alltoall(comm, NULL, y, 4, F32, NULL, NULL), "qc_alltoall", "sendbuf");
  QCT_INVALID(qc_alltoall(comm, x, NULL, 4, F32, NULL, NULL), "qc_alltoall", "recvbuf");
}

static void test_alltoall_null_buffers_with_zero_count(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  QCT_OK(qc_alltoall(comm, NULL, NULL, 0, F32, NULL, NULL));
}

static void test_alltoall_count_overflow(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  QCT_INVALID(qc_alltoall(comm, x, y, SIZE_MAX / 2, F32, NULL, NULL), "qc_alltoall",
              "count_per_rank");
  QCT_INVALID(qc_alltoall(comm, x, y, SIZE_MAX, QC_DTYPE_BFLOAT16, NULL, NULL),
              "qc_alltoall", "count_per_rank");
}

/* count_per_rank x dtype fits in size_t, but x nranks does not. The check
 * happens before any communication, so one thread can call rank 0 alone. */
static void test_alltoall_count_times_nranks_overflow(void** state) {
  qc_comm_t comms[3] = {NULL, NULL, NULL};
  float x[4] = {0};
  float y[4];
  (void)state;
  qct_create_group(3, 5.0, comms);
  QCT_INVALID(qc_alltoall(comms[0], x, y, SIZE_MAX / 8, F32, NULL, NULL), "qc_alltoall",
              "count_per_rank");
  qct_destroy_group(3, comms);
}

static void test_alltoall_unknown_dtype(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  QCT_INVALID(qc_alltoall(comm, x, y, 4, (qc_dtype_t)7, NULL, NULL), "qc_alltoall", "dtype");
}

static void test_alltoall_stream_unsupported(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[4] = {0};
  float y[4];
  int not_a_stream = 0;
  QCT_FAILS(qc_alltoall(comm, x, y, 4, F32, NULL, &not_a_stream), QC_ERROR_UNSUPPORTED,
            "qc_alltoall", "stream");
}

/* "sendbuf and recvbuf may be the same pointer (in place) but must not
   otherwise overlap". */
static void test_alltoall_overlap(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float buf[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const float expect[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  QCT_STATUS(qc_alltoall(comm, buf, buf + 1, 8, F32, NULL, NULL), QC_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(qc_last_error(), "qc_alltoall"));
  QCT_OK(qc_alltoall(comm, buf, buf, 8, F32, NULL, NULL));
  assert_memory_equal(buf, expect, sizeof expect);
}

static void test_alltoall_one_rank_copies_block(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  float x[5] = {1.0f, -2.5f, 3.0f, 1e-20f, 7e20f};
  float y[5];
  qc_stats_t s;
  memset(y, 0, sizeof y);
  QCT_OK(qc_alltoall(comm, x, y, 5, F32, "emb", NULL));
  assert_memory_equal(y, x, sizeof x);
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  QCT_OK(qc_comm_get_stats(comm, &s));
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.logical_bytes, 5 * 4);
}

/* ======================================================================== */
/* Local groups driven by threads                                           */
/* ======================================================================== */

/* These tests count what went wrong, release everything, and only then
 * fail, so that a failure does not also show up as a leak under LSan. */

/* rank r, element i: small integers, so float32 sums are exact */
static float input_value(int rank, size_t i) {
  return (float)((int)(i % 97) - 48 + 3 * rank);
}

typedef struct allreduce_job {
  size_t count[QCT_MAX_RANKS];
  qc_dtype_t dtype[QCT_MAX_RANKS];
  qc_reduce_op_t op[QCT_MAX_RANKS];
  const char* layer[QCT_MAX_RANKS];
  float* send[QCT_MAX_RANKS];
  float* recv[QCT_MAX_RANKS];
  int second_call; /* make the same call again after the first */
  qct_rank_result result[QCT_MAX_RANKS];
} allreduce_job;

static void allreduce_rank(int rank, qc_comm_t comm, void* arg) {
  allreduce_job* job = (allreduce_job*)arg;
  qct_rank_result* r = &job->result[rank];
  double t0 = qct_now();
  r->status = qc_allreduce(comm, job->send[rank], job->recv[rank], job->count[rank],
                           job->dtype[rank], job->op[rank], job->layer[rank], NULL, NULL);
  r->seconds = qct_now() - t0;
  qct_copy_last_error(r->message, sizeof r->message);
  r->second_status = QC_SUCCESS;
  if (job->second_call) {
    r->second_status = qc_allreduce(comm, job->send[rank], job->recv[rank], job->count[rank],
                                    job->dtype[rank], job->op[rank], job->layer[rank], NULL,
                                    NULL);
  }
}

static void job_init(allreduce_job* job, int nranks, size_t count, qc_reduce_op_t op) {
  int r;
  size_t i;
  memset(job, 0, sizeof *job);
  for (r = 0; r < nranks; ++r) {
    job->count[r] = count;
    job->dtype[r] = F32;
    job->op[r] = op;
    job->layer[r] = "fc1.weight";
    /* one spare element so counts that differ by one stay in bounds */
    job->send[r] = (float*)calloc(count + 1, sizeof(float));
    job->recv[r] = (float*)calloc(count + 1, sizeof(float));
    assert_non_null(job->send[r]);
    assert_non_null(job->recv[r]);
    for (i = 0; i < count + 1; ++i) job->send[r][i] = input_value(r, i);
  }
}

static void job_free(allreduce_job* job, int nranks) {
  int r;
  for (r = 0; r < nranks; ++r) {
    free(job->send[r]);
    free(job->recv[r]);
    job->send[r] = NULL;
    job->recv[r] = NULL;
  }
}

/* Number of ranks whose first call did not return `want` (each printed). */
static int count_bad_ranks(const allreduce_job* job, int nranks, qc_status_t want) {
  int r;
  int bad = 0;
  for (r = 0; r < nranks; ++r) {
    if (job->result[r].status != want) {
      print_error("rank %d: %s, expected %s; message \"%s\"\n", r,
                  qc_status_string(job->result[r].status), qc_status_string(want),
                  job->result[r].message);
      ++bad;
    }
  }
  return bad;
}

/* Number of wrong elements over all ranks (the first few printed). */
static int count_bad_values(const allreduce_job* job, int nranks, size_t count, int avg) {
  int r;
  int bad = 0;
  size_t i;
  for (r = 0; r < nranks; ++r) {
    for (i = 0; i < count; ++i) {
      float want = 0.0f;
      int k;
      for (k = 0; k < nranks; ++k) want += input_value(k, i);
      if (avg) want = want * (1.0f / (float)nranks);
      if (job->recv[r][i] != want) {
        if (bad < 5) {
          print_error("rank %d element %zu: got %.9g, expected %.9g\n", r, i,
                      (double)job->recv[r][i], (double)want);
        }
        ++bad;
      }
    }
    /* every rank receives the same result, bit for bit */
    if (memcmp(job->recv[r], job->recv[0], count * sizeof(float)) != 0) {
      print_error("rank %d's result differs from rank 0's\n", r);
      ++bad;
    }
  }
  return bad;
}

static void run_three_ranks(size_t count, qc_reduce_op_t op) {
  enum { N = 3 };
  qc_comm_t comms[N];
  allreduce_job job;
  int bad;
  qct_create_group(N, 30.0, comms);
  job_init(&job, N, count, op);
  qct_run_ranks(N, comms, allreduce_rank, &job);
  bad = count_bad_ranks(&job, N, QC_SUCCESS);
  if (bad == 0) bad = count_bad_values(&job, N, count, op == QC_OP_AVG);
  job_free(&job, N);
  qct_destroy_group(N, comms);
  if (bad != 0) fail();
}

/* Below 64 KiB per rank: recursive doubling under QC_ALGO_AUTO. */
static void test_allreduce_three_ranks_small_sum(void** state) {
  (void)state;
  run_three_ranks(1000, QC_OP_SUM);
}

/* Above 64 KiB per rank: SRA under QC_ALGO_AUTO. */
static void test_allreduce_three_ranks_large_sum(void** state) {
  (void)state;
  run_three_ranks(40000, QC_OP_SUM);
}

/* AVG is "sum, then multiplied by 1/nranks on every rank": compared exactly
 * with sum * (1.0f / 3.0f) in float32. */
static void test_allreduce_three_ranks_avg(void** state) {
  (void)state;
  run_three_ranks(500, QC_OP_AVG);
}

typedef struct alltoall_job {
  size_t count_per_rank;
  float* send[QCT_MAX_RANKS];
  float* recv[QCT_MAX_RANKS];
  qct_rank_result result[QCT_MAX_RANKS];
} alltoall_job;

static void alltoall_rank(int rank, qc_comm_t comm, void* arg) {
  alltoall_job* job = (alltoall_job*)arg;
  qct_rank_result* r = &job->result[rank];
  r->status = qc_alltoall(comm, job->send[rank], job->recv[rank], job->count_per_rank, F32,
                          "emb", NULL);
  qct_copy_last_error(r->message, sizeof r->message);
}

static void test_alltoall_three_ranks(void** state) {
  enum { N = 3 };
  const size_t cpr = 17;
  qc_comm_t comms[N];
  alltoall_job job;
  int i;
  int j;
  int bad = 0;
  size_t k;
  (void)state;
  memset(&job, 0, sizeof job);
  job.count_per_rank = cpr;
  qct_create_group(N, 30.0, comms);
  for (i = 0; i < N; ++i) {
    job.send[i] = (float*)malloc(N * cpr * sizeof(float));
    job.recv[i] = (float*)calloc(N * cpr, sizeof(float));
    assert_non_null(job.send[i]);
    assert_non_null(job.recv[i]);
    /* rank i's block for rank j holds 1000 i + 100 j + k */
    for (j = 0; j < N; ++j)
      for (k = 0; k < cpr; ++k) job.send[i][j * cpr + k] = (float)(1000 * i + 100 * j + (int)k);
  }
  qct_run_ranks(N, comms, alltoall_rank, &job);
  for (i = 0; i < N; ++i) {
    if (job.result[i].status != QC_SUCCESS) {
      print_error("rank %d: %s (%s)\n", i, qc_status_string(job.result[i].status),
                  job.result[i].message);
      ++bad;
    }
  }
  /* recv[i] block j == send[j] block i */
  for (i = 0; bad == 0 && i < N; ++i) {
    for (j = 0; j < N; ++j) {
      if (memcmp(job.recv[i] + j * cpr, job.send[j] + i * cpr, cpr * sizeof(float)) != 0) {
        print_error("rank %d: block from rank %d is wrong\n", i, j);
        ++bad;
      }
    }
  }
  for (i = 0; i < N; ++i) {
    free(job.send[i]);
    free(job.recv[i]);
  }
  qct_destroy_group(N, comms);
  if (bad != 0) fail();
}

/* ---- timeouts, mismatches, vanished peers ---------------------------------- */

static void test_allreduce_timeout_when_peer_never_arrives(void** state) {
  qc_comm_t comms[2] = {NULL, NULL};
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float y[8];
  double t0;
  double elapsed;
  qct_outcome first;
  qct_outcome second;
  (void)state;
  qct_create_group(2, 0.3, comms);
  t0 = qct_now();
  first = qct_capture(qc_allreduce(comms[0], x, y, 8, F32, QC_OP_SUM, NULL, NULL, NULL));
  elapsed = qct_now() - t0;
  /* the communicator is broken: later collectives return the same status */
  second = qct_capture(qc_allreduce(comms[0], x, y, 8, F32, QC_OP_SUM, NULL, NULL, NULL));
  qct_destroy_group(2, comms);
  QCT_CHECK_OUTCOME(first, QC_ERROR_TIMEOUT, "qc_allreduce", NULL);
  if (elapsed < 0.25 || elapsed > 2.0) {
    print_error("timed out after %.3f s; timeout_seconds was 0.3\n", elapsed);
    fail();
  }
  QCT_CHECK_OUTCOME(second, QC_ERROR_TIMEOUT, "qc_allreduce", NULL);
}

/* Two ranks disagree; both get MISMATCH (a bug shows as TIMEOUT, not a hang),
 * and the broken communicator keeps returning MISMATCH. Frees the job. */
static void run_mismatch(allreduce_job* job) {
  qc_comm_t comms[2];
  int r;
  int bad;
  qct_create_group(2, 5.0, comms);
  job->second_call = 1;
  qct_run_ranks(2, comms, allreduce_rank, job);
  bad = count_bad_ranks(job, 2, QC_ERROR_MISMATCH);
  for (r = 0; r < 2; ++r) {
    if (strstr(job->result[r].message, "qc_allreduce") == NULL) {
      print_error("rank %d: message does not name qc_allreduce: \"%s\"\n", r,
                  job->result[r].message);
      ++bad;
    }
    if (job->result[r].second_status != QC_ERROR_MISMATCH) {
      print_error("rank %d: second call on the broken comm gave %s, expected "
                  "QC_ERROR_MISMATCH\n",
                  r, qc_status_string(job->result[r].second_status));
      ++bad;
    }
  }
  qct_destroy_group(2, comms);
  job_free(job, 2);
  if (bad != 0) fail();
}

static void test_allreduce_count_mismatch(void** state) {
  allreduce_job job;
  (void)state;
  job_init(&job, 2, 10, QC_OP_SUM);
  job.count[1] = 11;
  run_mismatch(&job);
}

static void test_allreduce_dtype_mismatch(void** state) {
  allreduce_job job;
  (void)state;
  job_init(&job, 2, 10, QC_OP_SUM);
  job.dtype[1] = QC_DTYPE_FLOAT16; /* the float buffers are large enough */
  run_mismatch(&job);
}

static void test_allreduce_op_mismatch(void** state) {
  allreduce_job job;
  (void)state;
  job_init(&job, 2, 10, QC_OP_SUM);
  job.op[1] = QC_OP_AVG;
  run_mismatch(&job);
}

static void test_allreduce_layer_mismatch(void** state) {
  allreduce_job job;
  (void)state;
  job_init(&job, 2, 10, QC_OP_SUM);
  job.layer[1] = "fc2.weight";
  run_mismatch(&job);
}

static void test_allreduce_policy_mismatch(void** state) {
  allreduce_job job;
  qc_comm_t comms[2];
  qc_policy_t p = QC_POLICY_INIT;
  int r;
  int bad;
  (void)state;
  job_init(&job, 2, 10, QC_OP_SUM);
  qct_create_group(2, 5.0, comms);
  p.algorithm = QC_ALGO_RING;
  QCT_OK(qc_comm_set_layer_policy(comms[0], "*", &p));
  p.algorithm = QC_ALGO_RECURSIVE_DOUBLING;
  QCT_OK(qc_comm_set_layer_policy(comms[1], "*", &p));
  qct_run_ranks(2, comms, allreduce_rank, &job);
  bad = count_bad_ranks(&job, 2, QC_ERROR_MISMATCH);
  for (r = 0; r < 2; ++r) {
    if (strstr(job.result[r].message, "qc_allreduce") == NULL) ++bad;
  }
  qct_destroy_group(2, comms);
  job_free(&job, 2);
  if (bad != 0) fail();
}

/* "Peers of a local group that later wait for a message this rank will never
 * send fail at once with QC_ERROR_TRANSPORT instead of waiting." */
static void test_allreduce_after_peer_destroyed(void** state) {
  qc_comm_t comms[2] = {NULL, NULL};
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float y[8];
  double t0;
  double elapsed;
  qct_outcome o;
  (void)state;
  qct_create_group(2, 5.0, comms);
  QCT_OK(qc_comm_destroy(comms[1]));
  t0 = qct_now();
  o = qct_capture(qc_allreduce(comms[0], x, y, 8, F32, QC_OP_SUM, NULL, NULL, NULL));
  elapsed = qct_now() - t0;
  QCT_OK(qc_comm_destroy(comms[0]));
  QCT_CHECK_OUTCOME(o, QC_ERROR_TRANSPORT, "qc_allreduce", NULL);
  if (elapsed > 2.0) {
    print_error("took %.3f s to notice the destroyed peer\n", elapsed);
    fail();
  }
}

int main(void) {
#define WITH_COMM(t) cmocka_unit_test_setup_teardown(t, qct_setup_comm1, qct_teardown_comm)
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_null_comm),
      WITH_COMM(test_allreduce_null_buffers_with_count),
      WITH_COMM(test_allreduce_null_buffers_with_zero_count),
      WITH_COMM(test_allreduce_count_overflow),
      WITH_COMM(test_allreduce_unknown_dtype),
      WITH_COMM(test_allreduce_unknown_op),
      WITH_COMM(test_allreduce_stream_unsupported),
      WITH_COMM(test_allreduce_partial_overlap),
      WITH_COMM(test_allreduce_in_place),
      WITH_COMM(test_allreduce_one_rank_sum_copies),
      WITH_COMM(test_allreduce_one_rank_avg_equals_input),
      WITH_COMM(test_allreduce_one_rank_half_types_copy),
      WITH_COMM(test_allreduce_zero_count_with_buffers),
      WITH_COMM(test_allreduce_error_buffer_wrong_count),
      WITH_COMM(test_allreduce_error_buffer_of_another_rank),
      WITH_COMM(test_allreduce_error_feedback_lossy_codec),
      WITH_COMM(test_allreduce_error_buffer_with_lossless_codec),
      WITH_COMM(test_allreduce_unsupported_keeps_comm_usable),
      WITH_COMM(test_allreduce_updates_stats),
      cmocka_unit_test(test_alltoall_null_comm),
      WITH_COMM(test_alltoall_null_buffers_with_count),
      WITH_COMM(test_alltoall_null_buffers_with_zero_count),
      WITH_COMM(test_alltoall_count_overflow),
      cmocka_unit_test(test_alltoall_count_times_nranks_overflow),
      WITH_COMM(test_alltoall_unknown_dtype),
      WITH_COMM(test_alltoall_stream_unsupported),
      WITH_COMM(test_alltoall_overlap),
      WITH_COMM(test_alltoall_one_rank_copies_block),
      cmocka_unit_test(test_allreduce_three_ranks_small_sum),
      cmocka_unit_test(test_allreduce_three_ranks_large_sum),
      cmocka_unit_test(test_allreduce_three_ranks_avg),
      cmocka_unit_test(test_alltoall_three_ranks),
      cmocka_unit_test(test_allreduce_timeout_when_peer_never_arrives),
      cmocka_unit_test(test_allreduce_count_mismatch),
      cmocka_unit_test(test_allreduce_dtype_mismatch),
      cmocka_unit_test(test_allreduce_op_mismatch),
      cmocka_unit_test(test_allreduce_layer_mismatch),
      cmocka_unit_test(test_allreduce_policy_mismatch),
      cmocka_unit_test(test_allreduce_after_peer_destroyed),
  };
#undef WITH_COMM
  return cmocka_run_group_tests_name("abi_collectives", tests, NULL, NULL);
}
