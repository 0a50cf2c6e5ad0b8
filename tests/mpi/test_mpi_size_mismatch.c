/* Ranks that disagree on a message's size (issue 28, item 1). Run under
 * mpirun with 3 or more processes and OpenMPI's default transport selection
 * (shared memory with the CMA single-copy path where the kernel allows it;
 * tests/mpi/CMakeLists.txt), never `--mca btl tcp,self`: over TCP, MPI
 * truncates a long message itself, and the fault this test guards against
 * never shows.
 *
 * The last rank (the odd one) disagrees with the others in one way per case,
 * at 65536 floats (messages far above every eager limit), minmax ring,
 * min_compress_bytes 0:
 *   bits      it encodes 2-bit codes, the others 4-bit: its peers' messages
 *             are twice the size it expects;
 *   count0    it passes count 0;
 *   alltoall  it calls qc_alltoall, the others qc_allreduce;
 *   sra_bits  bits again, with SRA (alltoall then allgather messages);
 *   rd_bits   bits again, with recursive doubling.
 * Before the fix, qc posted a receive of the size it expected and relied on
 * MPI to truncate a longer message; OpenMPI's single-copy path wrote the whole
 * message past the buffer ("malloc(): corrupted top size" on the odd rank).
 * Now every rank must return an error status (MISMATCH, or TIMEOUT where the
 * odd rank waits for messages that never come) within timeout + 1 s, none may
 * crash or hang.
 *
 * Each case uses a fresh qc communicator (a failed one stays broken). Rank 0
 * prints "size-mismatch: PASSED" when every rank saw what it should in every
 * case; ctest passes on that line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc.h"

#define COUNT 65536

static int g_rank = 0;
static int g_size = 1;

typedef enum { CASE_BITS, CASE_COUNT0, CASE_ALLTOALL, CASE_SRA_BITS, CASE_RD_BITS } case_t;

static const char* case_name(case_t c) {
  switch (c) {
    case CASE_BITS: return "bits";
    case CASE_COUNT0: return "count0";
    case CASE_ALLTOALL: return "alltoall";
    case CASE_SRA_BITS: return "sra_bits";
    case CASE_RD_BITS: return "rd_bits";
  }
  return "?";
}

/* One case on a fresh communicator; 1 if this rank's verdict is good. */
static int run_case(case_t c, float* x, float* y) {
  const double timeout = 3.0;
  const int odd = g_rank == g_size - 1;
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  qc_policy_t p = QC_POLICY_INIT;
  qc_status_t s;
  double t0, waited;
  int ok = 1;

  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = (int64_t)MPI_Comm_c2f(MPI_COMM_WORLD);
  cfg.timeout_seconds = timeout;
  if (qc_comm_create(&cfg, &comm) != QC_SUCCESS) {
    fprintf(stderr, "rank %d: FAILED qc_comm_create: %s\n", g_rank, qc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.algorithm = c == CASE_SRA_BITS ? QC_ALGO_SRA
                : c == CASE_RD_BITS ? QC_ALGO_RECURSIVE_DOUBLING
                                    : QC_ALGO_RING;
  p.min_compress_bytes = 0;
  if (odd && (c == CASE_BITS || c == CASE_SRA_BITS || c == CASE_RD_BITS)) p.bits = 2;
  if (qc_comm_set_layer_policy(comm, "*", &p) != QC_SUCCESS) {
    fprintf(stderr, "rank %d: FAILED qc_comm_set_layer_policy: %s\n", g_rank, qc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  if (odd && c == CASE_ALLTOALL) {
    s = qc_alltoall(comm, x, y, COUNT / (size_t)g_size, QC_DTYPE_FLOAT32, NULL, NULL);
  } else {
    const size_t count = odd && c == CASE_COUNT0 ? 0 : COUNT;
    s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
  }
  waited = MPI_Wtime() - t0;
  printf("size-mismatch: %s: rank %d -> %s after %.2f s: %s\n", case_name(c), g_rank,
         qc_status_string(s), waited, s == QC_SUCCESS ? "" : qc_last_error());
  if (s == QC_SUCCESS) {
    fprintf(stderr, "rank %d: FAILED %s: a disagreement returned QC_SUCCESS\n", g_rank,
            case_name(c));
    ok = 0;
  }
  if (waited > timeout + 1.0) {
    fprintf(stderr, "rank %d: FAILED %s: took %.2f s > timeout + 1 s\n", g_rank, case_name(c),
            waited);
    ok = 0;
  }
  fflush(stdout);
  qc_comm_destroy(comm);
  return ok;
}

int main(int argc, char** argv) {
  static float x[COUNT], y[COUNT];
  const case_t cases[] = {CASE_BITS, CASE_COUNT0, CASE_ALLTOALL, CASE_SRA_BITS, CASE_RD_BITS};
  int ok = 1, all_ok = 0;
  size_t i;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_size < 3) {
    if (g_rank == 0) fprintf(stderr, "size-mismatch: needs at least 3 processes\n");
    MPI_Finalize();
    return 1;
  }
  for (i = 0; i < COUNT; ++i) x[i] = (float)((i * 7 + (size_t)g_rank) % 13) - 6.0f;
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    /* Only the named case, when one is given (for running one by hand). */
    if (argc > 1 && strcmp(argv[1], case_name(cases[i])) != 0) continue;
    ok &= run_case(cases[i], x, y);
  }
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (g_rank == 0) printf("size-mismatch: %s (%d ranks)\n", all_ok ? "PASSED" : "FAILED", g_size);
  fflush(stdout);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
