/*
 * qc.h - quantized collective communication.
 *
 * qc runs allreduce, alltoall, reduce-scatter, allgather and broadcast that
 * compress what they send (8, 4, 2 or 1 bit per value, sparse top-k, half
 * precision), with error feedback so that training still converges. This header is the whole public interface: plain
 * C99, no MPI, CUDA or NCCL types, every exported symbol starts with `qc_`.
 *
 * Reading guide
 *   1. Versions, statuses and errors          (how every call reports)
 *   2. Enumerations                           (values are pinned forever)
 *   3. Policies                               (what a collective sends)
 *   4. Communicators                          (who takes part, and how)
 *   5. Collectives                            (allreduce, alltoall, ...)
 *   6. Non-blocking collectives               (requests)
 *   7. Error buffers                          (error-feedback residuals)
 *   8. Codecs on their own                    (encode/decode a buffer)
 *   9. Emulation                              (N virtual ranks in one call)
 *  10. Experimental                           (QC_EXPERIMENTAL_API only)
 *
 * Each declaration states its contract: arguments, ownership, threading,
 * errors beyond the conventions below, guarantees. Explanations of how a
 * call runs are in docs/ (docs/cuda.md, docs/algorithms.md, docs/policies.md,
 * docs/nonblocking.md, docs/errors.md).
 *
 * Conventions that hold for every function
 *   - The return value is a qc_status_t. On anything but QC_SUCCESS,
 *     qc_last_error() returns a message for the calling thread that names the
 *     offending argument; no function ever aborts the process or lets a C++
 *     exception escape.
 *   - A qc_comm_t or qc_error_buffer_t that was destroyed, or was not made by
 *     qc, gives QC_ERROR_INVALID_ARGUMENT (qc keeps a registry of live
 *     handles); NULL keeps the meaning each function documents.
 *   - Structs that may grow start with `size_t struct_size`. Fill one with its
 *     initializer macro (`qc_policy_t p = QC_POLICY_INIT;`) or its init call
 *     (`qc_policy_init(&p);`), which writes the defaults of the caller's
 *     layout whatever the struct held (stack garbage, zeros) and never reads
 *     it; then set fields. The init calls are macros over the exported
 *     qc_<struct>_init_sized(&p, sizeof p), the one call for languages
 *     without macros. The library reads and writes only the bytes that
 *     struct_size covers, so a program built against an older qc.h keeps
 *     working with a newer library. A struct_size smaller than the first
 *     released layout gives QC_ERROR_INVALID_ARGUMENT; one larger than this
 *     library knows gives QC_ERROR_VERSION (the program was built against a
 *     newer qc.h).
 *   - Thread safety: a communicator is used by one thread at a time (like an
 *     NCCL communicator). Different communicators, including the ranks of one
 *     local group, may be driven from different threads at once. Functions
 *     without a communicator are thread-safe.
 *
 * Stability: everything here is the stable 1.x interface (SONAME libqc.so.1:
 * no declaration changes or goes before 2.0) except the experimental section
 * at the end, which a program sees only with QC_EXPERIMENTAL_API defined
 * before including qc.h and which may change in a minor release.
 */
#ifndef QC_H
#define QC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define QC_API
#elif defined(__GNUC__) || defined(__clang__)
#define QC_API __attribute__((visibility("default")))
#else
#define QC_API
#endif

/* C++ gets a fixed underlying type so that any int a C caller passes is a
 * valid enum value there (the library validates it instead of invoking
 * undefined behaviour); the size and calling convention are those of int. */
#ifdef __cplusplus
#define QC_ENUM_BASE : int
#else
#define QC_ENUM_BASE
#endif

/* ======================================================================== */
/* 1. Versions, statuses and errors                                         */
/* ======================================================================== */

#define QC_VERSION_MAJOR 1
#define QC_VERSION_MINOR 0
#define QC_VERSION_PATCH 0
/* M*10000 + m*100 + p. This formula is fixed for all time. */
#define QC_VERSION_NUMBER \
  (QC_VERSION_MAJOR * 10000 + QC_VERSION_MINOR * 100 + QC_VERSION_PATCH)

/** Version of the library that is running (may differ from QC_VERSION_NUMBER,
 *  the version of the header a program was compiled against). */
QC_API int qc_version_number(void);
/** "M.m.p" of the running library; a static string. */
QC_API const char* qc_version_string(void);

/* QC_STATUS_MAP generates both the qc_status_t enum and qc_status_string(),
 * so the two cannot drift. X(NAME, value, "description"). */
#define QC_STATUS_MAP(X)                                                        \
  X(SUCCESS, 0, "success")                                                      \
  X(ERROR_INVALID_ARGUMENT, 1, "invalid argument")                              \
  X(ERROR_OUT_OF_MEMORY, 2, "out of memory")                                    \
  X(ERROR_UNSUPPORTED, 3, "not supported by this build or configuration")       \
  X(ERROR_TRANSPORT, 4, "transport failure")                                    \
  X(ERROR_MISMATCH, 5, "ranks disagree on the collective (count, dtype, policy)") \
  X(ERROR_TIMEOUT, 6, "timed out waiting for a peer")                           \
  X(ERROR_CORRUPT_DATA, 7, "corrupt or malformed message")                      \
  X(ERROR_VERSION, 8, "version or struct layout mismatch")                      \
  X(ERROR_INTERNAL, 9, "internal error (a bug in qc; please report it)")

/** What every function returns. Values are pinned: new statuses are
 *  appended, never renumbered. */
typedef enum qc_status QC_ENUM_BASE {
#define QC_STATUS_ENUM_ENTRY_(name, value, text) QC_##name = value,
  QC_STATUS_MAP(QC_STATUS_ENUM_ENTRY_)
#undef QC_STATUS_ENUM_ENTRY_
} qc_status_t;

/** Static name of a status, e.g. "QC_ERROR_TIMEOUT"; "QC_UNKNOWN_STATUS" for
 *  a value this library does not know. Never NULL, never freed. */
QC_API const char* qc_status_string(qc_status_t status);

/** Detailed message of the calling thread's most recent failed qc call, e.g.
 *  "qc_allreduce: argument 'count' (4611686018427387904) times the size of
 *  dtype float32 overflows size_t". "" when the thread has had no failure.
 *  The pointer stays valid until the thread's next qc call. */
QC_API const char* qc_last_error(void);

/* ======================================================================== */
/* 2. Enumerations (explicit values, fixed once released)                   */
/* ======================================================================== */

/** Element type of a collective's buffers. */
typedef enum qc_dtype QC_ENUM_BASE {
  QC_DTYPE_FLOAT32 = 0,
  QC_DTYPE_FLOAT16 = 1,  /* IEEE 754 binary16 */
  QC_DTYPE_BFLOAT16 = 2  /* upper 16 bits of a float32 */
} qc_dtype_t;

/** How an allreduce combines the ranks' values. */
typedef enum qc_reduce_op QC_ENUM_BASE {
  QC_OP_SUM = 0,
  QC_OP_AVG = 1  /* sum, then multiplied by 1/nranks on every rank */
} qc_reduce_op_t;

/** How values are encoded on the wire (policy.codec; docs/wire-format.md). */
typedef enum qc_codec QC_ENUM_BASE {
  QC_CODEC_NONE = 0,           /* values sent in the input dtype, unchanged */
  QC_CODEC_FP16 = 1,           /* cast to IEEE half */
  QC_CODEC_BF16 = 2,           /* cast to bfloat16 */
  QC_CODEC_MINMAX = 3,         /* per-bucket min/max uint codes (paper 000 3.1) */
  QC_CODEC_QSGD = 4,           /* per-bucket norm, stochastic levels (paper 003) */
  QC_CODEC_GLOBAL_LINEAR = 5,  /* one norm for all ranks, linear levels (paper 002) */
  QC_CODEC_GLOBAL_EXP = 6,     /* one norm for all ranks, power-of-two levels */
  QC_CODEC_ONEBIT = 7,         /* sign + one scale per bucket (paper 004) */
  QC_CODEC_TOPK = 8,           /* k largest magnitudes as (index, value) */
  /* Block-scaled formats (OCP Microscaling v1.0; NVIDIA NVFP4): small floats
   * sharing one scale per block. The element width and the block size are
   * the format's; policy.bits and bucket_size do not apply. Formats of one
   * message layout differ in two bits of their value, so one flipped bit
   * of a message's codec byte never turns it into another valid message. */
  QC_CODEC_MXFP8 = 9,          /* FP8 E4M3, 32 per E8M0 scale */
  QC_CODEC_MXFP8_E5M2 = 10,    /* FP8 E5M2, 32 per E8M0 scale */
  QC_CODEC_MXFP6 = 11,         /* FP6 E2M3, 32 per E8M0 scale */
  QC_CODEC_MXINT8 = 12,        /* INT8 x 2^-6, 32 per E8M0 scale */
  QC_CODEC_MXFP6_E3M2 = 13,    /* FP6 E3M2, 32 per E8M0 scale */
  QC_CODEC_MXFP4 = 14,         /* FP4 E2M1, 32 per E8M0 scale */
  QC_CODEC_NVFP4 = 15          /* FP4 E2M1, 16 per E4M3 scale, one f32 scale per message */
} qc_codec_t;

/** Allreduce schedule (policy.algorithm; docs/algorithms.md, which also
 *  says how reduce-scatter, allgather and broadcast map it to theirs). */
