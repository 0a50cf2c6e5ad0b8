/*
 * The sparse allreduce over MPI: every rank builds every rank's rows
 * (deterministic), runs qc_emulate_sparse_allreduce(_dense) on them itself
 * and checks that its MPI result is the emulated one bit for bit, for each
 * schedule (QC_SPARSE_SCHEDULE read when each communicator is created, by
 * the emulation too), codecs, row lengths and row patterns (overlapping
 * with duplicates, disjoint, rank 0 empty, nnz different on every rank);
 * a rank with another row_len gets QC_ERROR_MISMATCH on every rank.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <string.h>

#include "mpi_test_util.h"

enum { NROWS = 300 };

typedef struct {
  int64_t* indices;
  float* values;
  size_t nnz;
} rows_t;

/* Rank r's rows for pattern p. */
static rows_t make_rows(int r, int p, size_t row_len) {
  rows_t x;
  size_t k;
  x.nnz = p == 2 && r == 0 ? 0 : (size_t)(5 + 37 * r + (p == 3 ? 11 * r * r : 0)) % 120;
  x.indices = malloc((x.nnz + 1) * sizeof(int64_t));
  x.values = malloc((x.nnz * row_len + 1) * sizeof(float));
  for (k = 0; k < x.nnz; ++k) {
    const uint64_t b = test_bits(r, 100 + p, k);
    /* 0, 3: overlapping rows of [0, 150) with repeats; 1: rank r's own range. */
    x.indices[k] = p == 1 ? (int64_t)(r * 60 + (int)(b % 60)) : (int64_t)(b % 150);
  }
  fill_input(x.values, x.nnz * row_len, r, 200 + p);
  return x;
}

typedef struct {
  const char* name;
  qc_codec_t codec;
  int bits;
} codec_case;

