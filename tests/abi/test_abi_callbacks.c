/*
 * test_abi_callbacks.c - qc_comm_create_callbacks: a transport the caller
 * brings, written here in C as a framework would write one.
 *
 * The "library" below (mb_*) carries messages between ranks that are threads
 * of this process, through one FIFO per (sender, receiver) pair, with the
 * strictness of gloo or NCCL: a receive must name its message's exact size
 * (anything else is an error the library reports), a send completes only
 * when its receiver has copied it (so qc must keep a send's bytes alive
 * until then), and every transfer's memory is the library's to free.
 *
 * What is checked: every collective over the callbacks gives bit for bit
 * the result of the local transport (qc's algorithms, codecs and error
 * feedback unchanged), for 1, 2, 3 and 5 ranks, blocking and non-blocking
 * with and without qc's progress thread, with and without a wait callback;
 * the argument checks; and the failures: a timeout (abort and cancel
 * called, pending transfers released), a failing callback (its code and
 * message in qc_last_error, the peers told through abort), a call the
 * ranks disagree on (QC_ERROR_MISMATCH from qc's header), and
 * qc_comm_destroy from another thread while a call waits.
 */
#include "qc_abi_test.h"

#define MB_MAX_RANKS 8

/* ---- the mailbox library ------------------------------------------------ */

typedef struct mb_transfer {
  int is_send;
  int peer;
  void* data;
  size_t bytes;
  int consumed;                     /* send: its receiver copied it */
  int queued;                       /* send: still in its pair's FIFO */
  struct mb_transfer* next_queued;  /* FIFO link */
  struct mb_transfer* prev_live;    /* the owning rank's live list */
  struct mb_transfer* next_live;
} mb_transfer;

typedef struct mb_world {
  int size;
  pthread_mutex_t lock; /* one lock for all: simple, and enough here */
  mb_transfer* head[MB_MAX_RANKS][MB_MAX_RANKS]; /* [sender][receiver] */
  mb_transfer* tail[MB_MAX_RANKS][MB_MAX_RANKS];
  int failed;               /* an abort callback ran */
  char failure[256];
} mb_world;

typedef struct mb_rank {
  mb_world* world;
  int rank;
  mb_transfer* live; /* posted, not yet reported done nor cancelled */
  int live_count;
  int fail_sends;    /* > 0: post_send returns 7 from this many-th send on */
  int sends;
  int tests, waits, cancels, aborts, destroys;
  int bad_wait_slices; /* waits asked for more than the documented 0.1 s */
  int abort_status;
  char error[512];
} mb_rank;

static void mb_world_init(mb_world* w, int size) {
  memset(w, 0, sizeof *w);
  w->size = size;
  pthread_mutex_init(&w->lock, NULL);
}

static void mb_link_live(mb_rank* r, mb_transfer* t) {
  t->prev_live = NULL;
  t->next_live = r->live;
  if (r->live != NULL) r->live->prev_live = t;
  r->live = t;
  r->live_count++;
}

static void mb_unlink_live(mb_rank* r, mb_transfer* t) {
  if (t->prev_live != NULL) t->prev_live->next_live = t->next_live;
  else r->live = t->next_live;
  if (t->next_live != NULL) t->next_live->prev_live = t->prev_live;
  r->live_count--;
}

/* Under the lock: takes a queued send out of its FIFO. */
static void mb_dequeue(mb_world* w, int from, int to, mb_transfer* t) {
  mb_transfer** link = &w->head[from][to];
  mb_transfer* prev = NULL;
  while (*link != NULL && *link != t) {
    prev = *link;
    link = &(*link)->next_queued;
  }
  if (*link == NULL) return;
  *link = t->next_queued;
  if (w->tail[from][to] == t) w->tail[from][to] = prev;
  t->queued = 0;
}

