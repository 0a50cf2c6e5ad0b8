/*
 * c_error_buffer_checkpoint.c - checkpoint and restore error-feedback state.
 *
 * With error feedback, each rank keeps what quantization lost (its residuals,
 * a qc_error_buffer_t) and adds it to the next call's input. Those residuals
 * are training state like the optimizer's moments: a job restarted from a
 * checkpoint without them takes a different path. This example shows that
 * qc_error_buffer_save / qc_error_buffer_load carry that state exactly:
 *
 *   run A: a local group of 3 ranks (one thread each) averages a 2-bit
 *          minmax gradient with error feedback for WARMUP steps, saves each
 *          rank's residuals to a byte buffer (the "checkpoint"), then keeps
 *          going for RESUMED more steps;
 *   run B: a new group and new error buffers (as after a restart) load the
 *          checkpoint and run the same RESUMED steps;
 *   run C: as run B without loading the checkpoint, to show that it matters.
 *
 * With nearest rounding the steps are deterministic, so run B's outputs and
 * final residuals must be bit-identical to run A's; the program checks that
 * and exits non-zero otherwise. (Stochastic rounding draws its random bits
 * from the group, which a checkpoint of the residuals does not hold.)
 *
 * Build against an installed qc:
 *   cc -std=c99 c_error_buffer_checkpoint.c $(pkg-config --cflags --libs qc) -pthread -lm \
 *      -o c_error_buffer_checkpoint
 * In this tree: target qc_example_c_error_buffer_checkpoint,
 *   ctest -R example_c_error_buffer_checkpoint.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qc.h>

#define NRANKS 3
#define COUNT 8192 /* 32 KiB: above the default min_compress_bytes, so compressed */
#define WARMUP 4
#define RESUMED 5
#define LAYER "fc.weight"

enum {
  RUN_A,    /* warm up, save the checkpoint, go on */
  RUN_B,    /* restart: load the checkpoint, go on */
  RUN_FRESH /* restart without the checkpoint, for contrast */
};

typedef struct rank_job {
  qc_comm_t comm;
  int rank;
  int mode;             /* RUN_A, RUN_B or RUN_FRESH */
  unsigned char* image; /* run A writes the checkpoint (malloc), run B reads it */
  size_t image_size;
  double norm_at_save;  /* run A: residual norm in the checkpoint */
  double final_norm;    /* residual norm after the last step */
  unsigned char* final_residuals; /* saved after the last step, to compare bits */
  size_t final_size;
  float out[RESUMED][COUNT]; /* outputs of the resumed steps */
  int ok;
} rank_job_t;

static int check(qc_status_t status, const char* what, int rank) {
  if (status != QC_SUCCESS) {
    fprintf(stderr, "c_error_buffer_checkpoint: rank %d: %s failed: %s: %s\n", rank, what,
            qc_status_string(status), qc_last_error());
    return 0;
  }
  return 1;
}

/* Rank r's gradient at step t: a formula, so run B can replay run A's inputs. */
static float gradient(int r, int t, int i) {
  return (float)(sin(0.003 * (i + 1) * (r + 1) + 0.7 * t) + 0.05 * (r - t));
}

/* Every rank sets the same policy: error feedback and nearest rounding (the
 * latter is what makes a resumed run reproducible bit for bit). */
static int set_policy(qc_comm_t comm, int rank) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  p.bits = 2; /* coarse on purpose: large residuals make the point visible */
  p.bucket_size = 128;
  p.rounding = QC_ROUND_NEAREST_EVEN;
  p.error_feedback = 1;
  return check(qc_comm_set_layer_policy(comm, "*", &p), "qc_comm_set_layer_policy", rank);
}

static int step(rank_job_t* job, qc_error_buffer_t eb, int t, float* out) {
  int i;
  for (i = 0; i < COUNT; ++i) out[i] = gradient(job->rank, t, i);
  return check(qc_allreduce(job->comm, out, out, COUNT, QC_DTYPE_FLOAT32, QC_OP_AVG, LAYER, eb,
                            NULL),
               "qc_allreduce", job->rank);
}

/* Serialise eb into a new malloc'd buffer: ask for the size, then save. */
static int save(qc_error_buffer_t eb, unsigned char** image, size_t* size, int rank) {
  if (!check(qc_error_buffer_save(eb, NULL, 0, size), "qc_error_buffer_save(size)", rank))
    return 0;
  *image = (unsigned char*)malloc(*size);
  if (*image == NULL) {
    fprintf(stderr, "c_error_buffer_checkpoint: rank %d: out of memory\n", rank);
    return 0;
  }
  return check(qc_error_buffer_save(eb, *image, *size, size), "qc_error_buffer_save", rank);
}

static void* run_rank(void* arg) {
  rank_job_t* job = (rank_job_t*)arg;
  qc_error_buffer_t eb = NULL;
  int t, ok = 0;

  job->ok = 0;
  if (!set_policy(job->comm, job->rank) ||
      !check(qc_error_buffer_create(job->comm, COUNT, &eb), "qc_error_buffer_create",
             job->rank))
    goto done;

  if (job->mode == RUN_A) {
    /* Warm-up outputs are not compared: out[0] is scratch until then. */
    for (t = 0; t < WARMUP; ++t)
      if (!step(job, eb, t, job->out[0])) goto done;
    if (!save(eb, &job->image, &job->image_size, job->rank) ||
        !check(qc_error_buffer_norm(eb, &job->norm_at_save), "qc_error_buffer_norm",
               job->rank))
      goto done;
  } else if (job->mode == RUN_B &&
             !check(qc_error_buffer_load(eb, job->image, job->image_size),
                    "qc_error_buffer_load", job->rank)) {
    goto done;
  }

  /* Every run: the same steps, from the state the run has now. */
  for (t = 0; t < RESUMED; ++t)
    if (!step(job, eb, WARMUP + t, job->out[t])) goto done;
  if (!check(qc_error_buffer_norm(eb, &job->final_norm), "qc_error_buffer_norm", job->rank) ||
      !save(eb, &job->final_residuals, &job->final_size, job->rank))
    goto done;
  ok = 1;

done:
  if (!check(qc_error_buffer_destroy(eb), "qc_error_buffer_destroy", job->rank)) ok = 0;
  job->ok = ok;
  return NULL;
}

