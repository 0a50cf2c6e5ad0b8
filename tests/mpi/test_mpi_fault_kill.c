/* A process killed by SIGKILL in the middle of a collective (issue 10, fault
 * injection over MPI), on every path a collective can take (issue 28). Run
 * under mpirun with 3 or more processes and OpenMPI's --enable-recovery
 * (tests/mpi/CMakeLists.txt).
 *
 * What happens with OpenMPI 4.1 (measured, see the report in
 * docs/reliability.md): without --enable-recovery, mpirun notices the dead
 * process and kills every other process of the job at once, so nobody gets
 * to return anything (the job ends with "mpirun noticed that process rank N
 * ... exited on signal 9"); there is nothing for qc to test there. With
 * --enable-recovery the job survives the death; the survivors' qc calls
 * must return (QC_ERROR_TIMEOUT, or QC_ERROR_TRANSPORT if MPI reports the
 * dead peer) within timeout + 1 s instead of hanging, and the communicator
 * must stay broken.
 *
 * Usage: test_mpi_fault_kill [MODE], MODE one of
 *   ring        (default) minmax 4-bit ring, qc's own messages: the victim
 *               enters the allreduce at once and a timer kills it 100 ms
 *               later, while it is blocked with its messages posted; the
 *               survivors enter 300 ms late.
 *   none        codec none: the transport's own float sum (agreement, then
 *               the sum). All ranks enter together; the victim dies as it
 *               enters the sum, after the agreement, so the survivors are
 *               inside the sum when it dies.
 *   small       minmax with the default min_compress_bytes (16 KiB) and a
 *               4000-byte message: sent uncompressed, as codec none; the
 *               victim dies as in `none`.
 *   late        codec none, and the victim is not killed: it stalls for
 *               timeout + 1.5 s as it enters the sum, then goes on. The
 *               survivors must time out, and what their abandoned sum does
 *               once the late rank joins must not touch their buffers
 *               (checked with a canary written after the call returned);
 *               the late rank must fail too.
 * The victim's death (or stall) comes from MPI_Allreduce/MPI_Iallreduce
 * wrappers below (MPI's profiling interface): armed on the victim, they act
 * at the first sum of the mode's datatype, which is how the test finds "the
 * sum after the agreement" whichever MPI call qc uses for it.
 *
 * The survivors check their statuses and times, agree on the verdict over
 * a communicator without the victim (made before the kill), rank 0 prints
 * "fault-kill: PASSED", and the survivors finalize MPI. ctest passes on
 * that line, not on the job's exit code (mpirun's, which depends on how it
 * treats the dead process). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "qc.h"

static int g_rank = 0;

static void die_now(int sig) {
  (void)sig;
  kill(getpid(), SIGKILL); /* async-signal-safe */
}

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

typedef enum { MODE_RING, MODE_NONE, MODE_SMALL, MODE_LATE } fault_mode_t;

static const char* const k_mode_names[] = {"ring", "none", "small", "late"};

/* Armed on the victim: what to do at the first MPI sum of one of these
 * datatypes (a stall of g_stall_ms, or death when it is 0). */
static int g_armed = 0;
static MPI_Datatype g_sum_types[2];
static long g_stall_ms = 0;

static void at_sum(MPI_Datatype type, MPI_Op op) {
  if (!g_armed || op != MPI_SUM || (type != g_sum_types[0] && type != g_sum_types[1])) return;
  g_armed = 0;
  if (g_stall_ms == 0) kill(getpid(), SIGKILL);
  sleep_ms(g_stall_ms);
}

int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  at_sum(type, op);
  return PMPI_Allreduce(send, recv, count, type, op, comm);
}

int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request) {
  at_sum(type, op);
  return PMPI_Iallreduce(send, recv, count, type, op, comm, request);
}

#define COUNT 4096
#define SMALL_COUNT 1000 /* 4000 bytes, below the default min_compress_bytes */
#define CANARY 12345.0f

