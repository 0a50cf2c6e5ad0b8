/*
 * Reduce-scatter, allgather and broadcast over MPI: every rank builds every
 * rank's inputs (deterministic), runs the qc_emulate_* call on them itself
 * and checks that its MPI result is the emulated one bit for bit, for each
 * schedule and several codecs and counts (70001 floats pipelines the
 * broadcast chain); error feedback's residuals match too; a rank that
 * names another root gets QC_ERROR_MISMATCH on every rank, not a hang.
 */
#include <math.h>
#include <string.h>

#include "mpi_test_util.h"

enum kind { REDUCE_SCATTER, ALLGATHER, BROADCAST };
static const char* const kKindNames[] = {"reduce_scatter", "allgather", "broadcast"};

typedef struct {
  const char* name;
  qc_codec_t codec;
  int bits;
  qc_rounding_t rounding;
  int error_feedback;
} codec_case;

static const codec_case kCodecs[] = {
    {"none", QC_CODEC_NONE, 4, QC_ROUND_NEAREST_EVEN, 0},
    {"minmax4+ef", QC_CODEC_MINMAX, 4, QC_ROUND_NEAREST_EVEN, 1},
    {"minmax2~", QC_CODEC_MINMAX, 2, QC_ROUND_STOCHASTIC, 0},
    {"onebit+ef", QC_CODEC_ONEBIT, 1, QC_ROUND_NEAREST_EVEN, 1},
};

static size_t in_count(enum kind k, size_t block) {
  return k == REDUCE_SCATTER ? block * (size_t)g_size : block;
}
static size_t out_count(enum kind k, size_t block) {
  return k == ALLGATHER ? block * (size_t)g_size : block;
}

/* Two calls of one layer (the second with the first's residuals), MPI
 * against the emulation of the same inputs and residuals. */
static void check_equals_emulation(enum kind k, qc_algorithm_t algo, const codec_case* cc,
                                   size_t block, int root) {
  const int n = g_size;
  const size_t in_n = in_count(k, block), out_n = out_count(k, block);
  const int feedback = cc->error_feedback && k != BROADCAST;
  qc_comm_t comm = make_comm(60.0);
  qc_policy_t p = QC_POLICY_INIT;
  float* in = malloc(sizeof(float) * (in_n * (size_t)n + 1));
  float* emu = malloc(sizeof(float) * (out_n * (size_t)n + 1));
  float* out = malloc(sizeof(float) * (out_n + 1));
  const void** sp = malloc(sizeof(void*) * (size_t)n);
  void** rp = malloc(sizeof(void*) * (size_t)n);
  qc_error_buffer_t eb = NULL;
  qc_error_buffer_t* emu_eb = calloc((size_t)n, sizeof(qc_error_buffer_t));
  int r, t;
  p.codec = cc->codec;
  p.bits = cc->bits;
  p.rounding = cc->rounding;
  p.error_feedback = feedback;
  p.algorithm = algo;
  p.seed = 1234;
  p.min_compress_bytes = 0;
  CHECK(qc_comm_set_layer_policy(comm, "*", &p) == QC_SUCCESS, "policy");
  if (feedback) {
    CHECK(qc_error_buffer_create(comm, in_n, &eb) == QC_SUCCESS, "error buffer");
    for (r = 0; r < n; ++r)
      CHECK(qc_error_buffer_create(NULL, in_n, &emu_eb[r]) == QC_SUCCESS, "error buffer");
  }
  for (t = 0; t < 2; ++t) {
    qc_status_t s;
    for (r = 0; r < n; ++r) {
      fill_input(in + (size_t)r * in_n, in_n, r, t);
      sp[r] = in + (size_t)r * in_n;
      rp[r] = emu + (size_t)r * out_n;
    }
    switch (k) {
      case REDUCE_SCATTER:
        s = qc_emulate_reduce_scatter(n, sp, rp, block, QC_DTYPE_FLOAT32, QC_OP_AVG, "grad",
                                      (uint64_t)t, &p, feedback ? emu_eb : NULL);
        CHECK(s == QC_SUCCESS, "emulated %s", kKindNames[k]);
        s = qc_reduce_scatter(comm, sp[g_rank], out, block, QC_DTYPE_FLOAT32, QC_OP_AVG, "grad",
                              eb, NULL);
        break;
      case ALLGATHER:
        s = qc_emulate_allgather(n, sp, rp, block, QC_DTYPE_FLOAT32, "grad", (uint64_t)t, &p,
                                 feedback ? emu_eb : NULL);
        CHECK(s == QC_SUCCESS, "emulated %s", kKindNames[k]);
        s = qc_allgather(comm, sp[g_rank], out, block, QC_DTYPE_FLOAT32, "grad", eb, NULL);
        break;
      default:
        s = qc_emulate_broadcast(n, sp, rp, block, QC_DTYPE_FLOAT32, root, "grad", (uint64_t)t,
                                 &p);
        CHECK(s == QC_SUCCESS, "emulated %s", kKindNames[k]);
        s = qc_broadcast(comm, sp[g_rank], out, block, QC_DTYPE_FLOAT32, root, "grad", NULL);
        break;
    }
    CHECK(s == QC_SUCCESS, "%s over MPI", kKindNames[k]);
    CHECK(out_n == 0 || memcmp(out, emu + (size_t)g_rank * out_n, sizeof(float) * out_n) == 0,
          "%s %s algorithm %d count %zu call %d: MPI differs from the emulation", kKindNames[k],
          cc->name, (int)algo, block, t);
  }
  if (feedback) {
    double a = -1, b = -2;
    CHECK(qc_error_buffer_norm(eb, &a) == QC_SUCCESS, "norm");
    CHECK(qc_error_buffer_norm(emu_eb[g_rank], &b) == QC_SUCCESS, "norm");
    CHECK(a == b, "%s %s: residual norm %.17g over MPI, %.17g emulated", kKindNames[k],
          cc->name, a, b);
    CHECK(block < 1000 || a > 0, "%s %s: no residual left", kKindNames[k], cc->name);
    qc_error_buffer_destroy(eb);
    for (r = 0; r < n; ++r) qc_error_buffer_destroy(emu_eb[r]);
  }
  qc_comm_destroy(comm);
  free(in);
  free(emu);
  free(out);
  free(sp);
  free(rp);
  free(emu_eb);
}

