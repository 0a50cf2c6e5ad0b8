/*
 * qc_mpi.h - optional convenience for MPI programs written in C or C++.
 *
 * qc.h itself names no MPI type, so that one libqc serves programs with and
 * without MPI (and any MPI ABI). Its MPI transport takes the Fortran handle
 * of a communicator in qc_comm_config_t.mpi_comm; this header does that
 * conversion for you. Include it only in programs that include <mpi.h>
 * anyway; it adds no symbol to libqc (the function is static inline).
 *
 *   #include <qc_mpi.h>
 *   qc_comm_t comm;
 *   qc_status_t s = qc_comm_create_mpi(MPI_COMM_WORLD, 0.0, &comm);
 *
 * The same holds as for qc_comm_create with QC_TRANSPORT_MPI (docs/mpi.md):
 *   - collective over `comm`: every rank of it must call, as for
 *     MPI_Comm_dup (qc duplicates `comm`; the caller keeps and frees its own);
 *   - MPI must be initialized (MPI_Init or MPI_Init_thread) and not yet
 *     finalized, else QC_ERROR_TRANSPORT with a message in qc_last_error()
 *     (this wrapper checks first: MPI_Comm_c2f itself may not be called
 *     then, and OpenMPI aborts the process if it is);
 *   - destroy the qc communicator (qc_comm_destroy) before MPI_Finalize;
 *   - a libqc built without MPI returns QC_ERROR_UNSUPPORTED.
 *
 * The MPI library the program uses must be the one libqc was built with:
 * Fortran handles are only meaningful within one MPI implementation.
 */
#ifndef QC_MPI_H
#define QC_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "qc.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Create a qc communicator over the MPI communicator `comm`.
 * timeout_seconds: how long a blocked collective waits for its peers before
 *   it fails with QC_ERROR_TIMEOUT; 0 keeps the default of
 *   QC_COMM_CONFIG_INIT (300 s). Any other value is passed on as given, so a
 *   negative or NaN one gives QC_ERROR_INVALID_ARGUMENT.
 * out: receives the communicator when the call succeeds.
 */
static inline qc_status_t qc_comm_create_mpi(MPI_Comm comm, double timeout_seconds,
                                             qc_comm_t* out) {
  qc_comm_config_t config = QC_COMM_CONFIG_INIT;
  int initialized = 0, finalized = 0;
  config.transport = QC_TRANSPORT_MPI;
  /* MPI_Comm_c2f may not be called outside MPI_Init..MPI_Finalize (OpenMPI
   * aborts the process); MPI_Initialized and MPI_Finalized may. Outside,
   * mpi_comm stays 0 and qc_comm_create reports QC_ERROR_TRANSPORT ("MPI is
   * not initialized") before it looks at the handle. */
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) config.mpi_comm = (int64_t)MPI_Comm_c2f(comm);
  if (timeout_seconds != 0.0) config.timeout_seconds = timeout_seconds;
  return qc_comm_create(&config, out);
}

#ifdef __cplusplus
}
#endif

#endif /* QC_MPI_H */
