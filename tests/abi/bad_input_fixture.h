/*
 * bad_input_fixture.h - the fixture that the rows of docs/errors.md run in.
 *
 * tools/gen_bad_input_tests.py turns every row of the tables in
 * docs/errors.md into one cmocka test: a function that evaluates the row's
 * C expression with the names of bad_input_names.h in scope (comm, buf,
 * out, pol, eb, msg, ...: fields of a qct_fx) and a test that runs it
 * through qct_run_row(), which
 *   1. builds a fresh fixture per rank: a local group of `ranks`
 *      communicators (timeout QCT_ROW_TIMEOUT_S), heap buffers of exactly
 *      their size (so that AddressSanitizer sees any access past them), an
 *      error buffer, an encoded message, a saved error-buffer image, and a
 *      destroyed communicator and error buffer;
 *   2. evaluates the expression on one thread per rank (on the test's own
 *      thread for one rank) and copies each rank's status and
 *      qc_last_error() right after it;
 *   3. releases everything (a row must not leak), then asserts that every
 *      rank got the row's status and a message containing the row's
 *      substring (for a failure status).
 * Everything here is C99 + POSIX threads, as a C program sees qc.h.
 */
#ifndef QC_BAD_INPUT_FIXTURE_H
#define QC_BAD_INPUT_FIXTURE_H

#define QC_EXPERIMENTAL_API /* tests qc_comm_adapt_policies and its structs */
#include "qc_abi_test.h"

/* Elements in most rows' calls; buf and out hold QCT_CAP (room for an
 * alltoall of QCT_N elements per rank on up to 4 ranks). */
#define QCT_N 64
#define QCT_CAP 256
#define QCT_EMU_RANKS 4
#define QCT_GARBAGE_BYTES 4096
#define QCT_MAX_COPIES 8
/* Seconds a multi-rank row may wait for a peer: failing rows must fail at
 * once (MISMATCH), so this only bounds a hang. */
#define QCT_ROW_TIMEOUT_S 30.0

/* A status no qc call returns: a helper's check of the output failed. */
#define QCT_WRONG_OUTPUT ((qc_status_t)1000)

typedef struct qct_big_config {
  qc_comm_config_t config;
  unsigned char extra[64];
} qct_big_config;

typedef struct qct_big_stats {
  qc_stats_t value; /* not `stats`: that is one of the row names */
  unsigned char extra[64];
} qct_big_stats;

/* One rank's fixture. */
typedef struct qct_fx {
  int rank;
  int nranks;
  qc_comm_t comm;              /* this rank's communicator */
  float* buf;                  /* QCT_CAP floats: i % 7 - 3 (finite, mixed signs) */
  float* out;                  /* QCT_CAP floats, 0 */
  uint16_t* half;              /* QCT_CAP binary16 ones */
  qc_policy_t pol;             /* QC_POLICY_INIT */
  qct_big_policy bigpol;       /* QC_POLICY_INIT followed by 64 spare bytes */
  qc_comm_config_t cfg;        /* QC_COMM_CONFIG_INIT */
  qct_big_config bigcfg;       /* QC_COMM_CONFIG_INIT followed by 64 spare bytes */
  qc_transport_callbacks_t cbs; /* rank 0 of 2; every callback fails (returns 1) */
  qc_stats_t stats;            /* struct_size set */
  qct_big_stats bigstats;      /* struct_size set, 64 spare bytes */
  qc_layer_stats_t lstats;     /* struct_size set */
  qc_adapt_config_t acfg;      /* QC_ADAPT_CONFIG_INIT */
  qc_adapt_report_t report;    /* struct_size set */
  qc_error_buffer_t eb;        /* for comm, QCT_N residuals */
  qc_error_buffer_t eb_other;  /* rank 1 of a 2-rank group, QCT_N residuals */
  qc_error_buffer_t eb_emu[QCT_EMU_RANKS]; /* comm NULL (emulation), QCT_N each */
  qc_comm_t spare_comm;        /* NULL: for a create that should fail */
  qc_comm_t spare_comms[4];    /* NULL: likewise */
  qc_error_buffer_t spare_eb;  /* NULL: likewise; whatever lands in these is destroyed */
  qc_sparse_result_t spare_sparse; /* NULL: for a sparse allreduce's result; destroyed */
  int64_t sparse_idx[16];      /* row indices 0, 1, ..., 15 */
  qc_comm_t dead_comm;         /* created, then destroyed */
  qc_error_buffer_t dead_eb;   /* created, then destroyed */
  qc_request_t req;            /* NULL: for a start; whatever lands here is waited for and freed */
  qc_request_t dead_req;       /* a 1-rank qc_iallreduce, waited for and freed */
  unsigned char* msg;          /* qc_codec_encode(minmax, 4 bits, bucket 32) of buf[0..QCT_N) */
  size_t msg_len;              /* its length: msg holds exactly msg_len bytes */
  unsigned char* image;        /* qc_error_buffer_save(eb), exactly image_len bytes */
  size_t image_len;
  unsigned char* garbage;      /* QCT_GARBAGE_BYTES pseudo-random bytes (fixed seed) */
  const void* sendbufs[QCT_EMU_RANKS]; /* emulation: QCT_CAP floats each, like buf */
  void* recvbufs[QCT_EMU_RANKS];       /* emulation: QCT_CAP floats each */
  size_t counts[4];            /* {16, 16, 16, 16}: segments of buf */
  const char* layers[4];       /* {"a", "b", "c", "d"} */
  int ival;                    /* out-parameters */
  size_t sz;
  double dval;
  char name[8];
  void* copies[QCT_MAX_COPIES]; /* heap_copy()'s, freed by the teardown */
  int ncopies;
  char check_note[256];        /* why a checking helper returned QCT_WRONG_OUTPUT */
} qct_fx;