typedef enum qc_algorithm QC_ENUM_BASE {
  QC_ALGO_AUTO = 0,               /* chosen per call; see qc_allreduce */
  QC_ALGO_RING = 1,               /* paper 000 Alg. 2 */
  QC_ALGO_RECURSIVE_DOUBLING = 2, /* paper 000 Alg. 3-5 */
  QC_ALGO_SRA = 3,                /* scatter-reduce-allgather (papers 003, 004) */
  QC_ALGO_TREE = 4,               /* binomial reduce + broadcast */
  QC_ALGO_NATIVE = 5              /* global_linear / global_exp: agree on one
                                     norm, sum integer codes exactly; none:
                                     the transport's own sum (MPI_Iallreduce) */
} qc_algorithm_t;

/** Rounding of values to codes (policy.rounding). Stochastic rounding draws
 *  counter-based random bits keyed by (policy.seed, rank, layer, that
 *  layer's call index): see qc_emulate_allreduce and qc_comm_save_state. */
typedef enum qc_rounding QC_ENUM_BASE {
  QC_ROUND_NEAREST_EVEN = 0,
  QC_ROUND_STOCHASTIC = 1,
  QC_ROUND_AUTO = 2  /* the codec's own: stochastic for global_linear and
                        global_exp (paper 002's dithering; with nearest
                        rounding most values of a large message round to 0),
                        nearest-even for the others. The default. */
} qc_rounding_t;

/** The one scale a global codec's message shares (policy.scale): its
 *  levels are multiples (global_linear) or power-of-two fractions
 *  (global_exp) of it. In a native allreduce all ranks agree on it first. */
typedef enum qc_scale QC_ENUM_BASE {
  QC_SCALE_AUTO = 0,    /* the codec's own: max-abs (docs/fidelity.md has the
                           measurements that chose it). The default. */
  QC_SCALE_L2 = 1,      /* the L2 norm (paper 002): unbiased with dithering,
                           but coarse for large messages at few bits */
  QC_SCALE_MAX_ABS = 2  /* the largest |value| (paper 001's shared-scale INT8) */
} qc_scale_t;

/** What carries a communicator's messages (qc_comm_config_t.transport). */
typedef enum qc_transport QC_ENUM_BASE {
  QC_TRANSPORT_LOCAL = 0,  /* ranks are threads of this process */
  QC_TRANSPORT_MPI = 1,
  QC_TRANSPORT_NCCL = 2,
  QC_TRANSPORT_CALLBACKS = 3  /* the caller's own, qc_comm_create_callbacks */
} qc_transport_t;

/**
 * Names of enum values: each value has one canonical name ("minmax",
 * "recursive_doubling", "float32", "nearest", "mpi", "sum"), the spelling of
 * the QC_* environment, the messages, the tools and the bindings.
 * qc_<enum>_name: the canonical name; NULL for a value this library does not
 *   know. A static string, never freed.
 * qc_<enum>_from_name: the value of a canonical name or an alias (algorithm
 *   "rd"; dtype "float", "fp32", "half", "fp16", "bf16"; rounding
 *   "nearest_even"), spelled exactly (lower case). QC_ERROR_INVALID_ARGUMENT for a NULL
 *   argument or a name it does not know (the message lists the names);
 *   *value is unchanged then. Thread-safe.
 */
QC_API const char* qc_codec_name(qc_codec_t codec);
QC_API qc_status_t qc_codec_from_name(const char* name, qc_codec_t* codec);
QC_API const char* qc_algorithm_name(qc_algorithm_t algorithm);
QC_API qc_status_t qc_algorithm_from_name(const char* name, qc_algorithm_t* algorithm);
QC_API const char* qc_dtype_name(qc_dtype_t dtype);
QC_API qc_status_t qc_dtype_from_name(const char* name, qc_dtype_t* dtype);
QC_API const char* qc_reduce_op_name(qc_reduce_op_t op);
QC_API qc_status_t qc_reduce_op_from_name(const char* name, qc_reduce_op_t* op);
QC_API const char* qc_rounding_name(qc_rounding_t rounding);
QC_API qc_status_t qc_rounding_from_name(const char* name, qc_rounding_t* rounding);
QC_API const char* qc_scale_name(qc_scale_t scale);
QC_API qc_status_t qc_scale_from_name(const char* name, qc_scale_t* scale);
QC_API const char* qc_transport_name(qc_transport_t transport);
QC_API qc_status_t qc_transport_from_name(const char* name, qc_transport_t* transport);

/* ======================================================================== */
/* 3. Policies: what a collective sends for one layer                       */
/* ======================================================================== */

/**
 * A policy says how one layer's data is compressed and reduced. Every rank of a
 * communicator must resolve the same policy for the same call; a rank that
 * disagrees makes the call fail with QC_ERROR_MISMATCH on every rank.
 *
 * Fields a codec does not use are ignored by it (bits for none/fp16/bf16/
 * onebit/topk, topk_ratio for everything but topk), but they are still
 * validated. One check decides whether a policy can run, and every call that
 * takes a policy (qc_comm_set_layer_policy, qc_comm_apply_preset, the QC_*
 * environment, qc_codec_encode, qc_codec_encoded_size, the emulation calls) applies it,
 * as the collectives do: a policy they accept never fails a later collective
 * as invalid. Only what depends on the call is checked by the call (algorithm
 * native: qc_allreduce).
 */
typedef struct qc_policy {
  size_t struct_size;        /* sizeof(qc_policy_t) of the caller's qc.h */
  qc_codec_t codec;          /* default QC_CODEC_NONE */
  int bits;                  /* code width, 1..8 (qsgd, global_*: 2..8); default 4 */
  int bucket_size;           /* elements per bucket, >= 1; default 128 */
  qc_rounding_t rounding;    /* default QC_ROUND_AUTO (1.0.0: NEAREST_EVEN) */
  qc_algorithm_t algorithm;  /* default QC_ALGO_AUTO */
  int error_feedback;        /* 0 or 1; default 0 */
  int group_size;            /* recursive doubling intra-group size, >= 1; default 8 */
  float topk_ratio;          /* fraction kept by topk, (0, 1]; default 0.01 */
  int scale_update_period;   /* >= 1; default 1. K > 1: a layer's scales are
                                computed on every K-th call and reused by the
                                calls in between, values beyond them
                                saturating (paper 001 §3.2; docs/policies.md) */
  uint64_t seed;             /* stochastic rounding seed; default 0 */
  /* --- appended after the first layout: a struct_size that ends before a
     field gives that field its default --- */
  size_t min_compress_bytes; /* a message (allreduce: count x dtype size;
                                alltoall: one block) smaller than this goes
                                with codec none: below it compression costs
                                more time than it saves (docs/benchmarks.md:
                                the crossover on a 1 Gbit/s link); 0 always
                                compresses; default 16384 (16 KiB) */
  qc_scale_t scale;          /* global_linear, global_exp: the shared scale,
                                L2 norm or max-abs; default QC_SCALE_AUTO
                                (max-abs). Ignored by the other codecs. */
} qc_policy_t;

#define QC_POLICY_INIT                                                      \
  {                                                                         \
    sizeof(qc_policy_t), QC_CODEC_NONE, 4, 128, QC_ROUND_AUTO,              \
        QC_ALGO_AUTO, 0, 8, 0.01f, 1, 0, 16384, QC_SCALE_AUTO               \
  }

/**
 * Fill *policy with the defaults listed in qc_policy_t for a struct of
 * `struct_size` bytes (the caller's sizeof(qc_policy_t)); *policy is only
 * written, never read. Languages without macros call this; C calls
 * qc_policy_init(&p).
 * @return QC_ERROR_INVALID_ARGUMENT for NULL or a struct_size under the first
 *         released layout, QC_ERROR_VERSION for one larger than this library's;
 *         nothing is written then.
 */
QC_API qc_status_t qc_policy_init_sized(qc_policy_t* policy, size_t struct_size);
#define qc_policy_init(policy) qc_policy_init_sized((policy), sizeof *(policy))

/* ======================================================================== */
/* 4. Communicators                                                          */
/* ======================================================================== */

/**
 * A communicator handle. Handles (communicators and error buffers) are
 * opaque values, not addresses: never dereference one. Each is issued once
 * per process and never again, so a destroyed handle is refused with
 * QC_ERROR_INVALID_ARGUMENT by every function forever, even after its memory
 * went to a new object.
 */
typedef struct qc_comm_s* qc_comm_t;

/** How qc_comm_create builds a communicator; a struct that may grow (see the
 *  conventions at the top): fill it with qc_comm_config_init. */
typedef struct qc_comm_config {
  size_t struct_size;        /* sizeof(qc_comm_config_t) */
  qc_transport_t transport;  /* default QC_TRANSPORT_LOCAL */
  int64_t mpi_comm;          /* Fortran handle of an MPI communicator (MPI_Comm_c2f) */
  void* nccl_comm;           /* an existing ncclComm_t */
  double timeout_seconds;    /* how long a blocked call may wait for peers;
                                finite and > 0 (else INVALID_ARGUMENT at
                                creation); values above 1e9 (about 32 years)
                                wait 1e9 s, i.e. for ever in practice;
                                default 300 */
} qc_comm_config_t;

#define QC_COMM_CONFIG_INIT \
  { sizeof(qc_comm_config_t), QC_TRANSPORT_LOCAL, 0, NULL, 300.0 }

/** Fill *config with the defaults above, as qc_policy_init_sized. */
QC_API qc_status_t qc_comm_config_init_sized(qc_comm_config_t* config, size_t struct_size);
#define qc_comm_config_init(config) qc_comm_config_init_sized((config), sizeof *(config))

