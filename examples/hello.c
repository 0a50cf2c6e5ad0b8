/*
 * hello.c - the smallest complete qc program.
 *
 * Four ranks of an in-process group (the local transport: ranks are threads
 * of this process) each allreduce a vector of floats. Every rank must end
 * with the exact sum, and all ranks with the same bits.
 *
 * Build against an installed qc:
 *   cc -std=c99 hello.c $(pkg-config --cflags --libs qc) -pthread -o hello
 * or in CMake: find_package(qc 1.0 CONFIG REQUIRED) and link qc::qc.
 *
 * Every qc call returns a qc_status_t; on failure qc_last_error() holds a
 * message for the calling thread, so it is printed by the thread that failed.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qc.h>

#define NRANKS 4
#define COUNT 1024

typedef struct rank_job {
  qc_comm_t comm;
  int rank;
  float data[COUNT];   /* input, then (in place) the reduced result */
  qc_status_t status;  /* QC_SUCCESS, or the first failure of this rank */
  int wrong;           /* elements that differ from the expected sum */
} rank_job_t;

/* Print a failed call with the status name and this thread's last error. */
static int check(qc_status_t status, const char* what, int rank) {
  if (status != QC_SUCCESS) {
    fprintf(stderr, "hello: rank %d: %s failed: %s: %s\n", rank, what,
            qc_status_string(status), qc_last_error());
    return 0;
  }
  return 1;
}

/* Small integers, so the float sum is exact in any order of addition. */
static float input_value(int rank, int i) { return (float)((rank + 1) * (i % 16 + 1)); }
static float expected_sum(int i) {
  return (float)((NRANKS * (NRANKS + 1) / 2) * (i % 16 + 1));
}

static void* run_rank(void* arg) {
  rank_job_t* job = (rank_job_t*)arg;
  int rank = -1, size = -1, i;

  job->status = qc_comm_rank(job->comm, &rank);
  if (!check(job->status, "qc_comm_rank", job->rank)) return NULL;
  job->status = qc_comm_size(job->comm, &size);
  if (!check(job->status, "qc_comm_size", job->rank)) return NULL;
  if (rank != job->rank || size != NRANKS) {
    fprintf(stderr, "hello: communicator %d reports rank %d of %d\n", job->rank, rank, size);
    job->status = QC_ERROR_INTERNAL;
    return NULL;
  }

  for (i = 0; i < COUNT; ++i) job->data[i] = input_value(rank, i);

  /* In place; layer NULL uses the "*" policy (codec none); no error
     feedback buffer; stream NULL means host memory. */
  job->status = qc_allreduce(job->comm, job->data, job->data, COUNT, QC_DTYPE_FLOAT32,
                             QC_OP_SUM, NULL, NULL, NULL);
  if (!check(job->status, "qc_allreduce", rank)) return NULL;

  for (i = 0; i < COUNT; ++i)
    if (job->data[i] != expected_sum(i)) ++job->wrong;
  return NULL;
}

int main(void) {
  static rank_job_t jobs[NRANKS];
  qc_comm_t comms[NRANKS];
  pthread_t threads[NRANKS];
  int r, failed = 0;

  printf("hello: qc %s (header %d.%d.%d), %d ranks on the local transport\n",
         qc_version_string(), QC_VERSION_MAJOR, QC_VERSION_MINOR, QC_VERSION_PATCH, NRANKS);

  if (!check(qc_comm_create_local(NRANKS, comms), "qc_comm_create_local", -1)) return 1;

  for (r = 0; r < NRANKS; ++r) {
    jobs[r].comm = comms[r];
    jobs[r].rank = r;
    jobs[r].status = QC_ERROR_INTERNAL;
    jobs[r].wrong = 0;
    if (pthread_create(&threads[r], NULL, run_rank, &jobs[r]) != 0) {
      /* Ranks already started would wait for this one until the timeout;
         destroying its communicator makes them fail at once instead. */
      fprintf(stderr, "hello: pthread_create failed for rank %d\n", r);
      for (; r < NRANKS; ++r) qc_comm_destroy(comms[r]);
      return 1;
    }
  }
  for (r = 0; r < NRANKS; ++r) pthread_join(threads[r], NULL);

  for (r = 0; r < NRANKS; ++r) {
    if (jobs[r].status != QC_SUCCESS) {
      failed = 1; /* the message was printed by the rank's thread */
    } else if (jobs[r].wrong != 0) {
      fprintf(stderr, "hello: rank %d: %d of %d elements differ from the exact sum\n", r,
              jobs[r].wrong, COUNT);
      failed = 1;
    } else if (jobs[0].status == QC_SUCCESS &&
               memcmp(jobs[r].data, jobs[0].data, sizeof jobs[0].data) != 0) {
      fprintf(stderr, "hello: rank %d's result is not bit-identical to rank 0's\n", r);
      failed = 1;
    }
  }

  for (r = 0; r < NRANKS; ++r)
    if (!check(qc_comm_destroy(comms[r]), "qc_comm_destroy", r)) failed = 1;

  if (failed) {
    fprintf(stderr, "hello: FAILED\n");
    return 1;
  }
  printf("hello: allreduce of %d floats over %d ranks: result[0..3] = %g %g %g %g (exact)\n",
         COUNT, NRANKS, jobs[0].data[0], jobs[0].data[1], jobs[0].data[2], jobs[0].data[3]);
  printf("hello: OK\n");
  return 0;
}
