/*
 * c_layer_policies.c - choose per layer what an allreduce sends.
 *
 * A model's layers do not all deserve the same compression: biases and
 * normalisations are small and sensitive, the big weight matrices are where
 * bandwidth goes. This example runs a local group of 3 ranks (one thread
 * each) and shows:
 *   - qc_comm_set_layer_policy with globs ("*" minmax 4-bit, "*bias*" full
 *     precision) and an exact name ("head.weight" at 8 bits), and
 *     qc_comm_get_layer_policy telling which policy a layer name resolves to;
 *   - allreduce of a bias layer (exact sum, bit for bit) and of two weight
 *     layers (quantized: within a bound of the exact sum; fewer bits, larger
 *     error);
 *   - qc_comm_get_layer_stats: logical and wire bytes per layer, i.e. where
 *     compression pays;
 *   - qc_comm_apply_preset(comm, "cgx", &base), the one-call alternative to the
 *     globs above (biases and norms in full precision, the rest as base).
 * It exits non-zero if any check fails on any rank.
 *
 * Build against an installed qc:
 *   cc -std=c99 c_layer_policies.c $(pkg-config --cflags --libs qc) -pthread -lm \
 *      -o c_layer_policies
 * In this tree: target qc_example_c_layer_policies, ctest -R example_c_layer_policies.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <qc.h>

#define NRANKS 3
#define BIAS_COUNT 512
#define WEIGHT_COUNT 8192 /* 32 KiB of float32: above min_compress_bytes (16 KiB) */
#define BUCKET 128

/* The layers of our pretend model, and the policy each should resolve to. */
enum { L_BIAS, L_WEIGHT, L_HEAD, NLAYERS };
static const char* const layer_name[NLAYERS] = {"fc.bias", "fc.weight", "head.weight"};
static const size_t layer_count[NLAYERS] = {BIAS_COUNT, WEIGHT_COUNT, WEIGHT_COUNT};

typedef struct rank_job {
  qc_comm_t comm;
  int rank;
  float bias[BIAS_COUNT];
  float weight[WEIGHT_COUNT];
  float head[WEIGHT_COUNT];
  qc_layer_stats_t stats[NLAYERS];
  int ok; /* 1 when every call and check of this rank passed */
} rank_job_t;

static int check(qc_status_t status, const char* what, int rank) {
  if (status != QC_SUCCESS) {
    fprintf(stderr, "c_layer_policies: rank %d: %s failed: %s: %s\n", rank, what,
            qc_status_string(status), qc_last_error());
    return 0;
  }
  return 1;
}

/* Inputs are a formula of (rank, element), so every rank can compute the
 * exact sum without communicating. Bias values are multiples of 1/4 and
 * small: their float sum is exact in any order, hence the == check below. */
static float bias_input(int r, int i) { return 0.25f * (float)((r + 1) * (i % 8) - 3); }
static float weight_input(int r, int i) {
  return (float)sin(0.01 * (i + 1) * (r + 1) + 0.5 * r);
}

static const char* codec_name(qc_codec_t c) {
  switch (c) {
    case QC_CODEC_NONE: return "none";
    case QC_CODEC_MINMAX: return "minmax";
    default: return "other";
  }
}

/* Compare a quantized layer with its exact sum. The bound is generous on
 * purpose: minmax with b bits has a step of (bucket range)/(2^b - 1), each
 * encode errs by at most half a step, and a value is encoded a few times on
 * its way through the algorithm. Sums of 3 values in [-1, 1] span at most 6. */
static int check_weight(const float* got, int bits, int rank, const char* name,
                        double* max_err) {
  const double bound = NRANKS * 0.5 * (2.0 * NRANKS) / ((1 << bits) - 1);
  int i, r;
  *max_err = 0.0;
  for (i = 0; i < WEIGHT_COUNT; ++i) {
    double exact = 0.0, err;
    for (r = 0; r < NRANKS; ++r) exact += weight_input(r, i);
    err = fabs((double)got[i] - exact);
    if (err > *max_err) *max_err = err;
  }
  if (*max_err > bound) {
    fprintf(stderr, "c_layer_policies: rank %d: %s error %g exceeds the bound %g\n", rank,
            name, *max_err, bound);
    return 0;
  }
  return 1;
}

/* The same calls on every rank: policies are local settings, and a rank
 * that resolved a different policy would make the collective fail with
 * QC_ERROR_MISMATCH. */
static int set_policies(qc_comm_t comm, int rank) {
  qc_policy_t q4 = QC_POLICY_INIT, q8;
  const qc_policy_t full = QC_POLICY_INIT; /* the defaults are codec none */
  q4.codec = QC_CODEC_MINMAX;
  q4.bits = 4;
  q4.bucket_size = BUCKET;
  q8 = q4;
  q8.bits = 8; /* the output layer is more sensitive: spend more bits there */
  return check(qc_comm_set_layer_policy(comm, "*", &q4), "qc_comm_set_layer_policy(*)", rank) &&
         check(qc_comm_set_layer_policy(comm, "*bias*", &full), "qc_comm_set_layer_policy(*bias*)",
               rank) &&
         check(qc_comm_set_layer_policy(comm, "head.weight", &q8),
               "qc_comm_set_layer_policy(head.weight)", rank);
}