/* The callbacks of `cbs`: a library that refuses every transfer. */
static int qct_cb_refuse_send(void* ctx, int peer, const void* data, size_t bytes, void** handle) {
  (void)ctx; (void)peer; (void)data; (void)bytes; (void)handle;
  return 1;
}
static int qct_cb_refuse_recv(void* ctx, int peer, void* data, size_t bytes, void** handle) {
  (void)ctx; (void)peer; (void)data; (void)bytes; (void)handle;
  return 1;
}
static int qct_cb_refuse_test(void* ctx, void* handle, int* done) {
  (void)ctx; (void)handle;
  *done = 0;
  return 1;
}
static const char* qct_cb_error(void* ctx) {
  (void)ctx;
  return "the fixture's library refuses every transfer";
}

/* `cbs` with its rank field set: rows cannot write cbs.rank, `rank` being
 * a name of the fixture (bad_input_names.h). */
static inline qc_transport_callbacks_t* qct_cbs_with_rank(qct_fx* fx, int r) {
  fx->cbs.rank = r;
  return &fx->cbs;
}

/* A row of the table, as the generator writes it. */
typedef struct qct_row {
  const char* id;
  const char* function;
  int ranks;
  int mpi;          /* the row only holds in a build with MPI */
  int no_mpi;       /* the row only holds in a build without MPI */
  int no_cuda;      /* the row only holds in a build without CUDA */
  qc_status_t status;
  const char* message; /* substring of qc_last_error(); NULL for SUCCESS */
  const char* expr;
  const char* file;
  int line;
} qct_row;

typedef qc_status_t (*qct_row_fn)(qct_fx* fx);

/* ---- helpers the expressions call (through bad_input_names.h) ----------- */

/* A heap copy of exactly n bytes of p (a truncated message that ASan can
 * guard), freed by the teardown. */
static inline void* qct_heap_copy(qct_fx* fx, const void* p, size_t n) {
  void* c;
  if (fx->ncopies == QCT_MAX_COPIES) return NULL;
  c = malloc(n > 0 ? n : 1);
  if (c == NULL) return NULL;
  memcpy(c, p, n);
  fx->copies[fx->ncopies++] = c;
  return c;
}

/* buf[0..QCT_N) encoded with pol (codec set to `codec`, bucket 32) and
 * decoded into out: the codec's round trip. */