static int mb_post(mb_rank* r, int is_send, int peer, void* data, size_t bytes, void** handle) {
  mb_world* w = r->world;
  mb_transfer* t;
  if (peer < 0 || peer >= w->size || peer == r->rank) {
    snprintf(r->error, sizeof r->error, "bad peer %d", peer);
    return 3;
  }
  t = (mb_transfer*)calloc(1, sizeof *t);
  if (t == NULL) return 12;
  t->is_send = is_send;
  t->peer = peer;
  t->data = data;
  t->bytes = bytes;
  pthread_mutex_lock(&w->lock);
  if (w->failed) {
    snprintf(r->error, sizeof r->error, "the group was aborted: %s", w->failure);
    pthread_mutex_unlock(&w->lock);
    free(t);
    return 5;
  }
  if (is_send) {
    t->queued = 1;
    if (w->tail[r->rank][peer] != NULL) w->tail[r->rank][peer]->next_queued = t;
    else w->head[r->rank][peer] = t;
    w->tail[r->rank][peer] = t;
  }
  mb_link_live(r, t);
  pthread_mutex_unlock(&w->lock);
  *handle = t;
  return 0;
}

static int mb_post_send(void* ctx, int peer, const void* data, size_t bytes, void** handle) {
  mb_rank* r = (mb_rank*)ctx;
  if (r->fail_sends > 0 && ++r->sends >= r->fail_sends) {
    snprintf(r->error, sizeof r->error, "link to rank %d is down", peer);
    return 7;
  }
  return mb_post(r, 1, peer, (void*)data, bytes, handle);
}

static int mb_post_recv(void* ctx, int peer, void* data, size_t bytes, void** handle) {
  return mb_post((mb_rank*)ctx, 0, peer, data, bytes, handle);
}

static int mb_test(void* ctx, void* handle, int* done) {
  mb_rank* r = (mb_rank*)ctx;
  mb_world* w = r->world;
  mb_transfer* t = (mb_transfer*)handle;
  int rc = 0;
  r->tests++;
  *done = 0;
  pthread_mutex_lock(&w->lock);
  if (t->is_send) {
    *done = t->consumed;
  } else {
    mb_transfer* s = w->head[t->peer][r->rank];
    if (s != NULL) {
      if (s->bytes != t->bytes) {
        /* as gloo or NCCL: the receive must name the exact size */
        snprintf(r->error, sizeof r->error, "a message of %zu bytes for a receive of %zu",
                 s->bytes, t->bytes);
        rc = 9;
      } else {
        memcpy(t->data, s->data, s->bytes);
        mb_dequeue(w, t->peer, r->rank, s);
        s->consumed = 1;
        *done = 1;
      }
    }
  }
  if (rc == 0 && !*done && w->failed) {
    snprintf(r->error, sizeof r->error, "the group was aborted: %s", w->failure);
    rc = 5;
  }
  if (*done) mb_unlink_live(r, t);
  pthread_mutex_unlock(&w->lock);
  if (*done) free(t); /* qc never passes a finished handle again */
  return rc;
}

static int mb_wait(void* ctx, void* handle, double seconds, int* done) {
  mb_rank* r = (mb_rank*)ctx;
  struct timespec pause = {0, 200000}; /* 0.2 ms */
  double waited = 0;
  int rc;
  r->waits++;
  /* recorded, not asserted: cmocka's assertions work on the main thread only */
  if (!(seconds > 0 && seconds <= 0.1)) r->bad_wait_slices++;
  for (;;) {
    rc = mb_test(ctx, handle, done);
    if (rc != 0 || *done || waited >= seconds) return rc;
    nanosleep(&pause, NULL);
    waited += 2e-4;
  }
}

static void mb_cancel(void* ctx, void* handle) {
  mb_rank* r = (mb_rank*)ctx;
  mb_transfer* t = (mb_transfer*)handle;
  pthread_mutex_lock(&r->world->lock);
  if (t->is_send && t->queued) mb_dequeue(r->world, r->rank, t->peer, t);
  mb_unlink_live(r, t);
  r->cancels++;
  pthread_mutex_unlock(&r->world->lock);
  free(t);
}

static void mb_abort(void* ctx, int status, const char* reason) {
  mb_rank* r = (mb_rank*)ctx;
  pthread_mutex_lock(&r->world->lock);
  r->aborts++;
  r->abort_status = status;
  if (!r->world->failed) {
    r->world->failed = 1;
    snprintf(r->world->failure, sizeof r->world->failure, "rank %d: %s", r->rank, reason);
  }
  pthread_mutex_unlock(&r->world->lock);
}

static const char* mb_error_message(void* ctx) { return ((mb_rank*)ctx)->error; }