static void* run_rank(void* arg) {
  rank_job_t* job = (rank_job_t*)arg;
  const int rank = job->rank;
  double err4 = 0.0, err8 = 0.0;
  int i, l;

  job->ok = 0;
  if (!set_policies(job->comm, rank)) return NULL;

  for (i = 0; i < BIAS_COUNT; ++i) job->bias[i] = bias_input(rank, i);
  for (i = 0; i < WEIGHT_COUNT; ++i) job->weight[i] = job->head[i] = weight_input(rank, i);

  /* The layer name is what selects the policy; no other argument changes. */
  if (!check(qc_allreduce(job->comm, job->bias, job->bias, BIAS_COUNT, QC_DTYPE_FLOAT32,
                          QC_OP_SUM, layer_name[L_BIAS], NULL, NULL),
             "qc_allreduce(fc.bias)", rank) ||
      !check(qc_allreduce(job->comm, job->weight, job->weight, WEIGHT_COUNT, QC_DTYPE_FLOAT32,
                          QC_OP_SUM, layer_name[L_WEIGHT], NULL, NULL),
             "qc_allreduce(fc.weight)", rank) ||
      !check(qc_allreduce(job->comm, job->head, job->head, WEIGHT_COUNT, QC_DTYPE_FLOAT32,
                          QC_OP_SUM, layer_name[L_HEAD], NULL, NULL),
             "qc_allreduce(head.weight)", rank))
    return NULL;

  for (i = 0; i < BIAS_COUNT; ++i) {
    float exact = 0.0f;
    int r;
    for (r = 0; r < NRANKS; ++r) exact += bias_input(r, i);
    if (job->bias[i] != exact) {
      fprintf(stderr, "c_layer_policies: rank %d: fc.bias[%d] = %g, expected exactly %g\n",
              rank, i, job->bias[i], exact);
      return NULL;
    }
  }
  if (!check_weight(job->weight, 4, rank, "fc.weight", &err4) ||
      !check_weight(job->head, 8, rank, "head.weight", &err8))
    return NULL;
  if (!(err8 < err4)) {
    fprintf(stderr, "c_layer_policies: rank %d: 8 bits (error %g) not better than 4 (%g)\n",
            rank, err8, err4);
    return NULL;
  }

  for (l = 0; l < NLAYERS; ++l) {
    job->stats[l].struct_size = sizeof(qc_layer_stats_t);
    if (!check(qc_comm_get_layer_stats(job->comm, layer_name[l], &job->stats[l]),
               "qc_comm_get_layer_stats", rank))
      return NULL;
  }
  if (rank == 0)
    printf("c_layer_policies: max |error| vs exact sum: fc.weight (4 bits) %.4f, "
           "head.weight (8 bits) %.5f, fc.bias 0\n",
           err4, err8);
  job->ok = 1;
  return NULL;
}

/* Print and check which policy each name resolves to on one communicator. */
static int show_resolution(qc_comm_t comm, const char* const* names, const qc_codec_t* codec,
                           const int* bits, int n) {
  int i, ok = 1;
  for (i = 0; i < n; ++i) {
    qc_policy_t p = QC_POLICY_INIT; /* sets struct_size; the rest is overwritten */
    if (!check(qc_comm_get_layer_policy(comm, names[i], &p), "qc_comm_get_layer_policy", 0)) return 0;
    if (p.codec == QC_CODEC_NONE) /* bits is ignored (but kept) by codec none */
      printf("  %-28s -> codec none (full precision)\n", names[i]);
    else
      printf("  %-28s -> codec %s, %d bits, buckets of %d\n", names[i], codec_name(p.codec),
             p.bits, p.bucket_size);
    if (p.codec != codec[i] || (codec[i] != QC_CODEC_NONE && p.bits != bits[i])) {
      fprintf(stderr, "c_layer_policies: %s resolved to an unexpected policy\n", names[i]);
      ok = 0;
    }
  }
  return ok;
}

