/*
 * qc_abi_test.h - small helpers shared by the cmocka tests of the C ABI.
 *
 * Everything here is plain C99 plus POSIX threads. cmocka's assertions
 * longjmp out of the test, so they are only used on the main thread: code
 * that runs on rank threads records what it saw and the main thread checks.
 */
#ifndef QC_ABI_TEST_H
#define QC_ABI_TEST_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qc.h"

/* ------------------------------------------------------------------------ */
/* Statuses and messages                                                     */
/* ------------------------------------------------------------------------ */

#define QCT_MSG_MAX 1024

/* Copy of the calling thread's qc_last_error(), taken before any other qc
 * call (the pointer is only valid until the thread's next qc call). */
static inline void qct_copy_last_error(char* out, size_t cap) {
  const char* msg = qc_last_error();
  if (msg == NULL) {
    snprintf(out, cap, "(qc_last_error() returned NULL)");
  } else {
    snprintf(out, cap, "%s", msg);
  }
}

static inline void qct_check_status(qc_status_t got, qc_status_t want, const char* expr,
                                    const char* file, int line) {
  if (got != want) {
    char msg[QCT_MSG_MAX];
    qct_copy_last_error(msg, sizeof msg);
    print_error("%s\n    returned %s (%d), expected %s (%d)\n    qc_last_error(): \"%s\"\n",
                expr, qc_status_string(got), (int)got, qc_status_string(want), (int)want,
                msg);
    _fail(file, line);
  }
}

/* True when `msg` mentions `arg` somewhere other than inside the function
 * name (so 'comm' is not found just because the function is qc_comm_rank). */
static inline int qct_message_names(const char* msg, const char* func, const char* arg) {
  char copy[QCT_MSG_MAX];
  snprintf(copy, sizeof copy, "%s", msg);
  if (func != NULL && func[0] != '\0') {
    size_t flen = strlen(func);
    char* hit = copy;
    while ((hit = strstr(hit, func)) != NULL) {
      memset(hit, ' ', flen);
      hit += flen;
    }
  }
  return strstr(copy, arg) != NULL;
}

/* `msg` (a failed call's message) must not be empty and must name `func`
 * (if not NULL) and `arg` (if not NULL). */
static inline void qct_check_message_text(const char* msg, const char* func, const char* arg,
                                          const char* file, int line) {
  if (msg == NULL) {
    print_error("qc_last_error() returned NULL after a failed call\n");
    _fail(file, line);
    return;
  }
  if (msg[0] == '\0') {
    print_error("qc_last_error() is empty after a failed call (expected %s / '%s')\n",
                func ? func : "-", arg ? arg : "-");
    _fail(file, line);
    return;
  }
  if (func != NULL && strstr(msg, func) == NULL) {
    print_error("qc_last_error() does not name the function %s:\n    \"%s\"\n", func, msg);
    _fail(file, line);
    return;
  }
  if (arg != NULL && !qct_message_names(msg, func, arg)) {
    print_error("qc_last_error() does not name the argument '%s':\n    \"%s\"\n", arg, msg);
    _fail(file, line);
    return;
  }
}

/* The thread's last message, checked as above. */
static inline void qct_check_message(const char* func, const char* arg, const char* file,
                                     int line) {
  char msg[QCT_MSG_MAX];
  const char* raw = qc_last_error();
  if (raw != NULL) snprintf(msg, sizeof msg, "%s", raw);
  qct_check_message_text(raw != NULL ? msg : NULL, func, arg, file, line);
}

/* A call's status and message, captured so that a test can release what it
 * holds before it asserts (a failing assertion must not leak). */
typedef struct qct_outcome {
  qc_status_t status;
  char message[QCT_MSG_MAX];
} qct_outcome;

static inline qct_outcome qct_capture(qc_status_t status) {
  qct_outcome o;
  o.status = status;
  qct_copy_last_error(o.message, sizeof o.message);
  return o;
}