/**
 * Create a communicator over an existing MPI or NCCL communicator.
 * For an in-process group use qc_comm_create_local (a local group needs all of
 * its ranks created at once). Transports missing from this build return
 * QC_ERROR_UNSUPPORTED.
 * NCCL (config->nccl_comm, an ncclComm_t): collective over its ranks; qc
 * splits its own communicator off it (ncclCommSplit, NCCL >= 2.18), so the
 * caller's stays untouched and is destroyed by the caller. libnccl.so.2 is
 * opened at this call (the copy already loaded, if any). A collective that
 * times out aborts qc's communicator, not the caller's.
 */
QC_API qc_status_t qc_comm_create(const qc_comm_config_t* config, qc_comm_t* comm);

/**
 * Create an in-process group of `nranks` communicators, ranks 0..nranks-1,
 * written to comms[0..nranks-1]. Drive each from its own thread: collectives
 * block until every rank of the group has made the same call, or until the
 * timeout (300 s by default) passes, which gives QC_ERROR_TIMEOUT on every
 * waiting rank. Each communicator is destroyed on its own.
 */
QC_API qc_status_t qc_comm_create_local(int nranks, qc_comm_t* comms);

/** As qc_comm_create_local, with config->timeout_seconds applied to the group
 *  (config->transport must be QC_TRANSPORT_LOCAL). config may be NULL. */
QC_API qc_status_t qc_comm_create_local_with_config(int nranks,
                                                    const qc_comm_config_t* config,
                                                    qc_comm_t* comms);

/**
 * A transport the caller brings: callbacks through which a framework carries
 * qc's messages over its own communication library (torch.distributed's
 * gloo, UCX, a custom fabric). qc's algorithms, codecs, error feedback,
 * timeouts and checks run unchanged over it (docs/transports.md).
 *
 * What the callbacks move: opaque messages of bytes between ranks
 * 0..size-1. qc asks three things of them:
 *   - order: the k-th receive this rank posts from `peer` gets the k-th
 *     message `peer` posted to this rank (as MPI, gloo and NCCL keep it);
 *   - exact sizes: every receive names the exact size of the message it
 *     gets (qc pads and frames its messages so that it can), so libraries
 *     whose receives must know the size work;
 *   - progress: a posted transfer completes while qc polls `test` (or
 *     blocks in `wait`) on it or on any other posted transfer; qc posts all
 *     sends and receives of a step before it waits for any of them.
 * Everything else is qc's: each message carries a small header that qc
 * checks (a message of another step or call is QC_ERROR_MISMATCH), send
 * data are copied before post_send (the caller's buffers are free once the
 * collective returns), receives land in qc's memory and are copied out.
 *
 * Callbacks return 0 on success; any other value fails the collective (and
 * breaks the group) with QC_ERROR_TRANSPORT, whose message carries the value
 * and error_message's text (a post that fails has posted nothing). Callbacks must not call qc on this communicator,
 * must not throw (C++) or longjmp out, and are never called concurrently for
 * one communicator: all of them run on the thread of the call in progress
 * (with any_thread set, that may be qc's progress thread; see below).
 */
typedef struct qc_transport_callbacks {
  size_t struct_size;   /* sizeof(qc_transport_callbacks_t) */
  void* context;        /* passed first to every callback; qc never reads it */
  int rank;             /* this process's rank, 0 <= rank < size */
  int size;             /* ranks in the group, >= 1 */
  /* Whether qc may call the callbacks from a thread it starts: 1 lets
   * non-blocking calls (qc_iallreduce ...) progress on qc's progress thread
   * while the program computes; 0 keeps every call on the program's threads
   * (non-blocking calls then progress inside qc_request_test/wait), for a
   * library that must be called from one thread (MPI below
   * MPI_THREAD_MULTIPLE). Default 0. */
  int any_thread;
  /* Required. Start sending `bytes` bytes at `data` to rank `peer` (never
   * this rank). `data` stays valid and unchanged until test or wait says
   * the transfer is done, or cancel returns. *handle: any value the
   * library uses to know this transfer again (qc only passes it back). */
  int (*post_send)(void* context, int peer, const void* data, size_t bytes, void** handle);
  /* Required. Start receiving the next message from `peer`, of exactly
   * `bytes` bytes, into `data` (valid until done or cancelled). */
  int (*post_recv)(void* context, int peer, void* data, size_t bytes, void** handle);
  /* Required. Never blocks for long: *done = 1 once the transfer is
   * complete (a send's data may be reused, a receive's bytes are all in
   * place), else 0. After *done = 1 qc never passes the handle again: the
   * library may free what it holds for it. */
  int (*test)(void* context, void* handle, int* done);
  /* Optional (NULL: qc polls test with growing pauses). As test, but may
   * block up to `timeout_seconds` (> 0, at most 0.1: qc checks its own
   * deadline and qc_comm_destroy between waits). */
  int (*wait)(void* context, void* handle, double timeout_seconds, int* done);
  /* Optional. qc gives up on a transfer that is not done (its collective
   * failed): after cancel returns, the library never touches its data
   * again and qc never passes the handle again. Without cancel qc keeps
   * such transfers' memory until destroy has returned. */
  void (*cancel)(void* context, void* handle);
  /* Optional. This rank's collective failed (timeout, mismatch, damaged
   * data, a failed callback) and the group is broken: tell the peers, so
   * that their transfers fail promptly rather than at their timeout.
   * Called once per communicator. `reason` is valid during the call. */
  void (*abort)(void* context, int status, const char* reason);
  /* Optional. A message about the last non-zero return of a callback on
   * the calling thread, copied at once by qc; NULL or "" for none. */
  const char* (*error_message)(void* context);
  /* Optional. Called once, by qc_comm_destroy, after qc's last call of any
   * other callback: release `context`. Not called when
   * qc_comm_create_callbacks fails (the caller still owns context then). */
  void (*destroy)(void* context);
} qc_transport_callbacks_t;