/* Releases every transfer qc did not see finish nor cancelled. */
static void mb_destroy(void* ctx) {
  mb_rank* r = (mb_rank*)ctx;
  pthread_mutex_lock(&r->world->lock);
  while (r->live != NULL) {
    mb_transfer* t = r->live;
    if (t->is_send && t->queued) mb_dequeue(r->world, r->rank, t->peer, t);
    mb_unlink_live(r, t);
    free(t);
  }
  r->destroys++;
  pthread_mutex_unlock(&r->world->lock);
}

enum { MB_WAIT = 1, MB_CANCEL = 2, MB_ANY_THREAD = 4, MB_ABORT = 8 };

static qc_transport_callbacks_t mb_callbacks(mb_rank* r, int options) {
  qc_transport_callbacks_t cb;
  assert_int_equal(qc_transport_callbacks_init(&cb), QC_SUCCESS);
  cb.context = r;
  cb.rank = r->rank;
  cb.size = r->world->size;
  cb.any_thread = (options & MB_ANY_THREAD) != 0;
  cb.post_send = mb_post_send;
  cb.post_recv = mb_post_recv;
  cb.test = mb_test;
  if (options & MB_WAIT) cb.wait = mb_wait;
  if (options & MB_CANCEL) cb.cancel = mb_cancel;
  if (options & MB_ABORT) cb.abort = mb_abort;
  cb.error_message = mb_error_message;
  cb.destroy = mb_destroy;
  return cb;
}

/* A group of `n` communicators over the mailbox library. */
static void mb_group(mb_world* w, mb_rank* ranks, qc_comm_t* comms, int n, int options,
                     double timeout) {
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  int i;
  cfg.transport = QC_TRANSPORT_CALLBACKS;
  cfg.timeout_seconds = timeout;
  mb_world_init(w, n);
  for (i = 0; i < n; ++i) {
    qc_transport_callbacks_t cb;
    memset(&ranks[i], 0, sizeof ranks[i]);
    ranks[i].world = w;
    ranks[i].rank = i;
    cb = mb_callbacks(&ranks[i], options);
    QCT_OK(qc_comm_create_callbacks(&cb, &cfg, &comms[i]));
  }
}

/* ---- one program, run by every rank of a group --------------------------- */

#define PROG_COUNT 1000   /* elements per rank of each collective */
#define PROG_STEPS 3
#define PROG_RESULTS 7    /* outputs per step */

typedef struct prog_rank {
  qc_comm_t comm;
  int rank, nranks;
  int nonblocking;
  qc_status_t status;
  char message[QCT_MSG_MAX];
  float* out; /* PROG_STEPS x PROG_RESULTS x (PROG_COUNT * nranks) floats */
} prog_rank;

