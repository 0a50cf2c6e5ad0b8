/* qc_comm_destroy on another thread while a collective is blocked on the
 * communicator (issue 28, item 2), over MPI. Run under mpirun with 2 or more
 * processes.
 *
 * Rank 0 calls qc_allreduce on a thread; its peers do not call. After 1 s
 * rank 0's main thread destroys the communicator: the blocked call must end
 * with QC_ERROR_TRANSPORT ("destroyed"), and the destroy must return only
 * after it (the thread is joined after the destroy returned, then checked).
 * The destroying thread makes no MPI call while the other runs: MPI's
 * transport only records the reason there, and the blocked call tells the
 * peers. Then every rank meets in MPI_Barrier and the peers make the call:
 * they must fail at once with rank 0's notice (QC_ERROR_TRANSPORT), not wait
 * for the 30 s timeout. Twice: a compressed allreduce (qc's messages) and an
 * uncompressed one (the agreement and MPI_Iallreduce). Rank 0 prints
 * "destroy-blocked: PASSED" when every rank saw what it should. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qc.h"

#define COUNT 65536

typedef struct {
  qc_comm_t comm;
  float* x;
  float* y;
  qc_status_t status;
  char message[512];
} blocked_call_t;

static void* call_allreduce(void* arg) {
  blocked_call_t* call = (blocked_call_t*)arg;
  call->status = qc_allreduce(call->comm, call->x, call->y, COUNT, QC_DTYPE_FLOAT32, QC_OP_SUM,
                              NULL, NULL, NULL);
  snprintf(call->message, sizeof call->message, "%s", qc_last_error());
  return NULL;
}

/* One case on a fresh communicator; 1 if this rank saw what it should. */
static int run_case(int rank, qc_codec_t codec, float* x, float* y) {
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_policy_t policy = QC_POLICY_INIT;
  qc_comm_t comm = NULL;
  const char* name = codec == QC_CODEC_NONE ? "uncompressed" : "compressed";
  int ok = 1;
  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = (int64_t)MPI_Comm_c2f(MPI_COMM_WORLD);
  cfg.timeout_seconds = 30.0;
  if (qc_comm_create(&cfg, &comm) != QC_SUCCESS) {
    printf("rank %d %s: FAILED qc_comm_create: %s\n", rank, name, qc_last_error());
    return 0;
  }
  policy.codec = codec;
  policy.min_compress_bytes = 0;
  if (qc_comm_set_layer_policy(comm, "*", &policy) != QC_SUCCESS) {
    printf("rank %d %s: FAILED qc_comm_set_layer_policy: %s\n", rank, name, qc_last_error());
    return 0;
  }
  if (rank == 0) {
    blocked_call_t call = {comm, x, y, QC_ERROR_INTERNAL, ""};
    pthread_t thread;
    qc_status_t destroyed;
    pthread_create(&thread, NULL, call_allreduce, &call);
    sleep(1); /* the call is blocked by then: no peer has called */
    destroyed = qc_comm_destroy(comm);
    pthread_join(thread, NULL);
    if (destroyed != QC_SUCCESS) {
      printf("rank 0 %s: FAILED qc_comm_destroy returned %s: %s\n", name,
             qc_status_string(destroyed), qc_last_error());
      ok = 0;
    }
    if (call.status != QC_ERROR_TRANSPORT || strstr(call.message, "destroyed") == NULL) {
      printf("rank 0 %s: FAILED the blocked call returned %s (%s), expected QC_ERROR_TRANSPORT "
             "naming the destroy\n", name, qc_status_string(call.status), call.message);
      ok = 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    qc_status_t s;
    double t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    s = qc_allreduce(comm, x, y, COUNT, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
    if (s != QC_ERROR_TRANSPORT || strstr(qc_last_error(), "destroyed") == NULL) {
      printf("rank %d %s: FAILED returned %s after %.2f s (%s), expected rank 0's notice "
             "(QC_ERROR_TRANSPORT, destroyed)\n", rank, name, qc_status_string(s),
             MPI_Wtime() - t0, qc_last_error());
      ok = 0;
    }
    qc_comm_destroy(comm);
  }
  return ok;
}

int main(int argc, char** argv) {
  int provided = 0, rank = 0, size = 1, ok = 1, all_ok = 0;
  static float x[COUNT], y[COUNT];
  int i;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_SERIALIZED) {
    if (rank == 0) printf("destroy-blocked: FAILED MPI gives no MPI_THREAD_SERIALIZED\n");
    MPI_Finalize();
    return 1;
  }
  for (i = 0; i < COUNT; ++i) x[i] = (float)(i % 13) - 6.0f;
  ok &= run_case(rank, QC_CODEC_MINMAX, x, y);
  ok &= run_case(rank, QC_CODEC_NONE, x, y);
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) printf("destroy-blocked: %s on %d ranks\n", all_ok ? "PASSED" : "FAILED", size);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