static inline void qct_check_outcome(const qct_outcome* o, qc_status_t want, const char* func,
                                     const char* arg, const char* file, int line) {
  if (o->status != want) {
    print_error("returned %s (%d), expected %s (%d)\n    qc_last_error(): \"%s\"\n",
                qc_status_string(o->status), (int)o->status, qc_status_string(want),
                (int)want, o->message);
    _fail(file, line);
    return;
  }
  if (want != QC_SUCCESS) qct_check_message_text(o->message, func, arg, file, line);
}
#define QCT_CHECK_OUTCOME(o, want, func, arg) \
  qct_check_outcome(&(o), (want), (func), (arg), __FILE__, __LINE__)

#define QCT_STATUS(expr, want) qct_check_status((expr), (want), #expr, __FILE__, __LINE__)
#define QCT_OK(expr) QCT_STATUS((expr), QC_SUCCESS)
/* The call fails with `want`, and qc_last_error() names `func` and `arg`. */
#define QCT_FAILS(expr, want, func, arg)                        \
  do {                                                          \
    QCT_STATUS((expr), (want));                                 \
    qct_check_message((func), (arg), __FILE__, __LINE__);       \
  } while (0)
#define QCT_INVALID(expr, func, arg) QCT_FAILS((expr), QC_ERROR_INVALID_ARGUMENT, (func), (arg))

/* ------------------------------------------------------------------------ */
/* Policies: bad struct sizes and bad field values                           */
/* ------------------------------------------------------------------------ */

/* A call under test that takes (or fills) one policy. */
typedef qc_status_t (*qct_policy_call_fn)(qc_policy_t* policy, void* ctx);

/* Room for a policy whose struct_size claims more bytes than this header's. */
typedef struct qct_big_policy {
  qc_policy_t policy;
  unsigned char extra[64];
} qct_big_policy;

/* Case `i` of the invalid-field table: writes a default policy with one bad
 * field into *p, its name into *field and a description into *desc.
 * Returns 0 past the end of the table. */
static inline int qct_bad_policy_case(int i, qc_policy_t* p, const char** field,
                                      const char** desc) {
  const qc_policy_t def = QC_POLICY_INIT;
  *p = def;
  switch (i) {
    case 0: p->codec = (qc_codec_t)99; *field = "codec"; *desc = "codec 99"; return 1;
    case 1: p->codec = (qc_codec_t)-1; *field = "codec"; *desc = "codec -1"; return 1;
    case 2: p->bits = 0; *field = "bits"; *desc = "bits 0"; return 1;
    case 3: p->bits = 9; *field = "bits"; *desc = "bits 9"; return 1;
    case 4: p->bits = -4; *field = "bits"; *desc = "bits -4"; return 1;
    case 5: p->bucket_size = 0; *field = "bucket_size"; *desc = "bucket_size 0"; return 1;
    case 6: p->bucket_size = -128; *field = "bucket_size"; *desc = "bucket_size -128"; return 1;
    case 7: p->rounding = (qc_rounding_t)7; *field = "rounding"; *desc = "rounding 7"; return 1;
    case 8: p->algorithm = (qc_algorithm_t)42; *field = "algorithm"; *desc = "algorithm 42"; return 1;
    case 9: p->error_feedback = 2; *field = "error_feedback"; *desc = "error_feedback 2"; return 1;
    case 10: p->error_feedback = -1; *field = "error_feedback"; *desc = "error_feedback -1"; return 1;
    case 11: p->group_size = 0; *field = "group_size"; *desc = "group_size 0"; return 1;
    case 12: p->topk_ratio = 0.0f; *field = "topk_ratio"; *desc = "topk_ratio 0"; return 1;
    case 13: p->topk_ratio = 1.5f; *field = "topk_ratio"; *desc = "topk_ratio 1.5"; return 1;
    case 14: p->topk_ratio = (float)NAN; *field = "topk_ratio"; *desc = "topk_ratio NaN"; return 1;
    case 15: p->topk_ratio = -0.5f; *field = "topk_ratio"; *desc = "topk_ratio -0.5"; return 1;
    case 16: p->scale_update_period = 0; *field = "scale_update_period"; *desc = "scale_update_period 0"; return 1;
    default: return 0;
  }
}

/* Every case of the invalid-field table gives QC_ERROR_INVALID_ARGUMENT and a
 * message that names `func` and the field. */
