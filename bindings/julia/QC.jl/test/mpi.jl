# QC over MPI (the QCMPIExt extension). runtests.jl includes this file when
# MPI.jl is installed (then it runs as a single MPI process); for several
# ranks run it under mpiexec with the MPI that libqc was built against:
#   mpiexec -n 3 julia --project=bindings/julia/QC.jl bindings/julia/QC.jl/test/mpi.jl
# MPI.jl must use that same MPI library (MPIPreferences.use_system_binary()).
using MPI, QC, Test

MPI.Initialized() || MPI.Init()

@testset "QC over MPI" begin
    # The extension loads only when MPI is in the environment QC is used from
    # (not in Pkg.test's sandbox, where MPI is no test dependency).
    qcomm = if Base.get_extension(QC, :QCMPIExt) === nothing
        @info "QCMPIExt is not loaded (MPI.jl is not in this environment): MPI tests skipped"
        nothing
    else
        try
            QC.Comm(MPI.COMM_WORLD; timeout = 60.0)
        catch e
            (e isa QCError && e.status == QC.QC_ERROR_UNSUPPORTED) || rethrow()
            @info "libqc was built without MPI: MPI tests skipped" exception = e
            nothing
        end
    end
    if qcomm === nothing
        @test_skip "QC over MPI not available"
    else
        world = MPI.COMM_WORLD
        try
            @test QC.rank(qcomm) == MPI.Comm_rank(world)
            @test nranks(qcomm) == MPI.Comm_size(world)
            n = 5000
            r = QC.rank(qcomm)
            x = Float32[(i + r) % 11 - 5 for i in 1:n]
            expected = sum(Float32[(i + k) % 11 - 5 for i in 1:n] for k in 0:nranks(qcomm)-1)
            @test allreduce!(qcomm, x, similar(x)) == expected
            # compressed: every rank ends with the same bits
            p = Policy(codec = :minmax, bits = 4, bucket_size = 64, min_compress_bytes = 0)
            set_layer_policy!(qcomm, "*", p)
            y = allreduce!(qcomm, randn(Float32, n), zeros(Float32, n))
            first_rank = MPI.bcast(y, 0, world)
            @test y == first_rank
            @test QC.stats(qcomm).calls == 2
        finally
            close(qcomm)
        end
    end
end