static inline qc_status_t qct_roundtrip(qct_fx* fx, qc_codec_t codec) {
  size_t cap = 0, written = 0;
  unsigned char* m;
  qc_status_t st;
  fx->pol.codec = codec;
  fx->pol.bucket_size = 32;
  fx->pol.topk_ratio = 0.25f;
  st = qc_codec_encoded_size(&fx->pol, QCT_N, &cap);
  if (st != QC_SUCCESS) return st;
  m = (unsigned char*)qct_heap_copy(fx, fx->garbage, cap);
  if (m == NULL) return QC_ERROR_OUT_OF_MEMORY;
  st = qc_codec_encode(&fx->pol, fx->buf, QCT_N, QC_DTYPE_FLOAT32, m, cap, &written);
  if (st != QC_SUCCESS) return st;
  return qc_codec_decode(m, written, fx->out, QCT_N, QC_DTYPE_FLOAT32);
}

/* Sets the policy "*" of comm to pol with `codec`, bucket 32 and no
 * min_compress_bytes (so that QCT_N elements are compressed); returns the
 * status of qc_comm_set_layer_policy. */
static inline qc_status_t qct_use_codec(qct_fx* fx, qc_codec_t codec) {
  fx->pol.codec = codec;
  fx->pol.bucket_size = 32;
  fx->pol.topk_ratio = 0.25f;
  fx->pol.min_compress_bytes = 0;
  return qc_comm_set_layer_policy(fx->comm, "*", &fx->pol);
}

/* After a successful call: out[lo..hi) must all be non-finite and the rest
 * of out[0..QCT_N) finite. Passes any other status through. */
static inline qc_status_t qct_nonfinite_span(qct_fx* fx, qc_status_t st, int lo, int hi) {
  int i;
  if (st != QC_SUCCESS) return st;
  for (i = 0; i < QCT_N; ++i) {
    const int want_nonfinite = i >= lo && i < hi;
    if (want_nonfinite == (isfinite(fx->out[i]) != 0)) {
      snprintf(fx->check_note, sizeof fx->check_note,
               "out[%d] is %g; expected out[%d..%d) non-finite and the rest of out[0..%d) finite",
               i, (double)fx->out[i], lo, hi, QCT_N);
      return QCT_WRONG_OUTPUT;
    }
  }
  return st;
}

/* After a successful call: eb's residual norm must be finite. */
static inline qc_status_t qct_finite_residuals(qct_fx* fx, qc_status_t st) {
  double norm = 0.0;
  qc_status_t s;
  if (st != QC_SUCCESS) return st;
  s = qc_error_buffer_norm(fx->eb, &norm);
  if (s != QC_SUCCESS) return s;
  if (!isfinite(norm)) {
    snprintf(fx->check_note, sizeof fx->check_note, "the residual norm is %g", norm);
    return QCT_WRONG_OUTPUT;
  }
  return st;
}

/* After a failed call: out[0..QCT_CAP) must still be all zero (a failed
 * call writes no output). */
static inline qc_status_t qct_out_untouched(qct_fx* fx, qc_status_t st) {
  int i;
  for (i = 0; i < QCT_CAP; ++i) {
    if (fx->out[i] != 0.0f) {
      snprintf(fx->check_note, sizeof fx->check_note,
               "the call returned %s but wrote out[%d] = %g", qc_status_string(st), i,
               (double)fx->out[i]);
      return QCT_WRONG_OUTPUT;
    }
  }
  return st;
}

/* ---- setup and teardown -------------------------------------------------- */

static inline float* qct_floats(size_t n, float fill_pattern) {
  float* p = (float*)malloc(n * sizeof(float));
  size_t i;
  if (p == NULL) return NULL;
  for (i = 0; i < n; ++i) p[i] = fill_pattern != 0.0f ? (float)(i % 7) - 3.0f : 0.0f;
  return p;
}

/* Everything but the communicator (set by the caller); 0 on success, else
 * a description in fx->check_note. */