static float prog_input(int rank, int step, int i, int which) {
  /* deterministic, rank-dependent, with a few large values for topk */
  unsigned x = (unsigned)(rank * 7919 + step * 104729 + which * 15485863) ^ (unsigned)(i * 2654435761u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return ((float)(x % 20001u) - 10000.0f) / 1000.0f;
}

static qc_status_t prog_allreduce(prog_rank* p, const float* in, float* out, qc_reduce_op_t op,
                                  const char* layer, qc_error_buffer_t eb) {
  qc_request_t req = NULL;
  qc_status_t st;
  if (!p->nonblocking) {
    return qc_allreduce(p->comm, in, out, PROG_COUNT, QC_DTYPE_FLOAT32, op, layer, eb, NULL);
  }
  st = qc_iallreduce(p->comm, in, out, PROG_COUNT, QC_DTYPE_FLOAT32, op, layer, eb, &req);
  if (st != QC_SUCCESS) return st;
  st = qc_request_wait(req);
  qc_request_free(req);
  return st;
}

static qc_status_t prog_run(prog_rank* p) {
  static const char* layers[4] = {"mm4", "q4", "one", "plain"};
  const size_t all = (size_t)PROG_COUNT * (size_t)p->nranks;
  float* in = (float*)malloc(all * sizeof(float));
  qc_error_buffer_t eb[4] = {NULL, NULL, NULL, NULL};
  qc_policy_t pol = QC_POLICY_INIT;
  qc_status_t st = QC_SUCCESS;
  int step, k;
  size_t i;
  if (in == NULL) return QC_ERROR_OUT_OF_MEMORY;
  pol.min_compress_bytes = 0;
  pol.codec = QC_CODEC_MINMAX; pol.bits = 4; pol.error_feedback = 1; pol.algorithm = QC_ALGO_RING;
  if (st == QC_SUCCESS) st = qc_comm_set_layer_policy(p->comm, "mm4", &pol);
  pol.codec = QC_CODEC_QSGD; pol.rounding = QC_ROUND_STOCHASTIC; pol.seed = 11;
  pol.algorithm = QC_ALGO_SRA; pol.error_feedback = 0;
  if (st == QC_SUCCESS) st = qc_comm_set_layer_policy(p->comm, "q4", &pol);
  pol.codec = QC_CODEC_ONEBIT; pol.rounding = QC_ROUND_NEAREST_EVEN; pol.error_feedback = 1;
  pol.algorithm = QC_ALGO_RECURSIVE_DOUBLING; pol.group_size = 2;
  if (st == QC_SUCCESS) st = qc_comm_set_layer_policy(p->comm, "one", &pol);
  pol.codec = QC_CODEC_MINMAX; pol.bits = 8; pol.error_feedback = 0; pol.algorithm = QC_ALGO_AUTO;
  if (st == QC_SUCCESS) st = qc_comm_set_layer_policy(p->comm, "*", &pol);
  for (k = 0; k < 4 && st == QC_SUCCESS; ++k) {
    st = qc_error_buffer_create(p->comm, PROG_COUNT, &eb[k]);
  }
  for (step = 0; step < PROG_STEPS && st == QC_SUCCESS; ++step) {
    float* out = p->out + (size_t)step * PROG_RESULTS * all;
    for (k = 0; k < 4 && st == QC_SUCCESS; ++k) {
      for (i = 0; i < PROG_COUNT; ++i) in[i] = prog_input(p->rank, step, (int)i, k);
      st = prog_allreduce(p, in, out + (size_t)k * all, k == 1 ? QC_OP_SUM : QC_OP_AVG, layers[k],
                          k == 3 ? NULL : eb[k]);
    }
    for (i = 0; i < all; ++i) in[i] = prog_input(p->rank, step, (int)i, 4);
    if (st == QC_SUCCESS) {
      st = qc_reduce_scatter(p->comm, in, out + 4 * all, PROG_COUNT, QC_DTYPE_FLOAT32, QC_OP_SUM,
                             "rs", NULL, NULL);
    }
    if (st == QC_SUCCESS) {
      st = qc_allgather(p->comm, in, out + 5 * all, PROG_COUNT, QC_DTYPE_FLOAT32, "ag", NULL, NULL);
    }
    if (st == QC_SUCCESS) {
      st = qc_alltoall(p->comm, in, out + 6 * all, PROG_COUNT, QC_DTYPE_FLOAT32, "a2a", NULL);
    }
    if (st == QC_SUCCESS) {
      /* in place over the reduce-scatter's block: root nranks-1's */
      st = qc_broadcast(p->comm, out + 4 * all, out + 4 * all, PROG_COUNT, QC_DTYPE_FLOAT32,
                        p->nranks - 1, "bc", NULL);
    }
  }
  for (k = 0; k < 4; ++k) qc_error_buffer_destroy(eb[k]);
  free(in);
  return st;
}

static void* prog_thread(void* arg) {
  prog_rank* p = (prog_rank*)arg;
  p->status = prog_run(p);
  if (p->status != QC_SUCCESS) qct_copy_last_error(p->message, sizeof p->message);
  return NULL;
}

/* Runs the program on every rank of `comms` (one thread each); out[r] gets
 * rank r's results. */
static void prog_group(qc_comm_t* comms, int n, int nonblocking, float** out) {
  prog_rank p[MB_MAX_RANKS];
  pthread_t threads[MB_MAX_RANKS];
  const size_t floats = (size_t)PROG_STEPS * PROG_RESULTS * PROG_COUNT * (size_t)n;
  int r;
  for (r = 0; r < n; ++r) {
    memset(&p[r], 0, sizeof p[r]);
    p[r].comm = comms[r];
    p[r].rank = r;
    p[r].nranks = n;
    p[r].nonblocking = nonblocking;
    out[r] = (float*)calloc(floats, sizeof(float));
    assert_non_null(out[r]);
    p[r].out = out[r];
    assert_int_equal(pthread_create(&threads[r], NULL, prog_thread, &p[r]), 0);
  }
  for (r = 0; r < n; ++r) pthread_join(threads[r], NULL);
  for (r = 0; r < n; ++r) {
    if (p[r].status != QC_SUCCESS) {
      print_error("rank %d of %d: %s: %s\n", r, n, qc_status_string(p[r].status), p[r].message);
    }
    assert_int_equal(p[r].status, QC_SUCCESS);
  }
}

/* The program over the callbacks (with `options`) equals, bit for bit, the
 * program over the local transport, on every rank. */
static void check_same_as_local(int n, int options, int nonblocking) {
  mb_world world;
  mb_rank ranks[MB_MAX_RANKS];
  qc_comm_t cb_comms[MB_MAX_RANKS], local_comms[MB_MAX_RANKS];
  float* cb_out[MB_MAX_RANKS];
  float* local_out[MB_MAX_RANKS];
  const size_t floats = (size_t)PROG_STEPS * PROG_RESULTS * PROG_COUNT * (size_t)n;
  int r;
  mb_group(&world, ranks, cb_comms, n, options, 60.0);
  QCT_OK(qc_comm_create_local(n, local_comms));
  prog_group(cb_comms, n, nonblocking, cb_out);
  prog_group(local_comms, n, nonblocking, local_out);
  for (r = 0; r < n; ++r) {
    size_t i, first = floats;
    for (i = 0; i < floats && first == floats; ++i) {
      if (memcmp(&cb_out[r][i], &local_out[r][i], sizeof(float)) != 0) first = i;
    }
    if (first != floats) {
      print_error("n=%d options=%d nonblocking=%d rank %d: element %zu is %a over the callbacks, "
                  "%a over the local transport\n",
                  n, options, nonblocking, r, first, (double)cb_out[r][first],
                  (double)local_out[r][first]);
    }
    assert_true(first == floats);
    if (n > 1) assert_true(ranks[r].tests > 0);
    if ((options & MB_WAIT) && n > 1) assert_true(ranks[r].waits > 0);
    assert_int_equal(ranks[r].bad_wait_slices, 0);
    assert_int_equal(ranks[r].aborts, 0);
    assert_int_equal(ranks[r].live_count, 0); /* every transfer finished */
    free(cb_out[r]);
    free(local_out[r]);
  }
  for (r = 0; r < n; ++r) {
    QCT_OK(qc_comm_destroy(cb_comms[r]));
    QCT_OK(qc_comm_destroy(local_comms[r]));
    assert_int_equal(ranks[r].destroys, 1);
  }
  pthread_mutex_destroy(&world.lock);
}

static void test_same_bits_as_local_transport(void** state) {
  static const int sizes[] = {1, 2, 3, 5};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    check_same_as_local(sizes[i], MB_CANCEL | MB_ABORT, 0);
  }
}

