"""
    QCMPIExt

Package extension of QC, loaded by Julia (1.9 or later) as soon as both QC
and MPI.jl are loaded. It adds one method:

    QC.Comm(comm::MPI.Comm; timeout=300.0) -> QC.Comm

a qc communicator over an MPI communicator (`qc_comm_create` with
`transport = QC_TRANSPORT_MPI`). The MPI communicator is handed to libqc as
its Fortran handle (`MPI_Comm_c2f`), which is an integer under every MPI
ABI, so the same code works with MPICH- and Open MPI-style handles
(`MPI.API.MPI_Comm_c2f(comm.val)`).

Design: the constructor is a method of `QC.Comm` itself, not a separate
function, so code reads `QC.Comm(MPI.COMM_WORLD)` with or without other
transports; without MPI.jl loaded, `QC.Comm(x)` throws an ArgumentError
saying to load MPI.jl.

Requirements:
- libqc must have been built with MPI support (else `QC_ERROR_UNSUPPORTED`),
  against the same MPI library that MPI.jl uses: configure MPI.jl for the
  system MPI (`MPIPreferences.use_system_binary()`), since a handle from
  MPI.jl's bundled MPICH means nothing to a libqc linked with another MPI.
- `MPI.Init()` must have been called, and every qc communicator over MPI
  must be closed (`close(c)`) before `MPI.Finalize()`. QC.Comm has no
  finalizer for exactly that reason.
- Creating the communicator is collective over `comm`: every rank calls it.
"""
module QCMPIExt

using QC, MPI

function QC.Comm(comm::MPI.Comm; timeout::Real = 300.0)
    if !MPI.Initialized() || MPI.Finalized()
        throw(ArgumentError("QC.Comm(::MPI.Comm): MPI is not initialized (call MPI.Init() first) " *
                            "or is already finalized"))
    end
    timeout > 0 || throw(ArgumentError("QC.Comm(::MPI.Comm): timeout must be > 0, got $timeout"))
    # MPI.API.MPI_Comm_c2f takes the raw MPI_Comm handle (an integer under
    # MPICH's ABI, a pointer under Open MPI's), which MPI.Comm keeps in `val`.
    fortran_handle = Int64(MPI.API.MPI_Comm_c2f(comm.val))
    config = Ref(QC.qc_comm_config_t(; transport = QC.QC_TRANSPORT_MPI,
                                     mpi_comm = fortran_handle,
                                     timeout_seconds = Float64(timeout)))
    handle = Ref{QC.qc_comm_t}(C_NULL)
    QC.check(QC.qc_comm_create(config, handle))
    return QC.Comm(handle[], :mpi)
end

end # module QCMPIExt