static inline int qct_fx_setup(qct_fx* fx) {
  const qc_policy_t def = QC_POLICY_INIT;
  const qc_comm_config_t defcfg = QC_COMM_CONFIG_INIT;
  const qc_adapt_config_t defacfg = QC_ADAPT_CONFIG_INIT;
  qc_policy_t mm = QC_POLICY_INIT;
  qc_comm_t pair[2] = {NULL, NULL};
  size_t i, cap = 0;
  uint32_t x = 2463534242u;
  int r;

  fx->buf = qct_floats(QCT_CAP, 1.0f);
  fx->out = qct_floats(QCT_CAP, 0.0f);
  fx->half = (uint16_t*)malloc(QCT_CAP * sizeof(uint16_t));
  fx->garbage = (unsigned char*)malloc(QCT_GARBAGE_BYTES);
  if (!fx->buf || !fx->out || !fx->half || !fx->garbage) goto oom;
  for (i = 0; i < QCT_CAP; ++i) fx->half[i] = (uint16_t)QCT_FP16_ONE;
  for (i = 0; i < 16; ++i) fx->sparse_idx[i] = (int64_t)i;
  for (i = 0; i < QCT_GARBAGE_BYTES; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    fx->garbage[i] = (unsigned char)(x >> 24);
  }
  for (r = 0; r < QCT_EMU_RANKS; ++r) {
    fx->sendbufs[r] = qct_floats(QCT_CAP, 1.0f);
    fx->recvbufs[r] = qct_floats(QCT_CAP, 0.0f);
    if (!fx->sendbufs[r] || !fx->recvbufs[r]) goto oom;
  }
  fx->pol = def;
  memset(&fx->bigpol, 0, sizeof fx->bigpol);
  fx->bigpol.policy = def;
  fx->cfg = defcfg;
  memset(&fx->bigcfg, 0, sizeof fx->bigcfg);
  fx->bigcfg.config = defcfg;
  qc_transport_callbacks_init(&fx->cbs);
  fx->cbs.size = 2;
  fx->cbs.post_send = qct_cb_refuse_send;
  fx->cbs.post_recv = qct_cb_refuse_recv;
  fx->cbs.test = qct_cb_refuse_test;
  fx->cbs.error_message = qct_cb_error;
  memset(&fx->stats, 0, sizeof fx->stats);
  fx->stats.struct_size = sizeof fx->stats;
  memset(&fx->bigstats, 0, sizeof fx->bigstats);
  fx->bigstats.value.struct_size = sizeof fx->bigstats.value;
  memset(&fx->lstats, 0, sizeof fx->lstats);
  fx->lstats.struct_size = sizeof fx->lstats;
  fx->acfg = defacfg;
  memset(&fx->report, 0, sizeof fx->report);
  fx->report.struct_size = sizeof fx->report;
  for (i = 0; i < 4; ++i) fx->counts[i] = 16;
  fx->layers[0] = "a";
  fx->layers[1] = "b";
  fx->layers[2] = "c";
  fx->layers[3] = "d";
  memset(fx->name, 0, sizeof fx->name);

  if (qc_error_buffer_create(fx->comm, QCT_N, &fx->eb) != QC_SUCCESS) goto qc_failed;
  for (r = 0; r < QCT_EMU_RANKS; ++r) {
    if (qc_error_buffer_create(NULL, QCT_N, &fx->eb_emu[r]) != QC_SUCCESS) goto qc_failed;
  }
  /* eb_other: rank 1 of a group of 2, which is gone again */
  if (qc_comm_create_local(2, pair) != QC_SUCCESS) goto qc_failed;
  if (qc_error_buffer_create(pair[1], QCT_N, &fx->eb_other) != QC_SUCCESS) goto qc_failed;
  qc_comm_destroy(pair[0]);
  qc_comm_destroy(pair[1]);
  pair[0] = pair[1] = NULL;

  mm.codec = QC_CODEC_MINMAX;
  mm.bucket_size = 32;
  if (qc_codec_encoded_size(&mm, QCT_N, &cap) != QC_SUCCESS) goto qc_failed;
  fx->msg = (unsigned char*)malloc(cap);
  if (fx->msg == NULL) goto oom;
  if (qc_codec_encode(&mm, fx->buf, QCT_N, QC_DTYPE_FLOAT32, fx->msg, cap, &fx->msg_len) != QC_SUCCESS)
    goto qc_failed;
  if (qc_error_buffer_save(fx->eb, NULL, 0, &fx->image_len) != QC_SUCCESS) goto qc_failed;
  fx->image = (unsigned char*)malloc(fx->image_len);
  if (fx->image == NULL) goto oom;
  if (qc_error_buffer_save(fx->eb, fx->image, fx->image_len, &fx->image_len) != QC_SUCCESS)
    goto qc_failed;

  /* The destroyed handles come last. (Handles are never reused, so memory
   * the fixture reuses would not revive them: rows D_*_memory_reused.) */
  if (qc_comm_create_local(1, &fx->dead_comm) != QC_SUCCESS) goto qc_failed;
  if (qc_error_buffer_create(NULL, QCT_N, &fx->dead_eb) != QC_SUCCESS) goto qc_failed;
  if (qc_iallreduce(fx->dead_comm, fx->buf, fx->out, QCT_N, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL,
                    NULL, &fx->dead_req) != QC_SUCCESS)
    goto qc_failed;
  if (qc_request_wait(fx->dead_req) != QC_SUCCESS) goto qc_failed;
  if (qc_request_free(fx->dead_req) != QC_SUCCESS) goto qc_failed;
  memset(fx->out, 0, sizeof(float) * QCT_CAP);
  if (qc_comm_destroy(fx->dead_comm) != QC_SUCCESS) goto qc_failed;
  if (qc_error_buffer_destroy(fx->dead_eb) != QC_SUCCESS) goto qc_failed;
  return 0;

qc_failed:
  snprintf(fx->check_note, sizeof fx->check_note, "fixture setup failed: %s", qc_last_error());
  qc_comm_destroy(pair[0]);
  qc_comm_destroy(pair[1]);
  return -1;
oom:
  snprintf(fx->check_note, sizeof fx->check_note, "fixture setup: out of memory");
  return -1;
}