static inline void qct_check_bad_policy_fields(const char* func, qct_policy_call_fn call,
                                               void* ctx, const char* file, int line) {
  int i;
  int failures = 0;
  for (i = 0;; ++i) {
    qc_policy_t p;
    const char* field = NULL;
    const char* desc = NULL;
    qc_status_t st;
    char msg[QCT_MSG_MAX];
    if (!qct_bad_policy_case(i, &p, &field, &desc)) break;
    st = call(&p, ctx);
    qct_copy_last_error(msg, sizeof msg);
    if (st != QC_ERROR_INVALID_ARGUMENT) {
      print_error("%s with policy %s returned %s, expected QC_ERROR_INVALID_ARGUMENT"
                  " (message \"%s\")\n", func, desc, qc_status_string(st), msg);
      ++failures;
    } else if (strstr(msg, func) == NULL || !qct_message_names(msg, func, field)) {
      print_error("%s with policy %s: message does not name %s and '%s': \"%s\"\n", func,
                  desc, func, field, msg);
      ++failures;
    }
  }
  if (failures != 0) _fail(file, line);
}
#define QCT_CHECK_BAD_POLICY_FIELDS(func, call, ctx) \
  qct_check_bad_policy_fields((func), (call), (ctx), __FILE__, __LINE__)

/* The first released qc_policy_t layout ended before min_compress_bytes. */
#define QCT_POLICY_V0_SIZE offsetof(qc_policy_t, min_compress_bytes)

/* struct_size 0, 1 and v0-1 give QC_ERROR_INVALID_ARGUMENT, sizeof+8
 * gives QC_ERROR_VERSION; each names `func` and struct_size. */
static inline void qct_check_policy_struct_sizes(const char* func, qct_policy_call_fn call,
                                                 void* ctx, const char* file, int line) {
  static const size_t too_small[] = {0, 1, QCT_POLICY_V0_SIZE - 1};
  size_t k;
  int failures = 0;
  for (k = 0; k < sizeof too_small / sizeof too_small[0] + 1; ++k) {
    qct_big_policy big;
    const qc_policy_t def = QC_POLICY_INIT;
    int is_large = (k == sizeof too_small / sizeof too_small[0]);
    qc_status_t want = is_large ? QC_ERROR_VERSION : QC_ERROR_INVALID_ARGUMENT;
    qc_status_t st;
    char msg[QCT_MSG_MAX];
    memset(&big, 0, sizeof big);
    big.policy = def;
    big.policy.struct_size = is_large ? sizeof(qc_policy_t) + 8 : too_small[k];
    st = call(&big.policy, ctx);
    qct_copy_last_error(msg, sizeof msg);
    if (st != want) {
      print_error("%s with policy struct_size %zu returned %s, expected %s (message \"%s\")\n",
                  func, is_large ? sizeof(qc_policy_t) + 8 : too_small[k],
                  qc_status_string(st), qc_status_string(want), msg);
      ++failures;
    } else if (strstr(msg, func) == NULL || !qct_message_names(msg, func, "struct_size")) {
      print_error("%s with policy struct_size %zu: message does not name %s and "
                  "'struct_size': \"%s\"\n",
                  func, is_large ? sizeof(qc_policy_t) + 8 : too_small[k], func, msg);
      ++failures;
    }
  }
  if (failures != 0) _fail(file, line);
}
#define QCT_CHECK_POLICY_STRUCT_SIZES(func, call, ctx) \
  qct_check_policy_struct_sizes((func), (call), (ctx), __FILE__, __LINE__)