static void test_same_bits_with_wait_callback(void** state) {
  (void)state;
  check_same_as_local(3, MB_WAIT | MB_CANCEL | MB_ABORT, 0);
}

static void test_nonblocking_on_progress_thread(void** state) {
  (void)state;
  check_same_as_local(3, MB_ANY_THREAD | MB_ABORT, 1);
}

static void test_nonblocking_without_progress_thread(void** state) {
  (void)state;
  check_same_as_local(2, MB_ABORT, 1);
}

/* ---- failures ------------------------------------------------------------- */

typedef struct one_call {
  qc_comm_t comm;
  qc_reduce_op_t op;
  size_t count;
  qc_status_t status;
  char message[QCT_MSG_MAX];
} one_call;

static void* one_call_thread(void* arg) {
  one_call* c = (one_call*)arg;
  float data[4096];
  qc_policy_t pol = QC_POLICY_INIT;
  size_t i;
  for (i = 0; i < c->count; ++i) data[i] = (float)i;
  pol.codec = QC_CODEC_MINMAX;
  pol.bits = 8;
  pol.min_compress_bytes = 0;
  c->status = qc_comm_set_layer_policy(c->comm, "*", &pol);
  if (c->status == QC_SUCCESS) {
    c->status = qc_allreduce(c->comm, data, data, c->count, QC_DTYPE_FLOAT32, c->op, "x", NULL,
                             NULL);
  }
  qct_copy_last_error(c->message, sizeof c->message);
  return NULL;
}