/* The last rank names another root: every rank fails with MISMATCH, fast. */
static void check_root_mismatch(void) {
  qc_comm_t comm = make_comm(30.0);
  float x[64], y[64];
  double t0 = MPI_Wtime();
  const int root = g_rank == g_size - 1 ? 1 : 0;
  qc_status_t s;
  fill_input(x, 64, g_rank, 3);
  s = qc_broadcast(comm, x, y, 64, QC_DTYPE_FLOAT32, root, NULL, NULL);
  CHECK(s == QC_ERROR_MISMATCH, "a root mismatch gave %s", qc_status_string(s));
  CHECK(MPI_Wtime() - t0 < 10.0, "mismatch took %.1f s", MPI_Wtime() - t0);
  qc_comm_destroy(comm);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  const size_t counts[] = {0, 1, 1000, 70001};
  static const qc_algorithm_t rs_algos[] = {QC_ALGO_AUTO, QC_ALGO_RING};
  static const qc_algorithm_t ag_algos[] = {QC_ALGO_AUTO, QC_ALGO_RING,
                                            QC_ALGO_RECURSIVE_DOUBLING};
  static const qc_algorithm_t bc_algos[] = {QC_ALGO_AUTO, QC_ALGO_RING, QC_ALGO_TREE};
  size_t c, a, k;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  for (k = 0; k < sizeof kCodecs / sizeof kCodecs[0]; ++k) {
    for (c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
      for (a = 0; a < 2; ++a) check_equals_emulation(REDUCE_SCATTER, rs_algos[a], &kCodecs[k], counts[c], 0);
      for (a = 0; a < 3; ++a) check_equals_emulation(ALLGATHER, ag_algos[a], &kCodecs[k], counts[c], 0);
      for (a = 0; a < 3; ++a) {
        check_equals_emulation(BROADCAST, bc_algos[a], &kCodecs[k], counts[c], 0);
        check_equals_emulation(BROADCAST, bc_algos[a], &kCodecs[k], counts[c], g_size - 1);
      }
    }
  }
  if (g_rank == 0) printf("reduce_scatter, allgather, broadcast over MPI = emulation\n");
  if (g_size > 2) {
    check_root_mismatch();
    if (g_rank == 0) printf("root mismatch -> QC_ERROR_MISMATCH on every rank\n");
  }
  MPI_Finalize();
  return 0;
}