/* Field-by-field comparison (no memcmp: padding bytes are unspecified). */
static inline void qct_assert_policy_equal(const qc_policy_t* got, const qc_policy_t* want,
                                           const char* file, int line) {
  int bad = 0;
#define QCT_CMP_FIELD_(f, fmt, cast)                                                  \
  if (got->f != want->f) {                                                            \
    print_error("policy field " #f ": got " fmt ", expected " fmt "\n", (cast)got->f, \
                (cast)want->f);                                                       \
    bad = 1;                                                                          \
  }
  QCT_CMP_FIELD_(codec, "%d", int)
  QCT_CMP_FIELD_(bits, "%d", int)
  QCT_CMP_FIELD_(bucket_size, "%d", int)
  QCT_CMP_FIELD_(rounding, "%d", int)
  QCT_CMP_FIELD_(algorithm, "%d", int)
  QCT_CMP_FIELD_(error_feedback, "%d", int)
  QCT_CMP_FIELD_(group_size, "%d", int)
  QCT_CMP_FIELD_(topk_ratio, "%.9g", double)
  QCT_CMP_FIELD_(scale_update_period, "%d", int)
  QCT_CMP_FIELD_(seed, "%llu", unsigned long long)
#undef QCT_CMP_FIELD_
  if (bad) _fail(file, line);
}
#define QCT_ASSERT_POLICY_EQUAL(got, want) \
  qct_assert_policy_equal((got), (want), __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* Communicators and rank threads                                            */
/* ------------------------------------------------------------------------ */

#define QCT_MAX_RANKS 16

/* cmocka setup/teardown: *state is a 1-rank communicator. */
static inline int qct_setup_comm1(void** state) {
  qc_comm_t comm = NULL;
  if (qc_comm_create_local(1, &comm) != QC_SUCCESS || comm == NULL) {
    print_error("setup: qc_comm_create_local(1) failed: %s\n", qc_last_error());
    return -1;
  }
  *state = comm;
  return 0;
}

static inline int qct_teardown_comm(void** state) {
  qc_comm_t comm = (qc_comm_t)*state;
  *state = NULL;
  return qc_comm_destroy(comm) == QC_SUCCESS ? 0 : -1;
}

/* A local group with the given timeout (seconds). */
static inline void qct_create_group(int nranks, double timeout_seconds, qc_comm_t* comms) {
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  cfg.timeout_seconds = timeout_seconds;
  QCT_OK(qc_comm_create_local_with_config(nranks, &cfg, comms));
}

static inline void qct_destroy_group(int nranks, qc_comm_t* comms) {
  int i;
  for (i = 0; i < nranks; ++i) {
    QCT_OK(qc_comm_destroy(comms[i]));
    comms[i] = NULL;
  }
}

typedef void (*qct_rank_fn)(int rank, qc_comm_t comm, void* arg);

typedef struct qct_rank_ctx {
  int rank;
  qc_comm_t comm;
  void* arg;
  qct_rank_fn fn;
} qct_rank_ctx;

static inline void* qct_rank_main(void* p) {
  qct_rank_ctx* ctx = (qct_rank_ctx*)p;
  ctx->fn(ctx->rank, ctx->comm, ctx->arg);
  return NULL;
}

/* Run fn(rank, comms[rank], arg) on one thread per rank and join them all.
 * fn must not use cmocka assertions. */
static inline void qct_run_ranks(int nranks, qc_comm_t* comms, qct_rank_fn fn, void* arg) {
  pthread_t threads[QCT_MAX_RANKS];
  qct_rank_ctx ctx[QCT_MAX_RANKS];
  int i;
  assert_true(nranks > 0 && nranks <= QCT_MAX_RANKS);
  for (i = 0; i < nranks; ++i) {
    ctx[i].rank = i;
    ctx[i].comm = comms != NULL ? comms[i] : NULL;
    ctx[i].arg = arg;
    ctx[i].fn = fn;
    assert_int_equal(pthread_create(&threads[i], NULL, qct_rank_main, &ctx[i]), 0);
  }
  for (i = 0; i < nranks; ++i) {
    assert_int_equal(pthread_join(threads[i], NULL), 0);
  }
}

/* What a rank thread saw: its status and a copy of its message. */
typedef struct qct_rank_result {
  qc_status_t status;
  qc_status_t second_status; /* a follow-up call, where a test makes one */
  char message[QCT_MSG_MAX];
  double seconds;
} qct_rank_result;

static inline double qct_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* Half-precision bit patterns                                               */
/* ------------------------------------------------------------------------ */

/* Exactly representable values as IEEE binary16 and bfloat16 bit patterns. */
#define QCT_FP16_ONE 0x3C00u
#define QCT_BF16_ONE 0x3F80u

#endif /* QC_ABI_TEST_H */