/* Releases what qct_fx_setup made (not the communicator); tolerates a
 * partial setup. */
static inline void qct_fx_teardown(qct_fx* fx) {
  int r;
  if (fx->req != NULL) {
    qc_request_wait(fx->req);
    qc_request_free(fx->req);
  }
  qc_comm_destroy(fx->spare_comm);
  for (r = 0; r < 4; ++r) qc_comm_destroy(fx->spare_comms[r]);
  qc_error_buffer_destroy(fx->spare_eb);
  qc_sparse_result_destroy(fx->spare_sparse);
  qc_error_buffer_destroy(fx->eb);
  qc_error_buffer_destroy(fx->eb_other);
  for (r = 0; r < QCT_EMU_RANKS; ++r) {
    qc_error_buffer_destroy(fx->eb_emu[r]);
    free((void*)fx->sendbufs[r]);
    free(fx->recvbufs[r]);
  }
  for (r = 0; r < fx->ncopies; ++r) free(fx->copies[r]);
  free(fx->buf);
  free(fx->out);
  free(fx->half);
  free(fx->garbage);
  free(fx->msg);
  free(fx->image);
}

/* What one rank saw. */
typedef struct qct_row_result {
  qc_status_t status;
  char message[QCT_MSG_MAX];
  char note[256];
} qct_row_result;

typedef struct qct_row_thread {
  qct_fx* fx;
  qct_row_fn fn;
  qct_row_result* result;
} qct_row_thread;

static inline void qct_eval_row(qct_fx* fx, qct_row_fn fn, qct_row_result* result) {
  result->status = fn(fx);
  qct_copy_last_error(result->message, sizeof result->message);
  snprintf(result->note, sizeof result->note, "%s", fx->check_note);
}

static inline void* qct_row_thread_main(void* p) {
  qct_row_thread* t = (qct_row_thread*)p;
  qct_eval_row(t->fx, t->fn, t->result);
  return NULL;
}

/* True when `message` contains one of the names in `functions` ("qc_a" or
 * "qc_a / qc_b": ranks that call different functions). */
static inline int qct_names_a_function(const char* message, const char* functions) {
  char copy[256];
  char* save = NULL;
  char* tok;
  snprintf(copy, sizeof copy, "%s", functions);
  for (tok = strtok_r(copy, " /", &save); tok != NULL; tok = strtok_r(NULL, " /", &save)) {
    if (strstr(message, tok) != NULL) return 1;
  }
  return 0;
}