/* One run: a fresh local group, one thread per rank, then the group is
 * destroyed (as a job that ends or crashes would lose it). */
static int run_group(rank_job_t* jobs, int mode) {
  qc_comm_t comms[NRANKS];
  pthread_t threads[NRANKS];
  int r, started, ok = 1;

  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;

  /* A rank that fails before a collective leaves its peers waiting; a short
     timeout makes them give up well within the test's 60 s. */
  cfg.timeout_seconds = 20.0;
  if (!check(qc_comm_create_local_with_config(NRANKS, &cfg, comms),
             "qc_comm_create_local_with_config", -1))
    return 0;
  for (started = 0; started < NRANKS; ++started) {
    jobs[started].comm = comms[started];
    jobs[started].rank = started;
    jobs[started].mode = mode;
    if (pthread_create(&threads[started], NULL, run_rank, &jobs[started]) != 0) {
      fprintf(stderr, "c_error_buffer_checkpoint: pthread_create failed for rank %d\n",
              started);
      /* Peers waiting for the missing ranks then fail now, not at the timeout. */
      for (r = started; r < NRANKS; ++r) qc_comm_destroy(comms[r]);
      ok = 0;
      break;
    }
  }
  for (r = 0; r < started; ++r) {
    pthread_join(threads[r], NULL);
    if (!jobs[r].ok) ok = 0; /* the rank printed why */
  }
  for (r = 0; r < started; ++r)
    if (!check(qc_comm_destroy(comms[r]), "qc_comm_destroy", r)) ok = 0;
  return ok;
}

int main(void) {
  /* Large (outputs of every resumed step): static, not on the stack. */
  static rank_job_t a[NRANKS], b[NRANKS], fresh[NRANKS];
  int r, t, failed = 0;

  if (!run_group(a, RUN_A)) {
    failed = 1;
  } else {
    for (r = 0; r < NRANKS; ++r) {
      /* Without residuals there would be nothing to checkpoint. */
      if (!(a[r].norm_at_save > 0.0) || !isfinite(a[r].norm_at_save)) {
        fprintf(stderr, "c_error_buffer_checkpoint: rank %d: residual norm %g at the save\n",
                r, a[r].norm_at_save);
        failed = 1;
      }
      /* Hand the checkpoint to the restarted rank (in a real job: a file). */
      b[r].image = a[r].image;
      b[r].image_size = a[r].image_size;
    }
    printf("c_error_buffer_checkpoint: after %d steps, rank 0 saved %zu bytes, "
           "residual norm %.6f\n",
           WARMUP, a[0].image_size, a[0].norm_at_save);
  }

  if (!failed && !run_group(b, RUN_B)) failed = 1;
  if (!failed && !run_group(fresh, RUN_FRESH)) failed = 1;

  if (!failed) {
    for (r = 0; r < NRANKS; ++r) {
      for (t = 0; t < RESUMED; ++t)
        if (memcmp(a[r].out[t], b[r].out[t], sizeof a[r].out[t]) != 0) {
          fprintf(stderr,
                  "c_error_buffer_checkpoint: rank %d: step %d of the resumed run differs "
                  "from the run that kept going\n",
                  r, WARMUP + t);
          failed = 1;
        }
      if (a[r].final_size != b[r].final_size ||
          memcmp(a[r].final_residuals, b[r].final_residuals, a[r].final_size) != 0 ||
          a[r].final_norm != b[r].final_norm) {
        fprintf(stderr, "c_error_buffer_checkpoint: rank %d: final residuals differ\n", r);
        failed = 1;
      }
    }
    /* The contrast: zero residuals give another first resumed step, so the
       checkpoint is what made run B match. */
    if (memcmp(a[0].out[0], fresh[0].out[0], sizeof a[0].out[0]) == 0) {
      fprintf(stderr, "c_error_buffer_checkpoint: a restart without the checkpoint gave "
                      "the same result: the test shows nothing\n");
      failed = 1;
    }
    printf("c_error_buffer_checkpoint: after %d more steps, residual norm of rank 0: "
           "kept going %.6f, resumed from the checkpoint %.6f, restarted without it %.6f\n",
           RESUMED, a[0].final_norm, b[0].final_norm, fresh[0].final_norm);
  }

  for (r = 0; r < NRANKS; ++r) {
    free(a[r].image); /* b[r].image is the same buffer */
    free(a[r].final_residuals);
    free(b[r].final_residuals);
    free(fresh[r].final_residuals);
  }

  if (failed) {
    fprintf(stderr, "c_error_buffer_checkpoint: FAILED\n");
    return 1;
  }
  printf("c_error_buffer_checkpoint: %d resumed steps bit-identical on all %d ranks: OK\n",
         RESUMED, NRANKS);
  return 0;
}
