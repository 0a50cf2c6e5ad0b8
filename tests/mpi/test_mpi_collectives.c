/* The MPI transport, run under mpirun with 2-4 processes (tests/mpi/
 * CMakeLists.txt). Every rank computes every rank's inputs (they are
 * deterministic), runs qc_emulate_allreduce on them itself and checks that
 * its MPI result is the emulated one bit for bit: "emulation = distribution".
 *
 * Usage: test_mpi_collectives [--peer-death | --device]
 *   --peer-death: the last rank skips a collective; the others must return
 *                 QC_ERROR_TIMEOUT within the timeout + 1 s.
 *   --device:     (the build with QC_TEST_DEVICE) every collective takes CUDA
 *                 device buffers and a stream, which qc stages through host
 *                 memory; all processes share GPU 0, and the results must
 *                 still be the emulation's bit for bit. Without a device
 *                 every rank prints "no CUDA device" and the test is skipped.
 * Prints one line per check; exits 1 on the first failure (after telling
 * MPI, so that no rank hangs). */
#include <mpi.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc.h"
#if defined(QC_TEST_DEVICE)
#include <cuda_runtime.h>
#endif

static int g_rank = 0;
static int g_size = 1;
static int g_failed = 0;
static int g_device = 0; /* --device: collectives on device buffers */

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "rank %d: FAILED %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, " (qc_last_error: %s)\n", qc_last_error());         \
      g_failed = 1;                                                        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                        \
    }                                                                      \
  } while (0)

/* Rank r's input for call t: uniform in [-1, 1), 24 random bits each. */
static void fill_input(float* x, size_t count, int r, int t) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1) + 0x632be59bd9b4e019ull * (uint64_t)(t + 7);
  size_t i;
  for (i = 0; i < count; ++i) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x[i] = (float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
  }
}

#if defined(QC_TEST_DEVICE)
static cudaStream_t g_stream = NULL;

static void* device_copy_of(const void* host, size_t bytes) {
  void* d = NULL;
  CHECK(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess, "cudaMalloc of %zu bytes", bytes);
  if (bytes) CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
  return d;
}
#endif

/* qc_allreduce (QC_OP_AVG, float32) of host `in` into host `out`; with
 * --device through device copies of both and the rank's stream. */