/* Ranks [0, callers) of an n-rank group each make one allreduce. */
static void run_calls(one_call* calls, qc_comm_t* comms, int callers) {
  pthread_t threads[MB_MAX_RANKS];
  int r;
  for (r = 0; r < callers; ++r) {
    calls[r].comm = comms[r];
    if (calls[r].count == 0) calls[r].count = 1000;
    assert_int_equal(pthread_create(&threads[r], NULL, one_call_thread, &calls[r]), 0);
  }
  for (r = 0; r < callers; ++r) pthread_join(threads[r], NULL);
}

static void check_timeout(int options) {
  mb_world world;
  mb_rank ranks[3];
  qc_comm_t comms[3];
  one_call calls[3];
  int r;
  memset(calls, 0, sizeof calls);
  mb_group(&world, ranks, comms, 3, options, 0.3);
  run_calls(calls, comms, 2); /* rank 2 never calls */
  for (r = 0; r < 2; ++r) {
    qc_status_t async_error = QC_SUCCESS;
    /* the first to time out tells the other through abort: either status */
    if (calls[r].status != QC_ERROR_TIMEOUT) {
      assert_int_equal(calls[r].status, QC_ERROR_TRANSPORT);
      assert_non_null(strstr(calls[r].message, "aborted"));
    }
    assert_int_equal(ranks[r].aborts, 1);
    QCT_OK(qc_comm_get_async_error(comms[r], &async_error));
    assert_int_equal(async_error, calls[r].status);
    if (options & MB_CANCEL) {
      assert_true(ranks[r].cancels > 0);
      assert_int_equal(ranks[r].live_count, 0);
    }
  }
  assert_true(calls[0].status == QC_ERROR_TIMEOUT || calls[1].status == QC_ERROR_TIMEOUT);
  assert_int_equal(ranks[2].aborts, 0);
  for (r = 0; r < 3; ++r) {
    QCT_OK(qc_comm_destroy(comms[r]));
    assert_int_equal(ranks[r].destroys, 1);
    assert_int_equal(ranks[r].live_count, 0); /* destroy released the rest */
  }
  pthread_mutex_destroy(&world.lock);
}

static void test_timeout_aborts_and_cancels(void** state) {
  (void)state;
  check_timeout(MB_CANCEL | MB_ABORT);
}

static void test_timeout_without_cancel_keeps_memory_until_destroy(void** state) {
  (void)state;
  check_timeout(MB_ABORT | MB_WAIT);
}

static void test_failing_callback_names_code_and_message(void** state) {
  mb_world world;
  mb_rank ranks[2];
  qc_comm_t comms[2];
  one_call calls[2];
  qc_status_t async_error = QC_SUCCESS;
  (void)state;
  memset(calls, 0, sizeof calls);
  mb_group(&world, ranks, comms, 2, MB_CANCEL | MB_ABORT, 60.0);
  ranks[0].fail_sends = 1;
  run_calls(calls, comms, 2);
  assert_int_equal(calls[0].status, QC_ERROR_TRANSPORT);
  assert_non_null(strstr(calls[0].message, "post_send"));
  assert_non_null(strstr(calls[0].message, "returned 7"));
  assert_non_null(strstr(calls[0].message, "link to rank 1 is down"));
  /* rank 1 learns it through the library (abort), long before 60 s */
  assert_int_equal(calls[1].status, QC_ERROR_TRANSPORT);
  assert_non_null(strstr(calls[1].message, "aborted"));
  assert_int_equal(ranks[0].abort_status, QC_ERROR_TRANSPORT);
  QCT_OK(qc_comm_get_async_error(comms[0], &async_error));
  assert_int_equal(async_error, QC_ERROR_TRANSPORT);
  /* a broken group stays broken */
  run_calls(calls, comms, 1);
  assert_int_equal(calls[0].status, QC_ERROR_TRANSPORT);
  QCT_OK(qc_comm_destroy(comms[0]));
  QCT_OK(qc_comm_destroy(comms[1]));
  pthread_mutex_destroy(&world.lock);
}

