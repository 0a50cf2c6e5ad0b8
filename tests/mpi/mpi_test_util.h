/*
 * What the MPI tests that compare against the emulation share: the rank,
 * a CHECK that aborts the job with qc_last_error(), deterministic inputs
 * every rank can rebuild for every rank, and a communicator over
 * MPI_COMM_WORLD. Each test is one program, so the statics are its own.
 */
#ifndef QC_TESTS_MPI_TEST_UTIL_H
#define QC_TESTS_MPI_TEST_UTIL_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "qc.h"

static int g_rank = 0;
static int g_size = 1;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank %d: FAILED %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, " (qc_last_error: %s)\n", qc_last_error());            \
      MPI_Abort(MPI_COMM_WORLD, 1);                                           \
    }                                                                         \
  } while (0)

/* The k-th value of stream (r, t): splitmix64 bits. */
static uint64_t test_bits(int r, int t, size_t k) {
  uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1) + 0x632be59bd9b4e019ull * (uint64_t)(t + 7) +
               0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Rank r's input for call t: uniform in [-1, 1). */
static void fill_input(float* x, size_t count, int r, int t) {
  size_t i;
  for (i = 0; i < count; ++i) x[i] = (float)(test_bits(r, t, i) >> 40) * (1.0f / 8388608.0f) - 1.0f;
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

#endif
