/*
 * c_mpi_allreduce.c - average a gradient over MPI ranks with 4-bit codes.
 *
 * Every rank holds a gradient-like vector of 10000 floats (two "layers" of
 * different magnitude, different on every rank and every step) and averages
 * it with qc_allreduce: minmax codec, 4 bits, buckets of 128, error feedback
 * on, algorithm SRA (scatter-reduce-allgather), over several steps. The
 * program checks what a user would want to know and exits non-zero if any
 * check fails on any rank:
 *   - every rank gets the same bits;
 *   - each element is within the quantization bound of the exact average
 *     (computed here in double from every rank's inputs: they are a formula);
 *   - summed over the steps, the outputs stay within one step's bound of
 *     the exact sums (error feedback carries what was lost to the next step);
 *   - the residual norm is finite and non-zero (error feedback is in use).
 *
 * Build: cmake builds it when MPI is found (target qc_example_c_mpi_allreduce),
 *   or by hand: mpicc -std=c99 c_mpi_allreduce.c $(pkg-config --cflags --libs qc) -lm
 * Run:   mpirun -np 3 ./c_mpi_allreduce   (ctest: example_c_mpi_allreduce)
 */
#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <qc.h>

#define COUNT 10000
#define STEPS 5
#define BITS 4
#define BUCKET 128

/* Any failed qc call ends the whole job: the other ranks would otherwise wait
 * in the next collective until the timeout. */