static void test_disagreeing_ranks_get_mismatch(void** state) {
  mb_world world;
  mb_rank ranks[2];
  qc_comm_t comms[2];
  one_call calls[2];
  int r;
  (void)state;
  memset(calls, 0, sizeof calls);
  mb_group(&world, ranks, comms, 2, MB_CANCEL | MB_ABORT, 60.0);
  calls[0].op = QC_OP_SUM;
  calls[1].op = QC_OP_AVG; /* same sizes on the wire, another call */
  run_calls(calls, comms, 2);
  for (r = 0; r < 2; ++r) {
    if (calls[r].status != QC_ERROR_MISMATCH) {
      print_error("rank %d: %s: %s\n", r, qc_status_string(calls[r].status), calls[r].message);
    }
  }
  /* the first rank to look sees qc's header disagree; the other may learn
     it from the library's abort */
  assert_true(calls[0].status == QC_ERROR_MISMATCH || calls[1].status == QC_ERROR_MISMATCH);
  for (r = 0; r < 2; ++r) {
    assert_true(calls[r].status == QC_ERROR_MISMATCH || calls[r].status == QC_ERROR_TRANSPORT);
    QCT_OK(qc_comm_destroy(comms[r]));
  }
  pthread_mutex_destroy(&world.lock);
}

static void test_destroy_interrupts_a_waiting_call(void** state) {
  mb_world world;
  mb_rank ranks[2];
  qc_comm_t comms[2];
  one_call call;
  pthread_t thread;
  struct timespec pause = {0, 100000000}; /* 0.1 s */
  (void)state;
  memset(&call, 0, sizeof call);
  mb_group(&world, ranks, comms, 2, MB_WAIT | MB_ABORT, 600.0);
  call.comm = comms[0];
  call.count = 1000;
  assert_int_equal(pthread_create(&thread, NULL, one_call_thread, &call), 0);
  nanosleep(&pause, NULL); /* rank 0 is (most likely) waiting for rank 1 by now */
  QCT_OK(qc_comm_destroy(comms[0]));
  pthread_join(thread, NULL);
  /* destroyed before the call started it is a dead handle, else interrupted */
  if (call.status != QC_ERROR_INVALID_ARGUMENT) {
    assert_int_equal(call.status, QC_ERROR_TRANSPORT);
    assert_non_null(strstr(call.message, "destroyed"));
  }
  assert_int_equal(ranks[0].destroys, 1);
  assert_int_equal(ranks[0].live_count, 0);
  QCT_OK(qc_comm_destroy(comms[1]));
  pthread_mutex_destroy(&world.lock);
}

/* ---- arguments -------------------------------------------------------------- */

static int never_post(void* ctx, int peer, const void* data, size_t bytes, void** handle) {
  (void)ctx; (void)peer; (void)data; (void)bytes; (void)handle;
  return 1;
}
static int never_recv(void* ctx, int peer, void* data, size_t bytes, void** handle) {
  (void)ctx; (void)peer; (void)data; (void)bytes; (void)handle;
  return 1;
}
static int never_test(void* ctx, void* handle, int* done) {
  (void)ctx; (void)handle;
  *done = 0;
  return 1;
}
static int destroy_calls;
static void count_destroy(void* ctx) {
  (void)ctx;
  destroy_calls++;
}

static qc_transport_callbacks_t minimal_callbacks(void) {
  qc_transport_callbacks_t cb = QC_TRANSPORT_CALLBACKS_INIT;
  cb.post_send = never_post;
  cb.post_recv = never_recv;
  cb.test = never_test;
  cb.destroy = count_destroy;
  cb.size = 4;
  cb.rank = 2;
  return cb;
}

static void test_init_fills_defaults(void** state) {
  qc_transport_callbacks_t cb;
  (void)state;
  memset(&cb, 0xA5, sizeof cb);
  QCT_OK(qc_transport_callbacks_init(&cb));
  assert_int_equal(cb.struct_size, sizeof cb);
  assert_null(cb.context);
  assert_int_equal(cb.rank, 0);
  assert_int_equal(cb.size, 1);
  assert_int_equal(cb.any_thread, 0);
  assert_null(cb.post_send);
  assert_null(cb.test);
  assert_null(cb.destroy);
  QCT_INVALID(qc_transport_callbacks_init_sized(NULL, sizeof cb), "qc_transport_callbacks_init_sized",
              "callbacks");
  QCT_INVALID(qc_transport_callbacks_init_sized(&cb, 8), "qc_transport_callbacks_init_sized",
              "struct_size");
  QCT_FAILS(qc_transport_callbacks_init_sized(&cb, sizeof cb + 8), QC_ERROR_VERSION,
            "qc_transport_callbacks_init_sized", "struct_size");
}