#define QC_TRANSPORT_CALLBACKS_INIT \
  { sizeof(qc_transport_callbacks_t), NULL, 0, 1, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

/** Fill *callbacks with the defaults above (rank 0 of 1, no callbacks), as
 *  qc_policy_init_sized. */
QC_API qc_status_t qc_transport_callbacks_init_sized(qc_transport_callbacks_t* callbacks,
                                                     size_t struct_size);
#define qc_transport_callbacks_init(callbacks) \
  qc_transport_callbacks_init_sized((callbacks), sizeof *(callbacks))

/**
 * Create this rank's communicator over the caller's transport `callbacks`
 * (copied: the caller may free its table after the call). A local
 * operation: nothing is sent, no peer is waited for; every rank of the
 * group creates its own, with its own rank and the same size.
 * config: NULL for the defaults, else its transport must be
 *   QC_TRANSPORT_CALLBACKS (its timeout_seconds applies; mpi_comm and
 *   nccl_comm are not read).
 * @return QC_ERROR_INVALID_ARGUMENT for NULL callbacks or comm, a required
 *         callback missing, size < 1, rank outside 0..size-1.
 */
QC_API qc_status_t qc_comm_create_callbacks(const qc_transport_callbacks_t* callbacks,
                                            const qc_comm_config_t* config, qc_comm_t* comm);

/** Bytes of an NCCL unique id (ncclUniqueId, NCCL_UNIQUE_ID_BYTES). */
#define QC_NCCL_UNIQUE_ID_BYTES 128

/**
 * Make a new NCCL unique id (ncclGetUniqueId) for qc_comm_create_nccl_id,
 * as NCCL's own set-up does: one rank calls this and hands the
 * QC_NCCL_UNIQUE_ID_BYTES bytes written to id to every rank of the group by
 * its own means (a key-value store, a file, MPI_Bcast). libnccl.so.2 is
 * opened as for qc_comm_create.
 * @return QC_ERROR_INVALID_ARGUMENT for NULL id or size <
 *   QC_NCCL_UNIQUE_ID_BYTES (nothing written); QC_ERROR_UNSUPPORTED in a
 *   build without NCCL or when libnccl.so.2 does not load; QC_ERROR_TRANSPORT
 *   when NCCL fails.
 */
QC_API qc_status_t qc_nccl_unique_id_create(void* id, size_t size);

/**
 * Create this rank's communicator of `nranks` over a new NCCL communicator
 * that qc makes from `id` (qc_nccl_unique_id_create's bytes, the same on
 * every rank) with ncclCommInitRank on the calling thread's current CUDA
 * device, owns, and destroys in qc_comm_destroy. Collective: every rank of
 * the group calls it with its own rank, and it returns once all have joined
 * (NCCL's set-up has no timeout; the communicator's applies from its first
 * collective on). Everything else is as a communicator qc_comm_create makes
 * over a caller's ncclComm_t (device buffers and streams: qc_allreduce).
 * id, size: QC_NCCL_UNIQUE_ID_BYTES bytes (size must be exactly that).
 * rank: 0..nranks-1. nranks: >= 1.
 * config: NULL for the defaults, else its transport must be
 *   QC_TRANSPORT_NCCL (its timeout_seconds applies; mpi_comm and nccl_comm
 *   are not read).
 * @return QC_ERROR_INVALID_ARGUMENT for NULL id or comm, a size other than
 *   QC_NCCL_UNIQUE_ID_BYTES, nranks < 1 or rank outside 0..nranks-1, no
 *   usable current CUDA device; QC_ERROR_UNSUPPORTED as
 *   qc_nccl_unique_id_create; QC_ERROR_TRANSPORT when NCCL's set-up fails.
 */
QC_API qc_status_t qc_comm_create_nccl_id(const void* id, size_t size, int rank, int nranks,
                                          const qc_comm_config_t* config, qc_comm_t* comm);

/**
 * Release a communicator. A local operation: it never waits for peers.
 * Peers of a local group that later wait for a message this rank will never
 * send fail at once with QC_ERROR_TRANSPORT instead of waiting for the
 * timeout. NULL is accepted and does nothing.
 *
 * Thread safety: the handle is invalid from the moment this is called. A
 * collective on `comm` running on another thread (a watchdog's destroy of
 * a stuck rank) is interrupted: it returns QC_ERROR_TRANSPORT ("destroyed")
 * and the group is broken, as if this rank had failed; other calls there
 * (queries) finish. This function waits for those calls to return, then
 * frees the communicator, so nothing is freed under them.
 * Requests (qc_iallreduce ...) still outstanding get up to the
 * communicator's timeout to complete; after that the running one is
 * interrupted (QC_ERROR_TRANSPORT, "destroyed"; or QC_ERROR_TIMEOUT where
 * its own wait for peers ran out first) and the ones that have not started
 * complete with QC_ERROR_TRANSPORT without running. Their handles stay
 * valid until qc_request_free.
 * @return QC_ERROR_INVALID_ARGUMENT for a handle already destroyed (also by
 *         a destroy running on another thread) or never created.
 */
QC_API qc_status_t qc_comm_destroy(qc_comm_t comm);

/** This rank's index in the group (0 <= *rank < size) / the group's number
 *  of ranks. Local queries: never block; any thread. */
QC_API qc_status_t qc_comm_rank(qc_comm_t comm, int* rank);
QC_API qc_status_t qc_comm_size(qc_comm_t comm, int* size);

/**
 * The failure, if any, that has broken this communicator's group, including
 * one discovered after the call that met it returned: a peer's call failed
 * (timeout, mismatch, corrupt data), a peer destroyed its communicator
 * during a call, the transport failed. A collective can succeed on some
 * ranks and fail on others; polling this after a collective tells a rank
 * that its group is no longer usable before it starts the next one.
 *
 * *async_error gets QC_SUCCESS while the group is healthy. Otherwise it gets
 * the status that broke the group (the one every later collective on this
 * communicator returns) and qc_last_error() describes it, although the
 * function itself returns QC_SUCCESS. The return value is about the query:
 * QC_ERROR_INVALID_ARGUMENT for NULL `async_error` or a communicator that is
 * not live.
 *
 * Never blocks and never talks to peers, so it may be called from any
 * thread, also while another thread is blocked in a collective on `comm`
 * (a watchdog), like ncclCommGetAsyncError. A broken group stays broken:
 * destroy the communicator and create a new one.
 */
QC_API qc_status_t qc_comm_get_async_error(qc_comm_t comm, qc_status_t* async_error);

/**
 * Counters since the communicator was created, for this rank.
 * logical_bytes: count x dtype size of every collective's input.
 * wire_bytes:    bytes this rank handed to the transport (headers included).
 * codec_seconds / transport_seconds: wall time in codecs / sending and waiting.
 *   For a call enqueued on a stream (NCCL, device buffers) they are the time
 *   spent enqueuing, not the GPU's: time that work with CUDA events.
 * codec_seconds_in_flight: the part of codec_seconds spent while this rank
 *   had transfers of the call posted and not yet awaited, i.e. codec work
 *   that overlapped its transfers (pipelining, docs/nonblocking.md) rather
 *   than running before or after them. An upper bound on the codec time
 *   hidden behind the wire: a transfer may finish before it is awaited.
 */
typedef struct qc_stats {
  size_t struct_size;  /* sizeof(qc_stats_t): qc_stats_init or QC_STATS_INIT */
  uint64_t calls;
  uint64_t logical_bytes;
  uint64_t wire_bytes;
  double codec_seconds;
  double transport_seconds;
  /* --- appended after the first layout: a struct_size that ends before a
     field leaves that field unwritten --- */
  double codec_seconds_in_flight;
} qc_stats_t;

#define QC_STATS_INIT { sizeof(qc_stats_t), 0, 0, 0, 0.0, 0.0, 0.0 }
/** Zero *stats for the caller's layout, as qc_policy_init_sized. */
QC_API qc_status_t qc_stats_init_sized(qc_stats_t* stats, size_t struct_size);
#define qc_stats_init(stats) qc_stats_init_sized((stats), sizeof *(stats))

/** Copy the counters into *stats (filled by qc_stats_init or QC_STATS_INIT). */
QC_API qc_status_t qc_comm_get_stats(qc_comm_t comm, qc_stats_t* stats);

/**
 * Counters per layer name (the `layer` argument of the collectives; NULL
 * counts as "*"), for this rank, so a user can see where compression pays.
 * A fused call (qc_allreduce_segments) counts once for each of its layers and
 * splits its wire bytes and times among them in proportion to their encoded
 * sizes.
 * last_rel_error: ||x - decode(encode(x))|| / ||x|| of this rank's first
 *   encode in the layer's last call (with error feedback: of the compensated
 *   value), a cheap estimate from one message; 0 for lossless codecs, -1
 *   when not measured (a fused call, a call whose codec ran on the device,
 *   or nothing encoded).
 * mean_sq_norm: squared L2 norm of this rank's input for the layer, averaged
 *   over its calls (what adaptive bit widths use). Calls on device buffers
 *   measure it on the device (to rounding: the device sums in its own
 *   order), except an allreduce or alltoall the NCCL transport enqueues
 *   without waiting, which is left out of the average.
 */
typedef struct qc_layer_stats {
  size_t struct_size; /* sizeof(qc_layer_stats_t): qc_layer_stats_init */
  uint64_t calls;
  uint64_t count;     /* elements in the last call */
  uint64_t logical_bytes;
  uint64_t wire_bytes;
  double codec_seconds;
  double transport_seconds;
  double last_rel_error;
  double mean_sq_norm;
} qc_layer_stats_t;

#define QC_LAYER_STATS_INIT { sizeof(qc_layer_stats_t), 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0 }
/** Zero *stats for the caller's layout, as qc_policy_init_sized. */
QC_API qc_status_t qc_layer_stats_init_sized(qc_layer_stats_t* stats, size_t struct_size);
#define qc_layer_stats_init(stats) qc_layer_stats_init_sized((stats), sizeof *(stats))

/** The counters of layer `layer` (NULL means "*"); a name no call has used
 *  yet gives all zeros (calls == 0). *stats: filled by qc_layer_stats_init. */
QC_API qc_status_t qc_comm_get_layer_stats(qc_comm_t comm, const char* layer,
                                           qc_layer_stats_t* stats);

/** The layers seen so far, in byte order of their names: *count of them. */
QC_API qc_status_t qc_comm_layer_count(qc_comm_t comm, size_t* count);

/** The name of layer `index` (0 <= index < qc_comm_layer_count) copied into
 *  name[0..capacity) with its NUL; *length gets strlen(name). With
 *  capacity 0 (name may be NULL) only *length is written; a capacity too
 *  small for the name and its NUL gives QC_ERROR_INVALID_ARGUMENT. */
QC_API qc_status_t qc_comm_layer_name(qc_comm_t comm, size_t index, char* name, size_t capacity,
                                      size_t* length);

/**
 * Serialise the communicator's state for a checkpoint into dst: how many
 * calls each layer has run, which keys its stochastic rounding (call k of a
 * layer draws the bits of qc_emulate_allreduce's call_index k). With dst
 * NULL only *size is set to the bytes needed. The image is versioned and
 * checksummed; QC_ERROR_INVALID_ARGUMENT if capacity is too small. Waits for
 * the requests started before it. Every rank holds the same counts.
 */
QC_API qc_status_t qc_comm_save_state(qc_comm_t comm, void* dst, size_t capacity, size_t* size);
/**
 * Restore the state saved by qc_comm_save_state (any rank's, any
 * communicator's) into comm, replacing its counts: the next call of each
 * layer draws the bits the saved run's next call would have. Load it on
 * every rank (ranks whose counts differ fail their next call of the layer
 * with QC_ERROR_MISMATCH). QC_ERROR_CORRUPT_DATA for a damaged, truncated or
 * foreign image; comm is unchanged on failure.
 */
QC_API qc_status_t qc_comm_load_state(qc_comm_t comm, const void* src, size_t size);

/**
 * Set the policy for layers whose name matches `pattern`.
 * Patterns are exact names or globs with `*` (any run of characters) and `?`
 * (one character). For a given name, an exact pattern wins over every glob;
 * among globs the one with the most literal (non-wildcard) characters wins,
 * and among equally specific globs the one set last. "*" is the default and
 * starts as QC_POLICY_INIT. Setting a pattern again replaces its policy. The
 * change applies from the next collective on. Every rank must set the same
 * policies (a disagreement surfaces as QC_ERROR_MISMATCH).
 */
QC_API qc_status_t qc_comm_set_layer_policy(qc_comm_t comm, const char* pattern,
                                       const qc_policy_t* policy);

/** The policy that layer name `layer` resolves to (NULL means "*").
 *  *policy: filled by qc_policy_init first (its struct_size is read). */
QC_API qc_status_t qc_comm_get_layer_policy(qc_comm_t comm, const char* layer,
                                       qc_policy_t* policy);

/**
 * Set a named, opt-in group of layer policies in one call. A preset is
 * nothing but a fixed list of qc_comm_set_layer_policy calls, listed below in
 * full; there is no other effect, and qc_comm_get_layer_policy shows the result.
 * Like qc_comm_set_layer_policy it is local (no communication): every rank must
 * make the same call. Patterns set earlier and not in the list are kept;
 * patterns in the list are replaced. Call it first and set your own
 * patterns after it: an exact name, or a glob with more literal characters
 * than the preset's (see qc_comm_set_layer_policy), wins over the preset.
 *
 * name "cgx" (paper 003 §3: biases and batch/layer normalisations are small
 * and sensitive, so they go in full precision; everything else compressed):
 *   b = *base (NULL: the policy now set for the pattern "*"), with
 *       b.min_compress_bytes = max(b.min_compress_bytes, 16384): every
 *       message under 16 KiB (4096 float32 elements) goes with codec none.
 *       Paper 003 names no byte size (it filters by name and size); 16 KiB
 *       is qc's measured crossover on a 1 Gbit/s link (docs/benchmarks.md).
 *   f = QC_POLICY_INIT (codec none, algorithm auto, no error feedback).
 *   qc_comm_set_layer_policy(comm, "*", &b);
 *   qc_comm_set_layer_policy(comm, "*bias*", &f);   biases ("fc.bias", "in_proj_bias")
 *   qc_comm_set_layer_policy(comm, "*norm*", &f);   "layer_norm", "norm1", "input_layernorm"
 *   qc_comm_set_layer_policy(comm, "*Norm*", &f);   "LayerNorm", "BatchNorm"
 *   qc_comm_set_layer_policy(comm, "*.bn*", &f);    "layer1.0.bn1.weight"
 *   qc_comm_set_layer_policy(comm, "bn*", &f);      "bn1.weight"
 *   qc_comm_set_layer_policy(comm, "*.ln*", &f);    "h.0.ln_1.weight", "transformer.ln_f.bias"
 *   qc_comm_set_layer_policy(comm, "ln*", &f);      "ln_f.weight"
 * Globs match whole names, case-sensitively; a name such as "normal_proj"
 * also matches "*norm*" (give it an exact policy if it must be compressed).
 * base should be a compressed policy (e.g. codec minmax, bits 4, bucket 128:
 * paper 003's baseline); a base with codec none is accepted and compresses
 * nothing.
 *
 * @return QC_ERROR_INVALID_ARGUMENT for NULL comm or name, a name that is
 *   not a preset (qc_last_error() lists the known ones), or an invalid base
 *   (struct_size and fields as qc_comm_set_layer_policy; QC_ERROR_VERSION for a
 *   newer struct_size). On failure no policy is changed.
 */
QC_API qc_status_t qc_comm_apply_preset(qc_comm_t comm, const char* name,
                                    const qc_policy_t* base);

/* ======================================================================== */
/* 5. Collectives                                                            */
/* ======================================================================== */

/** An error buffer handle (qc_error_buffer_create, section 7): opaque, issued
 *  once, refused forever after qc_error_buffer_destroy, as qc_comm_t. */
typedef struct qc_error_buffer_s* qc_error_buffer_t;

/**
 * Reduce `count` elements over all ranks; every rank receives the same
 * result, bit for bit. Blocks until recvbuf holds it (host memory; device
 * memory: see `stream`).
 *
 * sendbuf, recvbuf: count elements of dtype, both host memory or (CUDA
 *   build) both CUDA device memory. Equal pointers run in place; otherwise
 *   they must not overlap. NULL only when count is 0. Not retained.
 * dtype: of the inputs and outputs; sums accumulate in float32.
 * op: QC_OP_SUM, or QC_OP_AVG (the sum times 1/nranks, once, in float32).
 * layer: the name whose policy applies (qc_comm_set_layer_policy) and whose
 *   statistics count the call; NULL means "*". Not retained.
 * error_buffer: NULL, or this rank's residuals for error feedback (used when
 *   the policy sets error_feedback). Each encode sends value + residual and
 *   keeps the new error (paper 000 Alg. 1), so over any number of calls the
 *   outputs plus every rank's final residuals sum to the inputs, to float
 *   rounding. Updated only when the call succeeds; one call at a time.
 * stream: NULL for host memory. With device memory, a cudaStream_t (NULL:
 *   the default stream) whose earlier work produced sendbuf. The local and
 *   MPI transports return once recvbuf holds the result; the NCCL transport
 *   returns after enqueueing the call on `stream` (stream-ordered, like
 *   NCCL's calls) for float32 with codec none and for the compressed
 *   algorithms; its later failures show in qc_comm_get_async_error. Either
 *   way the result is the host call's bit for bit. What runs where:
 *   docs/cuda.md, "Device buffers and streams". A stream with host buffers,
 *   or any stream in a build without CUDA, is QC_ERROR_UNSUPPORTED.
 *
 * The policy's min_compress_bytes sends smaller messages with codec none;
 * QC_ALGO_AUTO picks the algorithm per call (docs/algorithms.md). Results
 * equal qc_emulate_allreduce's bit for bit, except the transport's own sum
 * (native with codec none on MPI or NCCL), which matches to float rounding.
 * Stochastic rounding's bits are those of this layer's call index (the
 * layer's calls on this communicator so far; qc_comm_save_state).
 * Threading: one call per communicator at a time.
 *
 * @return QC_ERROR_INVALID_ARGUMENT for a bad argument (named in
 *   qc_last_error()); QC_ERROR_MISMATCH when ranks disagree on count, dtype,
 *   op, layer or policy, or error_buffer belongs to another count, rank or
 *   group size; QC_ERROR_TIMEOUT when a peer does not arrive within the
 *   communicator's timeout; QC_ERROR_UNSUPPORTED for a codec, algorithm or
 *   memory kind this build or transport lacks (native with a codec other
 *   than none and the global ones). After MISMATCH, TIMEOUT, TRANSPORT or
 *   CORRUPT_DATA the communicator is broken: every later collective on it
 *   returns the same status.
 */
QC_API qc_status_t qc_allreduce(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                                const char* layer, qc_error_buffer_t error_buffer,
                                void* stream);

/**
 * One allreduce over a flat buffer made of several layers ("fused" buffers,
 * as a DDP bucket): segment i is counts[i] elements of layer layers[i]
 * (layers may be NULL, or an entry NULL, for "*"), the segments back to back
 * in sendbuf and recvbuf (in place allowed; sum of counts elements).
 *
 * Each segment keeps its own policy: codec, bits, bucket, rounding, seed,
 * error feedback, min_compress_bytes (judged on the segment's bytes). Buckets
 * never straddle segments, and each step of the algorithm sends one message
 * carrying every segment it touches, so a fused call costs fewer messages and
 * headers than one qc_allreduce per layer. The algorithm is the segments'
 * own when they all name the same one (other than native), else AUTO's rule
 * on the total size (native does not apply: it needs one codec grid).
 * error_buffer covers the whole buffer (sum of counts residuals); segments
 * whose policy has error_feedback 0 leave their slots alone. The buffer
 * binds to the layout (counts, layers and their policies): a call with
 * another layout resets it, with a warning. Every rank must pass the same
 * counts and layers (else QC_ERROR_MISMATCH). Per-layer statistics count the
 * call once per segment.
 * @return as qc_allreduce; QC_ERROR_INVALID_ARGUMENT for counts NULL with
 *   nsegments > 0 or counts that overflow size_t.
 */
QC_API qc_status_t qc_allreduce_segments(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                         size_t nsegments, const size_t* counts,
                                         const char* const* layers, qc_dtype_t dtype,
                                         qc_reduce_op_t op, qc_error_buffer_t error_buffer,
                                         void* stream);

/**
 * Every rank sends block j (count_per_rank elements at sendbuf + j blocks)
 * to rank j and receives rank i's block at recvbuf + i blocks. Each block is
 * encoded once by its sender with the layer's codec and decoded by its
 * receiver (a rank's block to itself too, so every block is treated alike);
 * policy.seed keys stochastic rounding as in qc_allreduce.
 *
 * sendbuf, recvbuf: nranks blocks each, host or CUDA device memory as for
 *   qc_allreduce; equal pointers run in place, otherwise no overlap; NULL
 *   only when count_per_rank is 0. layer: as qc_allreduce. stream: as
 *   qc_allreduce (on NCCL a kernel codec is enqueued on it without
 *   waiting; docs/cuda.md).
 * @return as qc_allreduce.
 */
QC_API qc_status_t qc_alltoall(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                               size_t count_per_rank, qc_dtype_t dtype,
                               const char* layer, void* stream);

/**
 * Reduce-scatter: sendbuf holds nranks blocks of recvcount elements, block j
 * for rank j; rank r's recvbuf (recvcount elements) gets the sum (op) over
 * all ranks of their block r. What a sharded optimizer (FSDP, ZeRO) does
 * with gradients.
 *
 * Only what crosses to another rank is encoded: a rank's own block enters
 * its sum exactly. The policy's algorithm picks the schedule
 * (docs/algorithms.md): QC_ALGO_RING, a ring whose n-1 hops each requantize
 * a partial sum; any other (QC_ALGO_AUTO, SRA: its scatter half), direct:
 * each rank encodes block j once and sends it to rank j, which adds the
 * contributions in rank order, so each value is quantized once.
 *
 * sendbuf: nranks x recvcount elements; recvbuf: recvcount elements; host
 *   or CUDA device memory (staged through host memory); no overlap except
 *   in place as NCCL's: recvbuf == sendbuf + rank x recvcount. NULL only
 *   when recvcount is 0. op: QC_OP_SUM or QC_OP_AVG. layer, stream:
 *   as qc_allreduce.
 * error_buffer: NULL, or nranks x recvcount residuals, one per input
 *   element: each block this rank encodes sends value + residual and keeps
 *   the new error where it was encoded (the worker residuals of SRA's first
 *   half), so the outputs plus the change of every rank's residuals sum to
 *   the inputs, to float rounding. Updated only when the call succeeds.
 * Like qc_allgather and qc_broadcast it starts with a short agreement
 * (ceil(log2 n) rounds of 24-byte messages), so ranks that disagree fail
 * with QC_ERROR_MISMATCH on every rank instead of waiting.
 * @return as qc_allreduce; QC_ERROR_MISMATCH also when ranks disagree on
 *   recvcount.
 */
QC_API qc_status_t qc_reduce_scatter(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                     size_t recvcount, qc_dtype_t dtype, qc_reduce_op_t op,
                                     const char* layer, qc_error_buffer_t error_buffer,
                                     void* stream);

/**
 * Allgather: rank r's sendbuf (sendcount elements) becomes block r of every
 * rank's recvbuf (nranks x sendcount elements). What a sharded model does
 * with parameters before a layer runs.
 *
 * Each block is encoded once, by its owner, and those bytes travel
 * unchanged; every rank decodes the same bytes, the owner its own block too
 * (its recvbuf block is the decoded value, not a copy of sendbuf), so every
 * replica is bit-identical. The policy's algorithm picks the schedule:
 * QC_ALGO_RING (n-1 hops of one block), QC_ALGO_RECURSIVE_DOUBLING
 * (log2 n rounds; a power-of-two rank count, otherwise direct), any other:
 * direct (the owner sends to every rank).
 *
 * sendbuf: sendcount elements; recvbuf: nranks x sendcount; host or CUDA
 *   device memory (staged); no overlap except in place as NCCL's: sendbuf
 *   == recvbuf + rank x sendcount. NULL only when sendcount is 0.
 *   layer, stream: as qc_allreduce.
 * error_buffer: NULL, or sendcount residuals: error feedback on the owner's
 *   encode (the decoded block plus the residual's change is the input).
 * @return as qc_allreduce; QC_ERROR_MISMATCH also when ranks disagree on
 *   sendcount.
 */
QC_API qc_status_t qc_allgather(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t sendcount, qc_dtype_t dtype, const char* layer,
                                qc_error_buffer_t error_buffer, void* stream);

/**
 * Broadcast: the root's sendbuf (count elements) becomes every rank's recvbuf.
 * Encoded once at the root and forwarded unchanged; every rank decodes the
 * same bytes, the root too (its recvbuf gets the decoded values, as in
 * ncclBroadcast sendbuf and recvbuf are separate), so replicas are
 * bit-identical. The policy's algorithm picks the schedule: QC_ALGO_TREE, a
 * binomial tree (ceil(log2 n) rounds of the whole message); QC_ALGO_RING
 * and any other but AUTO, a chain pipelined in pieces of QC_PIPELINE_CHUNK;
 * AUTO: the tree below 64 KiB, the chain from there.
 *
 * sendbuf: count elements, read on the root only (other ranks may pass
 *   NULL); recvbuf: count elements on every rank; host or CUDA device memory
 *   (staged); on the root equal pointers run in place, other overlaps are
 *   refused. NULL only when count is 0.
 * root: 0..nranks-1, the same on every rank. layer, stream: as qc_allreduce.
 * No error feedback: what is broadcast (parameters) is not summed again.
 * @return as qc_allreduce; QC_ERROR_INVALID_ARGUMENT for a root out of
 *   range; QC_ERROR_MISMATCH when ranks disagree on count or root.
 */
QC_API qc_status_t qc_broadcast(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t count, qc_dtype_t dtype, int root, const char* layer,
                                void* stream);

/**
 * The result of a sparse allreduce (qc_sparse_allreduce): row indices in
 * ascending order and a row of values for each. An opaque handle like
 * qc_comm_t, freed with qc_sparse_result_destroy.
 */
typedef struct qc_sparse_result_s* qc_sparse_result_t;

/**
 * Sparse allreduce of row-sparse tensors (paper 001: embedding gradients):
 * this rank's nnz rows, row k being indices[k] and the row_len values at
 * values + k x row_len, are summed with every rank's rows of the same
 * index; the result is the union of all ranks' indices, ascending, each
 * with its summed row, bit-identical on every rank.
 *
 * indices: nnz row indices >= 0, in any order; a repeated index adds its
 *   rows (in input order) before anything travels. nnz may differ between
 *   ranks; row_len (>= 1), dtype, op and layer may not (QC_ERROR_MISMATCH).
 * values: nnz x row_len elements of dtype, host memory.
 * Values are quantized with one scale per row (the policy's bucket is the
 * row; codecs none, fp16, bf16, minmax, qsgd, onebit; others are
 * QC_ERROR_UNSUPPORTED); min_compress_bytes judges all ranks' rows
 * together. The schedule (docs/algorithms.md) is chosen per call, alike on
 * every rank, from the ranks' row counts: every rank's rows encoded once
 * and sent to every rank (few rows), or summed at the rank owning their
 * index and the sums sent on (rows the ranks share; quantized twice), or,
 * for qc_sparse_allreduce_dense only, the dense table's allreduce (a
 * nearly full table; quantized twice). The policy's algorithm
 * QC_ALGO_SRA, or QC_SPARSE_SCHEDULE, forces one.
 * *result: a new result handle (NULL on failure). No error feedback.
 */
QC_API qc_status_t qc_sparse_allreduce(qc_comm_t comm, const int64_t* indices,
                                       const void* values, size_t nnz, size_t row_len,
                                       qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                       qc_sparse_result_t* result);

/** The number of rows of a sparse allreduce's result in *nnz. */
QC_API qc_status_t qc_sparse_result_nnz(qc_sparse_result_t result, size_t* nnz);

/**
 * Copy a result's rows out: indices (nnz entries) and values (nnz x row_len
 * elements of the call's dtype); capacity is the rows the two arrays hold,
 * QC_ERROR_INVALID_ARGUMENT (nothing written) when it is less than the
 * result's nnz. Either array may be NULL to skip it.
 */
QC_API qc_status_t qc_sparse_result_copy(qc_sparse_result_t result, int64_t* indices,
                                         void* values, size_t capacity);

/** Free a result. NULL is accepted and does nothing; a freed handle is
 *  refused forever (see qc_comm_t). */
QC_API qc_status_t qc_sparse_result_destroy(qc_sparse_result_t result);

/**
 * A sparse allreduce whose result is scattered into a dense table: dense
 * (nrows x row_len elements of dtype, host memory) gets every summed row at
 * its index and zeros elsewhere, on every rank. Indices must be < nrows
 * (QC_ERROR_INVALID_ARGUMENT names the entry); nrows must be every rank's.
 * Otherwise as qc_sparse_allreduce.
 */
QC_API qc_status_t qc_sparse_allreduce_dense(qc_comm_t comm, const int64_t* indices,
                                             const void* values, size_t nnz, size_t row_len,
                                             size_t nrows, void* dense, qc_dtype_t dtype,
                                             qc_reduce_op_t op, const char* layer);

/* ======================================================================== */
/* 6. Non-blocking collectives                                               */
/* ======================================================================== */

/**
 * A request: one non-blocking collective started by qc_iallreduce,
 * qc_iallreduce_segments, qc_ialltoall, qc_ireduce_scatter, qc_iallgather,
 * qc_ibroadcast, qc_isparse_allreduce or qc_isparse_allreduce_dense. An
 * opaque handle like qc_comm_t
 * (issued once, refused forever after qc_request_free).
 */
typedef struct qc_request_s* qc_request_t;

/**
 * The non-blocking form of qc_allreduce: starts the call and returns at
 * once with *request naming it. The arguments are those of qc_allreduce
 * with host buffers (no stream), checked the same way before anything
 * starts; device memory is QC_ERROR_UNSUPPORTED (a call on device memory
 * with a stream is already asynchronous: see qc_allreduce).
 *
 * The buffers, and the error buffer, belong to the request until it
 * completes: do not read recvbuf, nor write sendbuf or recvbuf, before
 * qc_request_wait (or a qc_request_test that says done) returns. The error
 * buffer is in use until then (any call naming it fails with
 * QC_ERROR_INVALID_ARGUMENT, "in use"), so each outstanding request needs
 * its own.
 *
 * Order: several requests may be outstanding on one communicator. They run
 * one after another in the order they were started, which must be the same
 * on every rank (as for blocking calls), and each gives exactly what the
 * blocking call gives, bit for bit. A blocking collective, qc_comm_set_layer_policy,
 * qc_comm_apply_preset or qc_comm_adapt_policies on the communicator first waits for
 * the requests started before it; the policy a request uses is the one set
 * when it was started.
 *
 * Progress: qc runs the requests on a progress thread of the communicator,
 * started by its first request, so the caller computes while they run. With
 * QC_PROGRESS_THREAD=0, or on an MPI communicator whose MPI library was not
 * initialised with MPI_THREAD_MULTIPLE (qc may not call MPI from a thread of
 * its own then), there is no thread: the request runs to completion inside
 * this call, which then returns a request that is already done.
 *
 * Failures: a request that fails (its status from qc_request_wait) makes
 * every request started after it on this communicator fail with the same
 * status, without running ("request N did not run: request M ... failed").
 * The failures that break a blocking call's communicator (MISMATCH,
 * TIMEOUT, TRANSPORT, CORRUPT_DATA) break it here too.
 * @return QC_ERROR_INVALID_ARGUMENT for request NULL and the argument errors
 *   of qc_allreduce (nothing started; *request is set to NULL).
 */
QC_API qc_status_t qc_iallreduce(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                 size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                                 const char* layer, qc_error_buffer_t error_buffer,
                                 qc_request_t* request);

/** The non-blocking form of qc_allreduce_segments (host buffers): as
 *  qc_iallreduce. counts and layers are copied: they may be freed once this
 *  returns. */
QC_API qc_status_t qc_iallreduce_segments(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                          size_t nsegments, const size_t* counts,
                                          const char* const* layers, qc_dtype_t dtype,
                                          qc_reduce_op_t op, qc_error_buffer_t error_buffer,
                                          qc_request_t* request);

/** The non-blocking form of qc_alltoall (host buffers): as qc_iallreduce. */
QC_API qc_status_t qc_ialltoall(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t count_per_rank, qc_dtype_t dtype, const char* layer,
                                qc_request_t* request);

/** The non-blocking form of qc_reduce_scatter (host buffers): as qc_iallreduce. */
QC_API qc_status_t qc_ireduce_scatter(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                      size_t recvcount, qc_dtype_t dtype, qc_reduce_op_t op,
                                      const char* layer, qc_error_buffer_t error_buffer,
                                      qc_request_t* request);

/** The non-blocking form of qc_allgather (host buffers): as qc_iallreduce. */
QC_API qc_status_t qc_iallgather(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                 size_t sendcount, qc_dtype_t dtype, const char* layer,
                                 qc_error_buffer_t error_buffer, qc_request_t* request);

/** The non-blocking form of qc_broadcast (host buffers): as qc_iallreduce. */
QC_API qc_status_t qc_ibroadcast(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                                 size_t count, qc_dtype_t dtype, int root, const char* layer,
                                 qc_request_t* request);

/**
 * The non-blocking form of qc_sparse_allreduce: as qc_iallreduce (indices
 * and values belong to the request until it completes). *result names a
 * new result handle at once; it holds the rows once the request has
 * completed successfully. Before that, or after the request failed,
 * qc_sparse_result_nnz and qc_sparse_result_copy refuse it with
 * QC_ERROR_INVALID_ARGUMENT; qc_sparse_result_destroy may free it at any
 * time (the request then finishes without it).
 */
QC_API qc_status_t qc_isparse_allreduce(qc_comm_t comm, const int64_t* indices,
                                        const void* values, size_t nnz, size_t row_len,
                                        qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                        qc_sparse_result_t* result, qc_request_t* request);

/** The non-blocking form of qc_sparse_allreduce_dense: as qc_iallreduce
 *  (dense belongs to the request until it completes). */
QC_API qc_status_t qc_isparse_allreduce_dense(qc_comm_t comm, const int64_t* indices,
                                              const void* values, size_t nnz, size_t row_len,
                                              size_t nrows, void* dense, qc_dtype_t dtype,
                                              qc_reduce_op_t op, const char* layer,
                                              qc_request_t* request);

/**
 * Whether the request has completed, without blocking: *done is 1 once it
 * has, 0 while it runs or waits its turn. Once done the return value is the
 * collective's status (with its message in qc_last_error()), as
 * qc_request_wait returns it; while not done, QC_SUCCESS.
 */
QC_API qc_status_t qc_request_test(qc_request_t request, int* done);

/**
 * Blocks until the request has completed; returns the collective's status
 * (its message in qc_last_error()). The wait is bounded as the blocking call
 * is: a request waits for its peers at most the communicator's timeout once
 * it runs (QC_ERROR_TIMEOUT), after the requests started before it. May be
 * called again, and from any thread; the request stays valid until
 * qc_request_free.
 */
QC_API qc_status_t qc_request_wait(qc_request_t request);

/**
 * Releases the handle. A request that has not completed still runs (its
 * peers need it) and its buffers stay in use until it has; only the handle
 * goes. NULL is accepted and does nothing.
 */
QC_API qc_status_t qc_request_free(qc_request_t request);

/* ======================================================================== */
/* 7. Error buffers                                                          */
/* ======================================================================== */

/**
 * Create a residual store for error feedback on one tensor of `count`
 * elements (count may be 0), all zero. *error_buffer gets the handle; free it
 * with qc_error_buffer_destroy.
 *
 * It holds one rank's residuals, one per element (the error of that rank's
 * one encode of the element in the algorithm: for SRA the worker residual
 * outside the rank's own chunk, the server residual inside; reduce-scatter:
 * nranks x recvcount, one per input element; allgather: sendcount). It belongs to
 * the rank and group size of `comm` (NULL: those of its first
 * qc_emulate_allreduce) and works with any communicator of that rank and
 * size, e.g. one rebuilt after a failure; anything else is
 * QC_ERROR_MISMATCH. On first use it binds to the call's algorithm and codec
 * grid (codec, bits, bucket size, group size); a later call with another
 * grid resets the residuals to zero, with a warning in the log.
 * An allreduce that runs on the device (docs/cuda.md) moves the residuals
 * to the current device's memory (2 * count floats) and keeps them there;
 * the calls below copy or replace them as needed, and destroy frees them.
 */
QC_API qc_status_t qc_error_buffer_create(qc_comm_t comm, size_t count,
                                          qc_error_buffer_t* error_buffer);
/**
 * Free an error buffer (and its device memory, if any). NULL is accepted and
 * does nothing.
 * An error buffer serves one call at a time: while a call on another thread
 * uses it (a collective, which may wait until its timeout, or a query), this
 * and every other call that names it fail with QC_ERROR_INVALID_ARGUMENT
 * ("in use") and change nothing; destroy it after that call has returned.
 * A destroyed handle is refused forever (see qc_comm_t).
 */
QC_API qc_status_t qc_error_buffer_destroy(qc_error_buffer_t error_buffer);
/** Set every residual to zero. */
QC_API qc_status_t qc_error_buffer_reset(qc_error_buffer_t error_buffer);
/** L2 norm of the residuals (computed in double). */
QC_API qc_status_t qc_error_buffer_norm(qc_error_buffer_t error_buffer, double* l2_norm);
/**
 * Serialise the residuals (for a checkpoint) into dst. With dst NULL only
 * *size is set to the number of bytes needed (56 + 4 * count). The image is
 * versioned and checksummed and records the rank, group size, algorithm and
 * codec grid the residuals belong to; QC_ERROR_INVALID_ARGUMENT if capacity
 * is too small.
 */
QC_API qc_status_t qc_error_buffer_save(qc_error_buffer_t error_buffer, void* dst,
                                        size_t capacity, size_t* size);
/**
 * Restore residuals (and their binding) saved by qc_error_buffer_save.
 * QC_ERROR_CORRUPT_DATA for a damaged, truncated or foreign image;
 * QC_ERROR_MISMATCH when it holds a different element count or was saved by
 * another rank or group size than the buffer belongs to. The buffer is
 * unchanged on failure.
 */
QC_API qc_status_t qc_error_buffer_load(qc_error_buffer_t error_buffer, const void* src,
                                        size_t size);

/* ======================================================================== */
/* 8. Codecs on their own                                                    */
/* ======================================================================== */

/*
 * A message from qc_codec_encode is self-describing: a 32-byte little-endian header
 * (magic "QCWF", format version, codec, bits, wire dtype, bucket size, element
 * count, payload length) followed by the payload. qc_codec_decode checks the header
 * before it reads the payload.
 */

/** Upper bound on the bytes qc_codec_encode writes for `count` elements. Exact for
 *  every codec but topk; for codec none, whose payload is the input dtype, the
 *  bound is that of float32 input (16-bit input needs 2 bytes per element).
 *  @return QC_ERROR_INVALID_ARGUMENT naming 'count' when the size would not
 *  fit in size_t (never a wrapped-around size), QC_ERROR_UNSUPPORTED for
 *  topk past 2^32 - 1 elements (as qc_codec_encode), and the policy's errors as
 *  qc_comm_set_layer_policy. */
QC_API qc_status_t qc_codec_encoded_size(const qc_policy_t* policy, size_t count,
                                   size_t* max_bytes);

/** Encode count elements of src with the policy's codec into dst.
 *
 *  src and dst are both host memory or, in a CUDA build, both CUDA device
 *  memory (told apart with cudaPointerGetAttributes; managed memory counts
 *  as device memory); one of each is QC_ERROR_INVALID_ARGUMENT. On the
 *  device the CUDA kernels write exactly the bytes the CPU writes, for
 *  minmax, qsgd and onebit (float32, float16 or bfloat16 input) and none,
 *  fp16, bf16, global_linear, global_exp and the block-scaled codecs (MX,
 *  nvfp4; float32 input); topk and the other dtypes there are
 *  QC_ERROR_UNSUPPORTED. The call returns once the
 *  message is written. */
QC_API qc_status_t qc_codec_encode(const qc_policy_t* policy, const void* src, size_t count,
                             qc_dtype_t dtype, void* dst, size_t capacity,
                             size_t* written);

/** Decode a message from qc_codec_encode into count elements of dtype. A count that
 *  differs from the message's gives QC_ERROR_MISMATCH; a damaged message
 *  QC_ERROR_CORRUPT_DATA. src and dst may both be CUDA device memory, as for
 *  qc_codec_encode (there: the same codecs, dtype float32). */
QC_API qc_status_t qc_codec_decode(const void* src, size_t size, void* dst, size_t count,
                             qc_dtype_t dtype);

/* ======================================================================== */
/* 9. Emulation: N virtual ranks in one call (paper 000 3.2)                 */
/* ======================================================================== */

/**
 * Run an allreduce over `nranks` virtual ranks of a local group, with
 * `policy` for every rank. Each virtual rank runs a rank's real code on a
 * fiber of its own (a small stack, no thread), all of them on one thread
 * per core, so emulating 128 ranks costs their arithmetic, not 128
 * threads. sendbufs[i] / recvbufs[i] are rank i's buffers; a virtual rank
 * reduces in its recvbuf, so after a failed emulation (any qc_emulate_*)
 * the recvbufs hold unspecified values. error_buffers is NULL or an array of nranks error buffers (each
 * created with comm NULL, or for rank i of a group of nranks; entries may be
 * NULL). The result is bit-identical to call `call_index` (0: the first) of
 * layer `layer` (NULL means "*") in a real run of the same inputs, policy
 * and residuals on any transport: stochastic rounding draws the bits of
 * that layer's call, whatever other layers did in between. With
 * scale_update_period > 1 the emulated call computes its scales (as a
 * layer's first call does).
 */
QC_API qc_status_t qc_emulate_allreduce(int nranks, const void* const* sendbufs,
                                        void* const* recvbufs, size_t count,
                                        qc_dtype_t dtype, qc_reduce_op_t op,
                                        const char* layer, uint64_t call_index,
                                        const qc_policy_t* policy,
                                        qc_error_buffer_t* error_buffers);

/** Run an alltoall over `nranks` virtual ranks, as call `call_index` of
 *  `layer` (NULL means "*"); see qc_alltoall and qc_emulate_allreduce. */
QC_API qc_status_t qc_emulate_alltoall(int nranks, const void* const* sendbufs,
                                       void* const* recvbufs, size_t count_per_rank,
                                       qc_dtype_t dtype, const char* layer,
                                       uint64_t call_index, const qc_policy_t* policy);

/** Run a reduce-scatter over `nranks` virtual ranks, as call `call_index`
 *  of `layer`; see qc_reduce_scatter and qc_emulate_allreduce (error_buffers
 *  as there, each of nranks x recvcount residuals). */
QC_API qc_status_t qc_emulate_reduce_scatter(int nranks, const void* const* sendbufs,
                                             void* const* recvbufs, size_t recvcount,
                                             qc_dtype_t dtype, qc_reduce_op_t op,
                                             const char* layer, uint64_t call_index,
                                             const qc_policy_t* policy,
                                             qc_error_buffer_t* error_buffers);

/** Run an allgather over `nranks` virtual ranks, as call `call_index` of
 *  `layer`; see qc_allgather and qc_emulate_allreduce (error_buffers as
 *  there, each of sendcount residuals). */
QC_API qc_status_t qc_emulate_allgather(int nranks, const void* const* sendbufs,
                                        void* const* recvbufs, size_t sendcount,
                                        qc_dtype_t dtype, const char* layer,
                                        uint64_t call_index, const qc_policy_t* policy,
                                        qc_error_buffer_t* error_buffers);

/** Run a broadcast from `root` over `nranks` virtual ranks, as call
 *  `call_index` of `layer`; see qc_broadcast and qc_emulate_allreduce
 *  (sendbufs[r] is read for r == root only; other entries may be NULL). */
QC_API qc_status_t qc_emulate_broadcast(int nranks, const void* const* sendbufs,
                                        void* const* recvbufs, size_t count, qc_dtype_t dtype,
                                        int root, const char* layer, uint64_t call_index,
                                        const qc_policy_t* policy);

/**
 * Run a sparse allreduce over `nranks` virtual ranks, as call `call_index`
 * of `layer`; see qc_sparse_allreduce and qc_emulate_allreduce. Rank r's
 * rows are indices[r] and values[r] (nnz[r] rows; NULL when nnz[r] is 0).
 * Every rank's result is the same bits, so one handle comes back:
 * *result, as qc_sparse_allreduce makes it.
 */
QC_API qc_status_t qc_emulate_sparse_allreduce(int nranks, const int64_t* const* indices,
                                               const void* const* values, const size_t* nnz,
                                               size_t row_len, qc_dtype_t dtype,
                                               qc_reduce_op_t op, const char* layer,
                                               uint64_t call_index, const qc_policy_t* policy,
                                               qc_sparse_result_t* result);

/** Run a sparse allreduce into dense tables over `nranks` virtual ranks:
 *  as qc_emulate_sparse_allreduce, with rank r's table dense[r] (nrows x
 *  row_len elements); see qc_sparse_allreduce_dense. */
QC_API qc_status_t qc_emulate_sparse_allreduce_dense(int nranks, const int64_t* const* indices,
                                                     const void* const* values,
                                                     const size_t* nnz, size_t row_len,
                                                     size_t nrows, void* const* dense,
                                                     qc_dtype_t dtype, qc_reduce_op_t op,
                                                     const char* layer, uint64_t call_index,
                                                     const qc_policy_t* policy);

/* ======================================================================== */
/* 10. Experimental: QC_EXPERIMENTAL_API                                      */
/* ======================================================================== */

/*
 * Declarations here are visible only when QC_EXPERIMENTAL_API is defined
 * before including qc.h. They are exported like the rest and follow the same
 * conventions, but may change or go in a minor release (CHANGELOG.md says
 * so when they do). A declaration leaves this section once its design has
 * settled.
 */
#ifdef QC_EXPERIMENTAL_API

/** How qc_comm_adapt_policies assigns widths (paper 003 §5). */
typedef enum qc_adapt_method QC_ENUM_BASE {
  QC_ADAPT_KMEANS = 0, /* cluster layers by size and sensitivity (Alg. 1) */
  QC_ADAPT_LINEAR = 1  /* lower the least sensitive layers first */
} qc_adapt_method_t;

/** Names of the adapt methods ("kmeans", "linear"), as qc_codec_name and
 *  qc_codec_from_name. */
QC_API const char* qc_adapt_method_name(qc_adapt_method_t method);
QC_API qc_status_t qc_adapt_method_from_name(const char* name, qc_adapt_method_t* method);

/** Input of qc_comm_adapt_policies; a struct that may grow (see the
 *  conventions at the top). */
typedef struct qc_adapt_config {
  size_t struct_size;        /* sizeof(qc_adapt_config_t) */
  qc_adapt_method_t method;  /* default QC_ADAPT_KMEANS */
  double alpha;              /* error budget alpha * E4, >= 1; default 2 */
  int num_allowed;           /* entries of allowed_bits used, 1..8; default 4 */
  int allowed_bits[8];       /* widths to choose from; default {2, 3, 4, 8} */
} qc_adapt_config_t;

#define QC_ADAPT_CONFIG_INIT \
  { sizeof(qc_adapt_config_t), QC_ADAPT_KMEANS, 2.0, 4, {2, 3, 4, 8, 0, 0, 0, 0} }

/** Fill *config with the defaults above, as qc_policy_init_sized. */
QC_API qc_status_t qc_adapt_config_init_sized(qc_adapt_config_t* config, size_t struct_size);
#define qc_adapt_config_init(config) qc_adapt_config_init_sized((config), sizeof *(config))

/** Output of qc_comm_adapt_policies: what it assigned and predicted. */
typedef struct qc_adapt_report {
  size_t struct_size;        /* sizeof(qc_adapt_report_t) */
  uint64_t layers;           /* layers given a width */
  double predicted_error;    /* sum over layers, squared-error units */
  double error_budget;       /* alpha * E4 */
  double e4;
  uint64_t predicted_bytes;  /* per call of every layer, one rank's message */
  uint64_t bytes_at_4;
} qc_adapt_report_t;

#define QC_ADAPT_REPORT_INIT { sizeof(qc_adapt_report_t), 0, 0.0, 0.0, 0.0, 0, 0 }
/** Zero *report for the caller's layout, as qc_policy_init_sized. */
QC_API qc_status_t qc_adapt_report_init_sized(qc_adapt_report_t* report, size_t struct_size);
#define qc_adapt_report_init(report) qc_adapt_report_init_sized((report), sizeof *(report))

/**
 * Adaptive bit widths (paper 003 §5; docs/policies.md). Give each layer
 * whose policy uses minmax or qsgd a width from config->allowed_bits so that
 * the predicted wire bytes fall while the predicted quantization error stays
 * below alpha * E4 (E4: the error with every such layer at 4 bits; one budget
 * per (codec, bucket size, rounding) group). The prediction uses the
 * per-layer statistics (qc_comm_get_layer_stats), summed over all ranks
 * first, so every rank computes the same assignment. It is applied with
 * qc_comm_set_layer_policy under each layer's exact name, from the next
 * collective on.
 *
 * Collective: every rank calls it after the same collectives. config:
 * filled by qc_adapt_config_init; report: NULL or filled by
 * qc_adapt_report_init, gets the result.
 * @return QC_ERROR_MISMATCH on every rank, at once, when ranks' adaptable
 *   layers differ (names, counts, groups); no policy changes then.
 *   QC_ERROR_INVALID_ARGUMENT for a bad config.
 */
QC_API qc_status_t qc_comm_adapt_policies(qc_comm_t comm, const qc_adapt_config_t* config,
                                          qc_adapt_report_t* report);

#endif /* QC_EXPERIMENTAL_API */

#ifdef __cplusplus
}
#endif

#endif /* QC_H */