static void check_qc(qc_status_t status, const char* what, int rank) {
  if (status != QC_SUCCESS) {
    fprintf(stderr, "c_mpi_allreduce: rank %d: %s failed: %s: %s\n", rank, what,
            qc_status_string(status), qc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Rank r's gradient at step t, element i: a slow wave per rank, small in the
 * first half (a "bias-like" layer), large in the second. */
static float gradient(int r, int t, int i) {
  const double scale = i < COUNT / 2 ? 0.1 : 1.0;
  return (float)(scale * sin(0.001 * (i + 1) * (r + 1) + 0.3 * t) + 0.02 * (r - t));
}

int main(int argc, char** argv) {
  int rank = 0, nranks = 1, t, i, r, ok = 1, all_ok = 0;
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_policy_t policy = QC_POLICY_INIT;
  qc_comm_t comm = NULL;
  qc_error_buffer_t residuals = NULL;
  static float grad[COUNT], avg[COUNT], lo[COUNT], hi[COUNT];
  static double exact[COUNT], sum_out[COUNT], sum_exact[COUNT], tol[COUNT];
  static double step[COUNT], prev_step[COUNT]; /* code step s of this and the last step */
  double worst = 0.0, worst_sum = 0.0, norm = -1.0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  /* A qc communicator over MPI_COMM_WORLD (qc duplicates it). The timeout
   * bounds how long a collective waits for a peer that does not arrive. */
  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = (int64_t)MPI_Comm_c2f(MPI_COMM_WORLD);
  cfg.timeout_seconds = 60.0;
  check_qc(qc_comm_create(&cfg, &comm), "qc_comm_create", rank);

  policy.codec = QC_CODEC_MINMAX;
  policy.bits = BITS;
  policy.bucket_size = BUCKET;
  policy.error_feedback = 1;
  policy.algorithm = QC_ALGO_SRA;
  check_qc(qc_comm_set_layer_policy(comm, "grad", &policy), "qc_comm_set_layer_policy", rank);
  check_qc(qc_error_buffer_create(comm, COUNT, &residuals), "qc_error_buffer_create", rank);

  for (i = 0; i < COUNT; ++i) sum_out[i] = sum_exact[i] = prev_step[i] = 0.0;

  for (t = 0; t < STEPS; ++t) {
    for (i = 0; i < COUNT; ++i) grad[i] = gradient(rank, t, i);
    check_qc(qc_allreduce(comm, grad, avg, COUNT, QC_DTYPE_FLOAT32, QC_OP_AVG, "grad",
                          residuals, NULL),
             "qc_allreduce", rank);

    /* The exact average, in double from every rank's inputs. */
    for (i = 0; i < COUNT; ++i) {
      double s = 0.0;
      for (r = 0; r < nranks; ++r) s += gradient(r, t, i);
      exact[i] = s / nranks;
    }
    /* Bound: a bucket holding element i lies within i +- (BUCKET - 1), so the
     * widest range any rank has in that window bounds the code step
     * s = range / (2^BITS - 1) of that bucket. The output differs from the
     * exact average by what this step's encodes (worker and server) lose,
     * about s, plus what error feedback carried in from the previous step,
     * about that step's s. 1.25 times that leaves room for the residual
     * widening the range, and 1e-6 for float rounding. */
    for (i = 0; i < COUNT; ++i) {
      const int a = i - (BUCKET - 1) < 0 ? 0 : i - (BUCKET - 1);
      const int b = i + (BUCKET - 1) >= COUNT ? COUNT - 1 : i + (BUCKET - 1);
      double range = 0.0;
      int j;
      for (r = 0; r < nranks; ++r) {
        float mn = gradient(r, t, a), mx = mn;
        for (j = a; j <= b; ++j) {
          const float g = gradient(r, t, j);
          if (g < mn) mn = g;
          if (g > mx) mx = g;
        }
        if (mx - mn > range) range = mx - mn;
      }
      step[i] = range / ((1 << BITS) - 1);
      tol[i] = 1.25 * (step[i] + prev_step[i]) + 1e-6;
      prev_step[i] = step[i];
    }

    for (i = 0; i < COUNT; ++i) {
      const double err = fabs(avg[i] - exact[i]);
      sum_out[i] += avg[i];
      sum_exact[i] += exact[i];
      if (!(err <= tol[i])) {
        if (ok) fprintf(stderr, "c_mpi_allreduce: rank %d step %d: element %d is %.7g, exact average %.7g (bound %.3g)\n",
                        rank, t, i, avg[i], exact[i], tol[i]);
        ok = 0;
      }
      if (err / tol[i] > worst) worst = err / tol[i];
    }

    /* Replica consistency: the elementwise min and max over ranks agree. */
    MPI_Allreduce(avg, lo, COUNT, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(avg, hi, COUNT, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    for (i = 0; i < COUNT; ++i) {
      if (lo[i] != hi[i]) {
        if (ok) fprintf(stderr, "c_mpi_allreduce: rank %d step %d: ranks disagree on element %d\n", rank, t, i);
        ok = 0;
      }
    }
  }

  /* Error feedback: what one step drops, the next sends, so the running sum
   * of outputs differs from the exact running sum only by the residuals
   * still held after the last step: about one step's s, 1.25 s allowed. */
  for (i = 0; i < COUNT; ++i) {
    const double err = fabs(sum_out[i] - sum_exact[i]);
    tol[i] = 1.25 * step[i] + 1e-6;
    if (!(err <= tol[i])) {
      if (ok) fprintf(stderr, "c_mpi_allreduce: rank %d: element %d drifted: sum over steps %.7g, exact %.7g (bound %.3g)\n",
                      rank, i, sum_out[i], sum_exact[i], tol[i]);
      ok = 0;
    }
    if (err / tol[i] > worst_sum) worst_sum = err / tol[i];
  }

  check_qc(qc_error_buffer_norm(residuals, &norm), "qc_error_buffer_norm", rank);
  if (!(isfinite(norm) && norm > 0.0)) {
    fprintf(stderr, "c_mpi_allreduce: rank %d: residual norm %g is not finite and positive\n", rank, norm);
    ok = 0;
  }

  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("c_mpi_allreduce: %d ranks, %d steps, %d values, minmax %d bits + error feedback, SRA: "
           "worst error %.2f of the bound, running sum %.2f, residual norm %.4g\n",
           nranks, STEPS, COUNT, BITS, worst, worst_sum, norm);
    printf("c_mpi_allreduce: %s\n", all_ok ? "OK" : "FAILED");
  }

  qc_error_buffer_destroy(residuals);
  qc_comm_destroy(comm); /* before MPI_Finalize: it frees qc's MPI communicators */
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