static void test_create_checks_its_arguments(void** state) {
  qc_transport_callbacks_t cb = minimal_callbacks();
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  int rank = -1, size = -1;
  (void)state;
  destroy_calls = 0;
  QCT_INVALID(qc_comm_create_callbacks(NULL, NULL, &comm), "qc_comm_create_callbacks", "callbacks");
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, NULL), "qc_comm_create_callbacks", "comm");
  cb.post_send = NULL;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "post_send");
  cb = minimal_callbacks();
  cb.post_recv = NULL;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "post_recv");
  cb = minimal_callbacks();
  cb.test = NULL;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "test");
  cb = minimal_callbacks();
  cb.size = 0;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "size");
  cb = minimal_callbacks();
  cb.rank = 4;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "rank");
  cb.rank = -1;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "rank");
  cb = minimal_callbacks();
  cb.any_thread = 2;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "any_thread");
  cb = minimal_callbacks();
  cb.struct_size = 8;
  QCT_INVALID(qc_comm_create_callbacks(&cb, NULL, &comm), "qc_comm_create_callbacks", "struct_size");
  cb = minimal_callbacks();
  QCT_INVALID(qc_comm_create_callbacks(&cb, &cfg, &comm), "qc_comm_create_callbacks", "transport");
  cfg.transport = QC_TRANSPORT_CALLBACKS;
  cfg.timeout_seconds = -1;
  QCT_INVALID(qc_comm_create_callbacks(&cb, &cfg, &comm), "qc_comm_create_callbacks",
              "timeout_seconds");
  /* qc_comm_create cannot make one: it has no callbacks */
  cfg.timeout_seconds = 5;
  QCT_INVALID(qc_comm_create(&cfg, &comm), "qc_comm_create", "needs the callbacks");
  assert_null(comm);
  assert_int_equal(destroy_calls, 0); /* failed creations leave context to the caller */
  assert_string_equal(qc_transport_name(QC_TRANSPORT_CALLBACKS), "callbacks");

  /* a good one: local, nothing sent; rank and size as given */
  QCT_OK(qc_comm_create_callbacks(&cb, &cfg, &comm));
  QCT_OK(qc_comm_rank(comm, &rank));
  QCT_OK(qc_comm_size(comm, &size));
  assert_int_equal(rank, 2);
  assert_int_equal(size, 4);
  assert_int_equal(destroy_calls, 0);
  QCT_OK(qc_comm_destroy(comm));
  assert_int_equal(destroy_calls, 1);
}

static void test_failed_post_fails_the_call_at_once(void** state) {
  /* minimal_callbacks' post_send fails: the call ends with its code, not a timeout */
  qc_transport_callbacks_t cb = minimal_callbacks();
  qc_comm_t comm = NULL;
  float data[64] = {0};
  qc_status_t async_error = QC_SUCCESS;
  (void)state;
  cb.size = 2;
  cb.rank = 0;
  QCT_OK(qc_comm_create_callbacks(&cb, NULL, &comm));
  QCT_FAILS(qc_allreduce(comm, data, data, 64, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL),
            QC_ERROR_TRANSPORT, "qc_allreduce", "returned 1");
  QCT_OK(qc_comm_get_async_error(comm, &async_error));
  assert_int_equal(async_error, QC_ERROR_TRANSPORT);
  QCT_OK(qc_comm_destroy(comm));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init_fills_defaults),
      cmocka_unit_test(test_create_checks_its_arguments),
      cmocka_unit_test(test_failed_post_fails_the_call_at_once),
      cmocka_unit_test(test_same_bits_as_local_transport),
      cmocka_unit_test(test_same_bits_with_wait_callback),
      cmocka_unit_test(test_nonblocking_on_progress_thread),
      cmocka_unit_test(test_nonblocking_without_progress_thread),
      cmocka_unit_test(test_timeout_aborts_and_cancels),
      cmocka_unit_test(test_timeout_without_cancel_keeps_memory_until_destroy),
      cmocka_unit_test(test_failing_callback_names_code_and_message),
      cmocka_unit_test(test_disagreeing_ranks_get_mismatch),
      cmocka_unit_test(test_destroy_interrupts_a_waiting_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