int main(void) {
  static rank_job_t jobs[NRANKS];
  qc_comm_t comms[NRANKS];
  pthread_t threads[NRANKS];
  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  int r, l, failed = 0;

  /* A rank that fails before a collective leaves its peers waiting; a short
     timeout makes them give up well within the test's 60 s. */
  cfg.timeout_seconds = 20.0;
  if (!check(qc_comm_create_local_with_config(NRANKS, &cfg, comms),
             "qc_comm_create_local_with_config", -1))
    return 1;

  for (r = 0; r < NRANKS; ++r) {
    jobs[r].comm = comms[r];
    jobs[r].rank = r;
    jobs[r].ok = 0;
    if (pthread_create(&threads[r], NULL, run_rank, &jobs[r]) != 0) {
      /* Destroying the rest makes the started ranks fail now, not at the
         timeout; then they are joined as usual. */
      int s;
      fprintf(stderr, "c_layer_policies: pthread_create failed for rank %d\n", r);
      for (s = r; s < NRANKS; ++s) qc_comm_destroy(comms[s]);
      for (s = 0; s < r; ++s) pthread_join(threads[s], NULL);
      for (s = 0; s < r; ++s) qc_comm_destroy(comms[s]);
      return 1;
    }
  }
  for (r = 0; r < NRANKS; ++r) pthread_join(threads[r], NULL);
  /* From here on main is the only thread using the communicators. */

  for (r = 0; r < NRANKS; ++r) {
    if (!jobs[r].ok) failed = 1; /* the rank printed why */
    else if (memcmp(jobs[r].weight, jobs[0].weight, sizeof jobs[0].weight) != 0 ||
             memcmp(jobs[r].head, jobs[0].head, sizeof jobs[0].head) != 0) {
      fprintf(stderr, "c_layer_policies: rank %d's result differs from rank 0's\n", r);
      failed = 1;
    }
  }

  if (!failed) {
    static const char* const names[] = {"fc.bias", "fc.weight", "head.weight", "head.bias",
                                        "encoder.layer_norm.weight"};
    static const qc_codec_t codec[] = {QC_CODEC_NONE, QC_CODEC_MINMAX, QC_CODEC_MINMAX,
                                       QC_CODEC_NONE, QC_CODEC_MINMAX};
    static const int bits[] = {0, 4, 8, 0, 4};
    const qc_layer_stats_t* s = jobs[0].stats;

    /* "encoder.layer_norm.weight" matches only "*" here and is compressed:
       our globs cover biases alone. The preset below covers norms too. */
    printf("c_layer_policies: our globs and exact name resolve to (rank 0):\n");
    if (!show_resolution(comms[0], names, codec, bits, 5)) failed = 1;

    /* Wire bytes include message headers and every step of the algorithm,
       so even full precision costs more than 32 bits a value. */
    printf("c_layer_policies: per-layer traffic of rank 0:\n");
    for (l = 0; l < NLAYERS; ++l)
      printf("  %-12s %6zu floats  logical %7llu B  wire %7llu B  (%.2f bits/value)\n",
             layer_name[l], layer_count[l], (unsigned long long)s[l].logical_bytes,
             (unsigned long long)s[l].wire_bytes,
             8.0 * (double)s[l].wire_bytes / (double)layer_count[l]);
    /* Per value, the full-precision bias must cost the most and 4 bits the
       least: that is the point of per-layer policies. */
    for (l = 0; l < NLAYERS; ++l)
      if (s[l].calls != 1 || s[l].logical_bytes != layer_count[l] * sizeof(float)) failed = 1;
    if (!(s[L_WEIGHT].wire_bytes < s[L_HEAD].wire_bytes &&
          (double)s[L_HEAD].wire_bytes / WEIGHT_COUNT <
              (double)s[L_BIAS].wire_bytes / BIAS_COUNT)) {
      fprintf(stderr, "c_layer_policies: wire bytes do not follow the policies\n");
      failed = 1;
    }
  }

  if (!failed) {
    /* The alternative: the "cgx" preset sets "*" to base and biases and
       normalisations ("*bias*", "*norm*", "*Norm*", "bn*", ...) to full
       precision in one call. Exact names set before ("head.weight") are
       kept and still win. Every rank makes the same call. */
    static const char* const names[] = {"fc.bias", "fc.weight", "head.weight",
                                        "encoder.layer_norm.weight", "bn1.weight"};
    static const qc_codec_t codec[] = {QC_CODEC_NONE, QC_CODEC_MINMAX, QC_CODEC_MINMAX,
                                       QC_CODEC_NONE, QC_CODEC_NONE};
    static const int bits[] = {0, 2, 8, 0, 0};
    qc_policy_t base = QC_POLICY_INIT;
    base.codec = QC_CODEC_MINMAX;
    base.bits = 2;
    base.bucket_size = BUCKET;
    for (r = 0; r < NRANKS; ++r)
      if (!check(qc_comm_apply_preset(comms[r], "cgx", &base), "qc_comm_apply_preset(cgx)", r))
        failed = 1;
    if (!failed) {
      printf("c_layer_policies: after qc_comm_apply_preset(\"cgx\", minmax 2-bit base):\n");
      if (!show_resolution(comms[0], names, codec, bits, 5)) failed = 1;
    }
  }

  for (r = 0; r < NRANKS; ++r)
    if (!check(qc_comm_destroy(comms[r]), "qc_comm_destroy", r)) failed = 1;

  if (failed) {
    fprintf(stderr, "c_layer_policies: FAILED\n");
    return 1;
  }
  printf("c_layer_policies: OK\n");
  return 0;
}