static qc_status_t allreduce_here(qc_comm_t comm, const float* in, float* out, size_t count,
                                  const char* layer, qc_error_buffer_t eb) {
#if defined(QC_TEST_DEVICE)
  if (g_device) {
    const size_t bytes = sizeof(float) * count;
    void* d_in = device_copy_of(in, bytes);
    void* d_out = device_copy_of(out, bytes);
    qc_status_t s =
        qc_allreduce(comm, d_in, d_out, count, QC_DTYPE_FLOAT32, QC_OP_AVG, layer, eb, g_stream);
    if (s == QC_SUCCESS && bytes)
      CHECK(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    cudaFree(d_in);
    cudaFree(d_out);
    return s;
  }
#endif
  return qc_allreduce(comm, in, out, count, QC_DTYPE_FLOAT32, QC_OP_AVG, layer, eb, NULL);
}

static qc_status_t alltoall_here(qc_comm_t comm, const float* in, float* out, size_t cpr,
                                 const char* layer) {
#if defined(QC_TEST_DEVICE)
  if (g_device) {
    const size_t bytes = sizeof(float) * cpr * (size_t)g_size;
    void* d_in = device_copy_of(in, bytes);
    void* d_out = device_copy_of(out, bytes);
    qc_status_t s = qc_alltoall(comm, d_in, d_out, cpr, QC_DTYPE_FLOAT32, layer, g_stream);
    if (s == QC_SUCCESS)
      CHECK(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    cudaFree(d_in);
    cudaFree(d_out);
    return s;
  }
#endif
  return qc_alltoall(comm, in, out, cpr, QC_DTYPE_FLOAT32, layer, NULL);
}

static qc_comm_t make_comm(double timeout) {
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = (int64_t)MPI_Comm_c2f(MPI_COMM_WORLD);
  cfg.timeout_seconds = timeout;
  CHECK(qc_comm_create(&cfg, &comm) == QC_SUCCESS, "qc_comm_create over MPI_COMM_WORLD");
  return comm;
}

typedef struct {
  const char* name;
  qc_codec_t codec;
  int bits;
  qc_rounding_t rounding;
  int error_feedback;
} codec_case;

static const codec_case kCodecs[] = {
    {"none", QC_CODEC_NONE, 4, QC_ROUND_NEAREST_EVEN, 0},
    {"fp16", QC_CODEC_FP16, 4, QC_ROUND_NEAREST_EVEN, 0},
    {"minmax4+ef", QC_CODEC_MINMAX, 4, QC_ROUND_NEAREST_EVEN, 1},
    {"minmax2~", QC_CODEC_MINMAX, 2, QC_ROUND_STOCHASTIC, 0},
    {"qsgd4~+ef", QC_CODEC_QSGD, 4, QC_ROUND_STOCHASTIC, 1},
    {"onebit+ef", QC_CODEC_ONEBIT, 1, QC_ROUND_NEAREST_EVEN, 1},
    {"topk+ef", QC_CODEC_TOPK, 4, QC_ROUND_NEAREST_EVEN, 1},
    {"global_linear4~", QC_CODEC_GLOBAL_LINEAR, 4, QC_ROUND_STOCHASTIC, 0},
    {"global_exp4+ef", QC_CODEC_GLOBAL_EXP, 4, QC_ROUND_NEAREST_EVEN, 1},
};

static const qc_algorithm_t kAlgorithms[] = {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING,
                                             QC_ALGO_SRA, QC_ALGO_TREE, QC_ALGO_NATIVE,
                                             QC_ALGO_AUTO};

/* Codec none with native or auto over MPI is MPI_Allreduce (qc.h): the
 * sum agrees with the emulated ring to float rounding (the summation order
 * is MPI's), the replicas are bit-identical, and an error buffer stays zero.
 * `in` holds every rank's input (count values each). */
static void check_transport_sum(qc_comm_t comm, const qc_policy_t* p, const float* in,
                                size_t count) {
  const int n = g_size;
  float* out = malloc(sizeof(float) * count);
  float* first = malloc(sizeof(float) * count);
  qc_error_buffer_t eb = NULL;
  double norm = -1;
  size_t i;
  int r;
  CHECK(qc_error_buffer_create(NULL, count, &eb) == QC_SUCCESS, "eb");
  CHECK(allreduce_here(comm, in + (size_t)g_rank * count, out, count, "grad",
                       p->error_feedback ? eb : NULL) == QC_SUCCESS,
        "transport sum, algorithm %d: %s", (int)p->algorithm, qc_last_error());
  for (i = 0; i < count; ++i) {
    double exact = 0, mag = 0;
    for (r = 0; r < n; ++r) {
      exact += in[(size_t)r * count + i];
      mag += fabs(in[(size_t)r * count + i]);
    }
    CHECK(fabs(out[i] - exact / n) <= 4.0 * n * FLT_EPSILON * mag / n,
          "algorithm %d count %zu: element %zu is %.9g, exact %.9g", (int)p->algorithm, count, i,
          out[i], exact / n);
  }
  memcpy(first, out, sizeof(float) * count);
  MPI_Bcast(first, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  CHECK(memcmp(first, out, sizeof(float) * count) == 0, "replicas differ (count %zu)", count);
  qc_error_buffer_norm(eb, &norm);
  CHECK(norm == 0.0, "codec none left a residual norm %g", norm);
  qc_error_buffer_destroy(eb);
  free(out);
  free(first);
}

/* Two calls in a row (the second sees the first's residuals), each on a
 * fresh communicator as each emulation is a fresh group. */
static void check_allreduce_equals_emulation(const codec_case* cc, qc_algorithm_t algo,
                                             size_t count) {
  const int n = g_size;
  qc_policy_t p = QC_POLICY_INIT;
  float* in = malloc(sizeof(float) * count * (size_t)n);
  float* emu = malloc(sizeof(float) * count * (size_t)n);
  float* out = malloc(sizeof(float) * count);
  const void** sp = malloc(sizeof(void*) * (size_t)n);
  void** rp = malloc(sizeof(void*) * (size_t)n);
  qc_error_buffer_t* emu_eb = calloc((size_t)n, sizeof(qc_error_buffer_t));
  qc_error_buffer_t eb = NULL;
  qc_comm_t comm;
  int r, t;
  size_t i;
  p.codec = cc->codec;
  p.bits = cc->bits;
  p.rounding = cc->rounding;
  p.error_feedback = cc->error_feedback;
  p.algorithm = algo;
  p.topk_ratio = 0.25f;
  p.seed = 99;
  p.min_compress_bytes = 0; /* small counts too go through the codec */
  for (r = 0; r < n; ++r) CHECK(qc_error_buffer_create(NULL, count, &emu_eb[r]) == QC_SUCCESS, "eb");
  CHECK(qc_error_buffer_create(NULL, count, &eb) == QC_SUCCESS, "eb");
  /* One communicator for both calls of layer "grad", another layer called
   * in between: call t of "grad" is the emulation's call_index t. */
  comm = make_comm(60.0);
  CHECK(qc_comm_set_layer_policy(comm, "grad", &p) == QC_SUCCESS, "policy");
  for (t = 0; t < 2; ++t) {
    qc_status_t s;
    for (r = 0; r < n; ++r) {
      fill_input(in + (size_t)r * count, count, r, t);
      sp[r] = in + (size_t)r * count;
      rp[r] = emu + (size_t)r * count;
    }
    if (cc->codec == QC_CODEC_NONE && n > 1 &&
        (algo == QC_ALGO_NATIVE || algo == QC_ALGO_AUTO)) {
      /* Uncompressed: MPI_Allreduce sums, in its own order. */
      check_transport_sum(comm, &p, in, count);
      break;
    }
    s = qc_emulate_allreduce(n, sp, rp, count, QC_DTYPE_FLOAT32, QC_OP_AVG, "grad", (uint64_t)t, &p,
                             emu_eb);
    if (algo == QC_ALGO_NATIVE && cc->codec != QC_CODEC_GLOBAL_LINEAR &&
        cc->codec != QC_CODEC_GLOBAL_EXP) {
      CHECK(s == QC_ERROR_UNSUPPORTED, "emulated native with %s", cc->name);
      CHECK(allreduce_here(comm, in + (size_t)g_rank * count, out, count, "grad", eb) ==
                QC_ERROR_UNSUPPORTED,
            "MPI native with %s", cc->name);
      break;
    }
    CHECK(s == QC_SUCCESS, "emulation %s", cc->name);
    s = allreduce_here(comm, in + (size_t)g_rank * count, out, count, "grad", eb);
    CHECK(s == QC_SUCCESS, "allreduce %s: %s", cc->name, qc_status_string(s));
    for (i = 0; i < count; ++i) {
      CHECK(memcmp(&out[i], &emu[(size_t)g_rank * count + i], 4) == 0,
            "codec %s algorithm %d count %zu call %d: element %zu is %.9g over MPI, %.9g emulated",
            cc->name, (int)algo, count, t, i, out[i], emu[(size_t)g_rank * count + i]);
    }
    /* Another layer's call (same policy) does not move "grad"'s stream. */
    CHECK(qc_comm_set_layer_policy(comm, "other", &p) == QC_SUCCESS, "policy");
    CHECK(
        allreduce_here(comm, in + (size_t)g_rank * count, out, count, "other", NULL) == QC_SUCCESS,
        "allreduce of another layer");
  }
  CHECK(qc_comm_destroy(comm) == QC_SUCCESS, "destroy");
  if (cc->error_feedback) {
    double a = 0, b = 0;
    qc_error_buffer_norm(eb, &a);
    qc_error_buffer_norm(emu_eb[g_rank], &b);
    CHECK(a == b, "%s: residual norm %.17g over MPI, %.17g emulated", cc->name, a, b);
  }
  for (r = 0; r < n; ++r) qc_error_buffer_destroy(emu_eb[r]);
  qc_error_buffer_destroy(eb);
  free(in);
  free(emu);
  free(out);
  free(sp);
  free(rp);
  free(emu_eb);
}

/* Forward at 4 bits, backward at 2: each layer's policy, emulated = MPI. */
static void check_alltoall_layers(void) {
  const int n = g_size;
  const size_t cpr = 300;
  const size_t total = cpr * (size_t)n;
  qc_comm_t comm = make_comm(60.0);
  qc_policy_t fwd = QC_POLICY_INIT, bwd = QC_POLICY_INIT;
  float* in = malloc(sizeof(float) * total * (size_t)n);
  float* emu = malloc(sizeof(float) * total * (size_t)n);
  float* out = malloc(sizeof(float) * total);
  const void** sp = malloc(sizeof(void*) * (size_t)n);
  void** rp = malloc(sizeof(void*) * (size_t)n);
  int r, pass;
  fwd.codec = QC_CODEC_MINMAX;
  fwd.bits = 4;
  bwd = fwd;
  bwd.bits = 2;
  CHECK(qc_comm_set_layer_policy(comm, "emb_fwd", &fwd) == QC_SUCCESS, "policy");
  CHECK(qc_comm_set_layer_policy(comm, "emb_bwd", &bwd) == QC_SUCCESS, "policy");
  for (pass = 0; pass < 2; ++pass) {
    for (r = 0; r < n; ++r) {
      fill_input(in + (size_t)r * total, total, r, 10 + pass);
      sp[r] = in + (size_t)r * total;
      rp[r] = emu + (size_t)r * total;
    }
    CHECK(qc_emulate_alltoall(n, sp, rp, cpr, QC_DTYPE_FLOAT32, pass ? "emb_bwd" : "emb_fwd", 0,
                              pass ? &bwd : &fwd) == QC_SUCCESS,
          "emulated alltoall");
    CHECK(alltoall_here(comm, in + (size_t)g_rank * total, out, cpr,
                        pass ? "emb_bwd" : "emb_fwd") == QC_SUCCESS,
          "alltoall");
    CHECK(memcmp(out, emu + (size_t)g_rank * total, sizeof(float) * total) == 0,
          "alltoall pass %d differs from emulation", pass);
  }
  qc_comm_destroy(comm);
  free(in);
  free(emu);
  free(out);
  free(sp);
  free(rp);
}

/* The default policy's min_compress_bytes (16 KiB): a 4 KB minmax message
 * goes uncompressed (exact to float rounding), a 64 KB one is quantized. */
static void check_min_compress_bytes(void) {
  const size_t counts[] = {1000, 16384};
  size_t c, i;
  for (c = 0; c < 2; ++c) {
    const size_t count = counts[c];
    qc_comm_t comm = make_comm(60.0);
    qc_policy_t p = QC_POLICY_INIT;
    float* x = malloc(sizeof(float) * count);
    float* y = malloc(sizeof(float) * count);
    double worst = 0;
    p.codec = QC_CODEC_MINMAX;
    p.bits = 2;
    CHECK(p.min_compress_bytes == 16384, "default min_compress_bytes %zu", p.min_compress_bytes);
    CHECK(qc_comm_set_layer_policy(comm, "*", &p) == QC_SUCCESS, "policy");
    for (i = 0; i < count; ++i) x[i] = (float)((i * 7 + 3) % 11) * 0.125f;
    CHECK(qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL) ==
              QC_SUCCESS, "allreduce: %s", qc_last_error());
    /* Multiples of 1/8 add exactly in any order. */
    for (i = 0; i < count; ++i) worst = fmax(worst, fabs(y[i] - (double)g_size * x[i]));
    if (count * 4 < p.min_compress_bytes)
      CHECK(worst == 0.0, "count %zu below the threshold: error %g", count, worst);
    else
      CHECK(worst > 0.01, "count %zu above the threshold: 2-bit error only %g", count, worst);
    qc_comm_destroy(comm);
    free(x);
    free(y);
  }
}

/* One rank passes another count: QC_ERROR_MISMATCH on every rank, and the
 * communicator stays broken. */
static void check_mismatch(qc_codec_t codec) {
  qc_comm_t comm = make_comm(30.0);
  qc_policy_t p = QC_POLICY_INIT;
  float x[64], y[64];
  qc_status_t s;
  double t0 = MPI_Wtime();
  size_t count = g_rank == g_size - 1 ? 40 : 64;
  p.codec = codec;
  p.min_compress_bytes = 0;
  CHECK(qc_comm_set_layer_policy(comm, "*", &p) == QC_SUCCESS, "policy");
  fill_input(x, 64, g_rank, 3);
  s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
  CHECK(s == QC_ERROR_MISMATCH, "a count mismatch gave %s", qc_status_string(s));
  CHECK(MPI_Wtime() - t0 < 10.0, "mismatch took %.1f s", MPI_Wtime() - t0);
  s = qc_allreduce(comm, x, y, 64, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
  CHECK(s == QC_ERROR_MISMATCH, "the broken communicator answered %s", qc_status_string(s));
  qc_comm_destroy(comm);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The last rank leaves (finalizes MPI and exits) before the collective:
 * the others time out within timeout + 1 s. (A process killed outright is
 * mpirun's business: OpenMPI ends the whole job.) */
static void check_peer_death(void) {
  const double timeout = 2.0;
  qc_comm_t comm = make_comm(timeout);
  float x[1000], y[1000];
  fill_input(x, 1000, g_rank, 4);
  if (g_rank == g_size - 1) {
    MPI_Finalize();
    exit(0);
  }
  {
    double t0 = MPI_Wtime();
    qc_status_t s = qc_allreduce(comm, x, y, 1000, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
    double waited = MPI_Wtime() - t0;
    CHECK(s == QC_ERROR_TIMEOUT, "a missing peer gave %s", qc_status_string(s));
    CHECK(waited < timeout + 1.0, "the timeout took %.2f s", waited);
    printf("rank %d: missing peer -> %s after %.2f s (%s)\n", g_rank, qc_status_string(s), waited,
           qc_last_error());
  }
  qc_comm_destroy(comm);
}

#if defined(QC_TEST_DEVICE)
/* Device and host buffers mixed in one call: a clear local error that does
 * not break the communicator (no rank has sent anything). */
static void check_device_buffer_errors(void) {
  float host[8] = {0};
  void* dev = device_copy_of(host, sizeof host);
  qc_comm_t comm = make_comm(60.0);
  qc_status_t e = QC_ERROR_INTERNAL;
  CHECK(qc_allreduce(comm, dev, host, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, g_stream) ==
            QC_ERROR_INVALID_ARGUMENT && strstr(qc_last_error(), "'recvbuf' is host memory"),
        "device sendbuf with host recvbuf");
  CHECK(qc_alltoall(comm, host, dev, 8 / (size_t)g_size, QC_DTYPE_FLOAT32, NULL, g_stream) ==
            QC_ERROR_INVALID_ARGUMENT && strstr(qc_last_error(), "'sendbuf' is host memory"),
        "host sendbuf with device recvbuf");
  CHECK(qc_allreduce(comm, host, host, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, g_stream) ==
            QC_ERROR_UNSUPPORTED && strstr(qc_last_error(), "'stream'"),
        "a stream with host buffers");
  CHECK(qc_comm_get_async_error(comm, &e) == QC_SUCCESS && e == QC_SUCCESS,
        "argument errors leave the group healthy");
  /* in place on the device: the sum of every rank's ones */
  {
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float back[8];
    int i;
    CHECK(cudaMemcpy(dev, ones, sizeof ones, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
    CHECK(qc_allreduce(comm, dev, dev, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, g_stream) ==
              QC_SUCCESS, "in place on the device");
    CHECK(cudaMemcpy(back, dev, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    for (i = 0; i < 8; ++i) CHECK(back[i] == (float)g_size, "in place: %g", back[i]);
  }
  qc_comm_destroy(comm);
  cudaFree(dev);
}
#endif

/* Non-blocking calls over MPI: four requests of different layers, codecs
 * and collectives started before any is waited for give the blocking calls'
 * results bit for bit (on a progress thread under MPI_THREAD_MULTIPLE,
 * inline at their start below it). */
static void check_requests(void) {
  enum { kCalls = 4 };
  const size_t count = 6007;
  const int n = g_size;
  const char* layers[kCalls] = {"r.minmax", "r.onebit", "r.a2a", "r.qsgd"};
  float* in = malloc(sizeof(float) * count * (size_t)n);
  float* blocking = malloc(sizeof(float) * count * (size_t)n * kCalls);
  float* nonblocking = malloc(sizeof(float) * count * (size_t)n * kCalls);
  int pass, i;
  size_t j;
  fill_input(in, count * (size_t)n, g_rank, 3);
  for (pass = 0; pass < 2; ++pass) {
    float* out = pass == 0 ? blocking : nonblocking;
    qc_comm_t comm = make_comm(60.0);
    qc_request_t req[kCalls] = {NULL, NULL, NULL, NULL};
    qc_error_buffer_t eb = NULL;
    qc_policy_t p = QC_POLICY_INIT;
    p.min_compress_bytes = 0;
    p.seed = 5;
    p.codec = QC_CODEC_MINMAX;
    p.algorithm = QC_ALGO_SRA;
    CHECK(qc_comm_set_layer_policy(comm, "r.minmax", &p) == QC_SUCCESS, "policy");
    p.codec = QC_CODEC_ONEBIT;
    p.bits = 1;
    p.error_feedback = 1;
    p.algorithm = QC_ALGO_RING;
    CHECK(qc_comm_set_layer_policy(comm, "r.onebit", &p) == QC_SUCCESS, "policy");
    p.codec = QC_CODEC_MINMAX;
    p.bits = 8;
    p.error_feedback = 0;
    CHECK(qc_comm_set_layer_policy(comm, "r.a2a", &p) == QC_SUCCESS, "policy");
    p.codec = QC_CODEC_QSGD;
    p.bits = 4;
    p.rounding = QC_ROUND_STOCHASTIC;
    p.algorithm = QC_ALGO_RECURSIVE_DOUBLING;
    CHECK(qc_comm_set_layer_policy(comm, "r.qsgd", &p) == QC_SUCCESS, "policy");
    CHECK(qc_error_buffer_create(comm, count, &eb) == QC_SUCCESS, "eb");
    for (i = 0; i < kCalls; ++i) {
      float* o = out + (size_t)i * count * (size_t)n;
      qc_status_t s;
      if (i == 2) {
        s = pass == 0 ? qc_alltoall(comm, in, o, count, QC_DTYPE_FLOAT32, layers[i], NULL)
                      : qc_ialltoall(comm, in, o, count, QC_DTYPE_FLOAT32, layers[i], &req[i]);
      } else {
        qc_error_buffer_t b = i == 1 ? eb : NULL;
        s = pass == 0 ? qc_allreduce(comm, in, o, count, QC_DTYPE_FLOAT32, QC_OP_SUM, layers[i],
                                     b, NULL)
                      : qc_iallreduce(comm, in, o, count, QC_DTYPE_FLOAT32, QC_OP_SUM, layers[i],
                                      b, &req[i]);
      }
      CHECK(s == QC_SUCCESS, "call %d (%s): %s", i, pass ? "request" : "blocking", qc_last_error());
    }
    for (i = kCalls - 1; i >= 0; --i) {
      if (req[i] == NULL) continue;
      CHECK(qc_request_wait(req[i]) == QC_SUCCESS, "wait %d: %s", i, qc_last_error());
      CHECK(qc_request_free(req[i]) == QC_SUCCESS, "free %d", i);
    }
    qc_error_buffer_destroy(eb);
    CHECK(qc_comm_destroy(comm) == QC_SUCCESS, "destroy");
  }
  for (i = 0; i < kCalls; ++i) {
    const size_t len = i == 2 ? count * (size_t)n : count;
    for (j = 0; j < len; ++j) {
      const size_t at = (size_t)i * count * (size_t)n + j;
      if (memcmp(&blocking[at], &nonblocking[at], 4) != 0) {
        CHECK(0, "request %d element %zu: %.9g, blocking %.9g", i, j, nonblocking[at],
              blocking[at]);
        break;
      }
    }
  }
  free(in);
  free(blocking);
  free(nonblocking);
}

int main(int argc, char** argv) {
  const size_t counts[] = {1, 1000, 20011};
  size_t c, a, k;
  int peer_death = argc > 1 && strcmp(argv[1], "--peer-death") == 0;
  /* --thread-multiple: MPI_THREAD_MULTIPLE, so qc's requests run on its
   * progress thread (below it they run inline at their start). */
  const int thread_multiple = argc > 1 && strcmp(argv[1], "--thread-multiple") == 0;
  g_device = argc > 1 && strcmp(argv[1], "--device") == 0;

  /* Before MPI_Init: a clear error, and qc does not initialize MPI. */
  {
    qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
    qc_comm_t comm = NULL;
    int initialized = 1;
    cfg.transport = QC_TRANSPORT_MPI;
    if (qc_comm_create(&cfg, &comm) != QC_ERROR_TRANSPORT ||
        strstr(qc_last_error(), "MPI_Init") == NULL) {
      fprintf(stderr, "FAILED: qc_comm_create before MPI_Init: %s\n", qc_last_error());
      return 1;
    }
    MPI_Initialized(&initialized);
    if (initialized) {
      fprintf(stderr, "FAILED: qc initialized MPI\n");
      return 1;
    }
  }
  if (thread_multiple) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      printf("MPI_THREAD_MULTIPLE not provided: requests run inline\n");
    }
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);

  /* A handle that names no communicator: a clear error, not an MPI abort. */
  {
    qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
    qc_comm_t comm = NULL;
    cfg.transport = QC_TRANSPORT_MPI;
    cfg.mpi_comm = 12345;
    CHECK(qc_comm_create(&cfg, &comm) == QC_ERROR_INVALID_ARGUMENT && comm == NULL,
          "a bogus MPI handle");
    cfg.mpi_comm = (int64_t)1 << 40;
    CHECK(qc_comm_create(&cfg, &comm) == QC_ERROR_INVALID_ARGUMENT, "an out-of-range handle");
  }

  if (g_device) {
#if defined(QC_TEST_DEVICE)
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      if (g_rank == 0) printf("no CUDA device: the device-buffer MPI test is skipped\n");
      MPI_Finalize();
      return 0;
    }
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
    CHECK(cudaStreamCreate(&g_stream) == cudaSuccess, "cudaStreamCreate");
    check_device_buffer_errors();
    if (g_rank == 0) printf("device buffers: mixing and host-only entry points refused\n");
#else
    if (g_rank == 0) fprintf(stderr, "FAILED: --device needs the QC_TEST_DEVICE build\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  }
  if (peer_death) {
    check_peer_death();
  } else if (thread_multiple) {
    check_requests();
    if (g_rank == 0) printf("requests under MPI_THREAD_MULTIPLE = blocking calls\n");
  } else {
    check_requests();
    if (g_rank == 0) printf("requests (inline below MPI_THREAD_MULTIPLE) = blocking calls\n");
    for (k = 0; k < sizeof kCodecs / sizeof kCodecs[0]; ++k)
      for (a = 0; a < sizeof kAlgorithms / sizeof kAlgorithms[0]; ++a)
        for (c = 0; c < sizeof counts / sizeof counts[0]; ++c)
          check_allreduce_equals_emulation(&kCodecs[k], kAlgorithms[a], counts[c]);
    if (g_rank == 0) printf("allreduce over MPI = emulation: every codec x algorithm x count\n");
    check_alltoall_layers();
    if (g_rank == 0) printf("alltoall with per-layer widths = emulation\n");
    check_min_compress_bytes();
    if (g_rank == 0) printf("below min_compress_bytes: uncompressed, MPI's sum\n");
    check_mismatch(QC_CODEC_NONE);   /* the agreement before MPI_Allreduce */
    check_mismatch(QC_CODEC_MINMAX); /* qc's own messages */
    if (g_rank == 0) printf("count mismatch -> QC_ERROR_MISMATCH on every rank\n");
  }
#if defined(QC_TEST_DEVICE)
  if (g_stream != NULL) cudaStreamDestroy(g_stream);
#endif
  MPI_Finalize();
  return g_failed;
}