static void set_policy(qc_comm_t comm, fault_mode_t mode) {
  qc_policy_t p = QC_POLICY_INIT;
  switch (mode) {
    case MODE_RING: /* compressed, qc's own messages */
      p.codec = QC_CODEC_MINMAX;
      p.bits = 4;
      p.algorithm = QC_ALGO_RING;
      p.min_compress_bytes = 0;
      break;
    case MODE_NONE:
    case MODE_LATE: /* codec none: the transport's float sum */
      p.codec = QC_CODEC_NONE;
      p.min_compress_bytes = 0;
      break;
    case MODE_SMALL: /* compressed policy, message under min_compress_bytes */
      p.codec = QC_CODEC_MINMAX;
      p.bits = 4;
      break;
  }
  if (qc_comm_set_layer_policy(comm, "*", &p) != QC_SUCCESS) {
    fprintf(stderr, "rank %d: FAILED qc_comm_set_layer_policy: %s\n", g_rank, qc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int main(int argc, char** argv) {
  const double timeout = 2.0;
  int size = 0, victim, ok = 1, all_ok = 0;
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  qc_comm_t comm = NULL;
  MPI_Comm survivors = MPI_COMM_NULL;
  static float x[COUNT], y[COUNT];
  fault_mode_t mode = MODE_RING;
  size_t count = COUNT;
  qc_status_t s;
  size_t i;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1) {
    int m, found = 0;
    for (m = 0; m < (int)(sizeof k_mode_names / sizeof k_mode_names[0]); ++m) {
      if (strcmp(argv[1], k_mode_names[m]) == 0) {
        mode = (fault_mode_t)m;
        found = 1;
      }
    }
    if (!found) {
      if (g_rank == 0) fprintf(stderr, "fault-kill: FAILED unknown mode '%s'\n", argv[1]);
      MPI_Finalize();
      return 1;
    }
  }
  if (mode == MODE_SMALL) count = SMALL_COUNT;
  if (size < 3) {
    if (g_rank == 0) fprintf(stderr, "fault-kill: needs at least 3 processes\n");
    MPI_Finalize();
    return 1;
  }
  victim = size - 1;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank == victim ? MPI_UNDEFINED : 0, g_rank, &survivors);

  cfg.transport = QC_TRANSPORT_MPI;
  cfg.mpi_comm = (int64_t)MPI_Comm_c2f(MPI_COMM_WORLD);
  cfg.timeout_seconds = timeout;
  if (qc_comm_create(&cfg, &comm) != QC_SUCCESS) {
    fprintf(stderr, "rank %d: FAILED qc_comm_create: %s\n", g_rank, qc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  set_policy(comm, mode);
  for (i = 0; i < COUNT; ++i) x[i] = (float)((i * 7 + (size_t)g_rank) % 13) - 6.0f;

  s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
  if (s != QC_SUCCESS) {
    fprintf(stderr, "rank %d: FAILED healthy allreduce: %s (%s)\n", g_rank, qc_status_string(s),
            qc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  if (g_rank == victim && mode == MODE_RING) {
    struct itimerval t;
    memset(&t, 0, sizeof t);
    t.it_value.tv_usec = 100000; /* 100 ms into the collective */
    signal(SIGALRM, die_now);
    setitimer(ITIMER_REAL, &t, NULL);
    s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
    /* Only if the kill came too late (it must not). */
    fprintf(stderr, "rank %d: FAILED the victim returned %s before its kill\n", g_rank,
            qc_status_string(s));
    for (;;) pause();
  }
  if (g_rank == victim) {
    g_sum_types[0] = MPI_FLOAT;
    g_sum_types[1] = MPI_FLOAT;
    g_stall_ms = mode == MODE_LATE ? (long)(timeout * 1000) + 1500 : 0;
    g_armed = 1;
    s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
    if (mode != MODE_LATE) {
      fprintf(stderr, "rank %d: FAILED the victim returned %s: it never reached the sum\n",
              g_rank, qc_status_string(s));
      for (;;) pause();
    }
    printf("fault-kill: late rank %d -> %s: %s\n", g_rank, qc_status_string(s), qc_last_error());
    if (s == QC_SUCCESS) {
      fprintf(stderr, "rank %d: FAILED the late rank's call succeeded though its peers gave up\n",
              g_rank);
    }
    fflush(stdout);
    fflush(stderr);
    MPI_Barrier(MPI_COMM_WORLD); /* after its call: the survivors' canary check */
    qc_comm_destroy(comm);
    MPI_Finalize();
    return s == QC_SUCCESS ? 1 : 0;
  }

  if (mode == MODE_RING) sleep_ms(300);
  {
    double t0 = MPI_Wtime(), waited;
    s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
    waited = MPI_Wtime() - t0;
    printf("fault-kill: %s: rank %d: peer %s -> %s after %.2f s (timeout %.1f s): %s\n",
           k_mode_names[mode], g_rank, mode == MODE_LATE ? "late" : "killed", qc_status_string(s),
           waited, timeout, qc_last_error());
    if (s != QC_ERROR_TIMEOUT && s != QC_ERROR_TRANSPORT) {
      fprintf(stderr, "rank %d: FAILED expected QC_ERROR_TIMEOUT or QC_ERROR_TRANSPORT\n", g_rank);
      ok = 0;
    }
    if (waited > timeout + 1.0) {
      fprintf(stderr, "rank %d: FAILED took %.2f s > timeout + 1 s\n", g_rank, waited);
      ok = 0;
    }
    if (mode == MODE_LATE) {
      /* The abandoned sum completes once the late rank joins; it must not
       * write into recvbuf, which is the caller's again. MPI progresses it
       * inside the barrier, which waits for the late rank's call to end. */
      for (i = 0; i < count; ++i) y[i] = CANARY;
      MPI_Barrier(MPI_COMM_WORLD);
      for (i = 0; i < 50; ++i) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        sleep_ms(10);
      }
      for (i = 0; i < count; ++i) {
        if (y[i] != CANARY) {
          fprintf(stderr, "rank %d: FAILED recvbuf[%zu] was written (%g) after the call returned\n",
                  g_rank, i, (double)y[i]);
          ok = 0;
          break;
        }
      }
    }
    {
      /* The communicator stays broken: the same status at once. */
      const qc_status_t first = s;
      t0 = MPI_Wtime();
      s = qc_allreduce(comm, x, y, count, QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, NULL, NULL);
      waited = MPI_Wtime() - t0;
      if (s != first || waited > 0.5 || strstr(qc_last_error(), "broken") == NULL) {
        fprintf(stderr, "rank %d: FAILED the broken communicator answered %s after %.2f s (%s)\n",
                g_rank, qc_status_string(s), waited, qc_last_error());
        ok = 0;
      }
    }
  }
  fflush(stdout);
  fflush(stderr);
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, survivors);
  if (g_rank == 0) {
    printf("fault-kill: %s (%s: %d survivors of %d processes)\n", all_ok ? "PASSED" : "FAILED",
           k_mode_names[mode], size - 1, size);
  }
  fflush(stdout);
  qc_comm_destroy(comm); /* a failed group's, with its abandoned operations */
  MPI_Comm_free(&survivors);
  if (mode != MODE_LATE) {
    /* With --enable-recovery, MPI_Finalize after a peer's death often
     * returns at once (0.06 s, OpenMPI 4.1.4) but about one run in three
     * it waits in ompi_mpi_finalize for the dead process until mpirun is
     * killed (gdb: usleep in its fence loop; with or without qc's leftover
     * operations). The verdict is out, so the survivors leave without it. */
    fflush(stderr);
    _exit(all_ok ? 0 : 1);
  }
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