/* Runs a row (see the top of this file) and asserts its outcome. */
static inline void qct_run_row(const qct_row* row, qct_row_fn fn) {
  qc_comm_t comms[QCT_MAX_RANKS];
  qct_fx fx[QCT_MAX_RANKS];
  qct_row_result result[QCT_MAX_RANKS];
  qct_row_thread threads[QCT_MAX_RANKS];
  pthread_t tid[QCT_MAX_RANKS];
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  char setup_failure[512] = "";
  int n = row->ranks, r, failures = 0, started = 0;

#ifndef QCT_HAVE_MPI
  if (row->mpi) {
    print_message("%s:%d: row %s holds only in a build with MPI\n", row->file, row->line,
                  row->id);
    skip();
  }
#else
  if (row->no_mpi) {
    print_message("%s:%d: row %s holds only in a build without MPI\n", row->file, row->line,
                  row->id);
    skip();
  }
#endif
#ifdef QCT_HAVE_CUDA
  if (row->no_cuda) {
    print_message("%s:%d: row %s holds only in a build without CUDA\n", row->file, row->line,
                  row->id);
    skip();
  }
#endif
  assert_true(n >= 1 && n <= QCT_MAX_RANKS);
  memset(fx, 0, sizeof fx);
  memset(result, 0, sizeof result);
  memset(comms, 0, sizeof comms);
  cfg.timeout_seconds = QCT_ROW_TIMEOUT_S;
  if (qc_comm_create_local_with_config(n, &cfg, comms) != QC_SUCCESS) {
    print_error("%s:%d: row %s: qc_comm_create_local_with_config(%d) failed: %s\n", row->file,
                row->line, row->id, n, qc_last_error());
    fail();
  }
  for (r = 0; r < n; ++r) {
    fx[r].rank = r;
    fx[r].nranks = n;
    fx[r].comm = comms[r];
    if (qct_fx_setup(&fx[r]) != 0 && setup_failure[0] == '\0') {
      snprintf(setup_failure, sizeof setup_failure, "%s", fx[r].check_note);
    }
  }
  if (setup_failure[0] == '\0') {
    if (n == 1) {
      qct_eval_row(&fx[0], fn, &result[0]);
    } else {
      for (r = 0; r < n; ++r) {
        threads[r].fx = &fx[r];
        threads[r].fn = fn;
        threads[r].result = &result[r];
        if (pthread_create(&tid[r], NULL, qct_row_thread_main, &threads[r]) != 0) break;
        ++started;
      }
      for (r = 0; r < started; ++r) pthread_join(tid[r], NULL);
      if (started != n) snprintf(setup_failure, sizeof setup_failure, "pthread_create failed");
    }
  }
  /* Release before asserting: a failing assertion longjmps. A row may have
   * destroyed its communicator already; that destroy is INVALID now. */
  for (r = 0; r < n; ++r) {
    qct_fx_teardown(&fx[r]);
    qc_comm_destroy(comms[r]);
  }
  if (setup_failure[0] != '\0') {
    print_error("%s:%d: row %s: %s\n", row->file, row->line, row->id, setup_failure);
    fail();
  }
  if (getenv("QCT_SHOW_MESSAGES") != NULL) { /* for whoever edits the table */
    for (r = 0; r < n; ++r) {
      print_message("%s rank %d: %s \"%s\"\n", row->id, r, qc_status_string(result[r].status),
                    result[r].status == QC_SUCCESS ? "" : result[r].message);
    }
  }
  for (r = 0; r < n; ++r) {
    const qct_row_result* res = &result[r];
    if (res->status != row->status) {
      print_error("%s:%d: row %s, rank %d of %d:\n    %s\n    returned %s (%d), expected %s\n"
                  "    qc_last_error(): \"%s\"\n%s%s%s",
                  row->file, row->line, row->id, r, n, row->expr, qc_status_string(res->status),
                  (int)res->status, qc_status_string(row->status), res->message,
                  res->status == QCT_WRONG_OUTPUT ? "    output check: " : "",
                  res->status == QCT_WRONG_OUTPUT ? res->note : "",
                  res->status == QCT_WRONG_OUTPUT ? "\n" : "");
      ++failures;
    } else if (row->message != NULL && strstr(res->message, row->message) == NULL) {
      print_error("%s:%d: row %s, rank %d of %d:\n    %s\n    returned %s as expected, but "
                  "qc_last_error() does not contain \"%s\":\n    \"%s\"\n",
                  row->file, row->line, row->id, r, n, row->expr, qc_status_string(res->status),
                  row->message, res->message);
      ++failures;
    } else if (row->message != NULL && !qct_names_a_function(res->message, row->function)) {
      print_error("%s:%d: row %s, rank %d of %d: qc_last_error() does not name %s:\n    \"%s\"\n",
                  row->file, row->line, row->id, r, n, row->function, res->message);
      ++failures;
    }
  }
  if (failures != 0) fail();
}

#endif /* QC_BAD_INPUT_FIXTURE_H */