static void check_schedule(const char* schedule, const codec_case* cc, size_t row_len, int p) {
  qc_comm_t comm;
  qc_policy_t pol = QC_POLICY_INIT;
  rows_t* all = malloc((size_t)g_size * sizeof(rows_t));
  const int64_t** idx = malloc((size_t)g_size * sizeof(int64_t*));
  const void** val = malloc((size_t)g_size * sizeof(void*));
  size_t* nnz = malloc((size_t)g_size * sizeof(size_t));
  void** tables = malloc((size_t)g_size * sizeof(void*));
  float* dense = malloc(NROWS * row_len * sizeof(float));
  qc_sparse_result_t mine = NULL, emulated = NULL;
  size_t rows_mine = 0, rows_emulated = 0;
  int r;
  setenv("QC_SPARSE_SCHEDULE", schedule, 1);
  comm = make_comm(60.0);
  pol.codec = cc->codec;
  pol.bits = cc->bits;
  pol.min_compress_bytes = 0;
  CHECK(qc_comm_set_layer_policy(comm, "emb", &pol) == QC_SUCCESS, "policy");
  for (r = 0; r < g_size; ++r) {
    all[r] = make_rows(r, p, row_len);
    idx[r] = all[r].indices;
    val[r] = all[r].values;
    nnz[r] = all[r].nnz;
    tables[r] = malloc(NROWS * row_len * sizeof(float));
  }
  /* The sparse form. */
  CHECK(qc_sparse_allreduce(comm, idx[g_rank], val[g_rank], nnz[g_rank], row_len,
                            QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", &mine) == QC_SUCCESS,
        "%s %s row_len %zu pattern %d: qc_sparse_allreduce", schedule, cc->name, row_len, p);
  CHECK(qc_emulate_sparse_allreduce(g_size, idx, val, nnz, row_len, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                    "emb", 0, &pol, &emulated) == QC_SUCCESS,
        "%s %s: qc_emulate_sparse_allreduce", schedule, cc->name);
  CHECK(qc_sparse_result_nnz(mine, &rows_mine) == QC_SUCCESS &&
            qc_sparse_result_nnz(emulated, &rows_emulated) == QC_SUCCESS,
        "nnz");
  CHECK(rows_mine == rows_emulated, "%s %s row_len %zu pattern %d: %zu rows, emulation %zu",
        schedule, cc->name, row_len, p, rows_mine, rows_emulated);
  {
    int64_t* i1 = malloc((rows_mine + 1) * sizeof(int64_t));
    int64_t* i2 = malloc((rows_mine + 1) * sizeof(int64_t));
    float* v1 = malloc((rows_mine * row_len + 1) * sizeof(float));
    float* v2 = malloc((rows_mine * row_len + 1) * sizeof(float));
    CHECK(qc_sparse_result_copy(mine, i1, v1, rows_mine) == QC_SUCCESS &&
              qc_sparse_result_copy(emulated, i2, v2, rows_mine) == QC_SUCCESS,
          "copy");
    CHECK(memcmp(i1, i2, rows_mine * sizeof(int64_t)) == 0 &&
              memcmp(v1, v2, rows_mine * row_len * sizeof(float)) == 0,
          "%s %s row_len %zu pattern %d: MPI rows differ from the emulation's", schedule,
          cc->name, row_len, p);
    free(i1);
    free(i2);
    free(v1);
    free(v2);
  }
  qc_sparse_result_destroy(mine);
  qc_sparse_result_destroy(emulated);
  /* The dense form. */
  CHECK(qc_sparse_allreduce_dense(comm, idx[g_rank], val[g_rank], nnz[g_rank], row_len, NROWS,
                                  dense, QC_DTYPE_FLOAT32, QC_OP_SUM, "emb") == QC_SUCCESS,
        "%s %s row_len %zu pattern %d: qc_sparse_allreduce_dense", schedule, cc->name, row_len,
        p);
  CHECK(qc_emulate_sparse_allreduce_dense(g_size, idx, val, nnz, row_len, NROWS, tables,
                                          QC_DTYPE_FLOAT32, QC_OP_SUM, "emb", 0,
                                          &pol) == QC_SUCCESS,
        "%s %s: qc_emulate_sparse_allreduce_dense", schedule, cc->name);
  CHECK(memcmp(dense, tables[g_rank], NROWS * row_len * sizeof(float)) == 0,
        "%s %s row_len %zu pattern %d: MPI table differs from the emulation's", schedule,
        cc->name, row_len, p);
  for (r = 0; r < g_size; ++r) {
    free(all[r].indices);
    free(all[r].values);
    free(tables[r]);
  }
  free(all);
  free(idx);
  free(val);
  free(nnz);
  free(tables);
  free(dense);
  qc_comm_destroy(comm);
}

static void check_row_len_mismatch(void) {
  qc_comm_t comm = make_comm(20.0);
  const int64_t idx[2] = {1, 2};
  const float val[8] = {0};
  qc_sparse_result_t out = NULL;
  double t0 = MPI_Wtime();
  qc_status_t s = qc_sparse_allreduce(comm, idx, val, 2, g_rank == g_size - 1 ? 3 : 4,
                                      QC_DTYPE_FLOAT32, QC_OP_SUM, NULL, &out);
  CHECK(s == QC_ERROR_MISMATCH, "row_len mismatch: status %d", (int)s);
  CHECK(out == NULL, "row_len mismatch: a result handle");
  CHECK(MPI_Wtime() - t0 < 10.0, "row_len mismatch took %.1f s", MPI_Wtime() - t0);
  qc_comm_destroy(comm);
}

int main(int argc, char** argv) {
  static const codec_case codecs[] = {
      {"none", QC_CODEC_NONE, 8}, {"minmax8", QC_CODEC_MINMAX, 8}, {"minmax4", QC_CODEC_MINMAX, 4}};
  static const char* const schedules[] = {"auto", "allgather", "sra", "densify"};
  static const size_t row_lens[] = {1, 64};
  size_t s, c, l;
  int p;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  for (s = 0; s < 4; ++s)
    for (c = 0; c < 3; ++c)
      for (l = 0; l < 2; ++l)
        for (p = 0; p < 4; ++p) check_schedule(schedules[s], &codecs[c], row_lens[l], p);
  if (g_rank == 0) printf("sparse allreduce over MPI = emulation, every schedule\n");
  unsetenv("QC_SPARSE_SCHEDULE");
  check_row_len_mismatch();
  if (g_rank == 0) printf("row_len mismatch -> QC_ERROR_MISMATCH on every rank\n");
  MPI_Finalize();
  return 0;
}
