# Tests of QC.jl. Run with `julia --project=bindings/julia/QC.jl -e 'using Pkg; Pkg.test()'`
# (QC_LIBRARY or LD_LIBRARY_PATH must point at libqc; see README.md).
#
#   this file        single-threaded: policies, errors, codecs, error buffers,
#                    emulation, a one-rank local communicator
#   local_comms.jl   local groups of 3 ranks driven by Threads.@spawn; run
#                    here when Julia has >= 3 threads, else in a child Julia
#                    started with --threads=4
#   mpi.jl           QC.Comm(MPI.COMM_WORLD); skipped when MPI.jl is absent
using QC, Test

const EXACT_SUM_RANKS = 3

# Inputs that are small integers: their float32 sum is exact in any order.
integer_inputs(nranks, n) = [Float32[(i * (r + 1)) % 17 - 8 for i in 1:n] for r in 0:nranks-1]

status_of(f) =
    try
        f()
        nothing
    catch e
        e isa QCError ? e.status : rethrow()
    end

@testset "QC.jl" begin

@testset "library and version" begin
    v = QC.library_version()
    @test v isa VersionNumber
    @test v.major == QC.QC_VERSION_MAJOR
    @test Int(QC.qc_version_number()) >= QC.QC_HEADER_VERSION_NUMBER
    @test QC.libqc isa String
end

@testset "statuses and QCError" begin
    @test QC.check(QC.QC_SUCCESS) === nothing
    @test unsafe_string(QC.qc_status_string(QC.QC_ERROR_TIMEOUT)) == "QC_ERROR_TIMEOUT"
    for (status, name) in QC.QC_STATUS_NAMES
        @test unsafe_string(QC.qc_status_string(status)) == name
        @test haskey(QC.QC_STATUS_DESCRIPTIONS, status)
    end
    e = QCError(QC.QC_ERROR_MISMATCH, "QC_ERROR_MISMATCH", "")
    text = sprint(showerror, e)
    @test occursin("QC_ERROR_MISMATCH", text)
    @test occursin(QC.QC_STATUS_DESCRIPTIONS[QC.QC_ERROR_MISMATCH], text)
end

@testset "Policy defaults match the library" begin
    ref = Ref(QC.qc_policy_t())
    QC.check(QC.qc_policy_init(ref))
    @test QC.Policy(ref[]) == Policy()
    p = Policy()
    @test p.codec == QC.QC_CODEC_NONE
    @test p.bits == 4 && p.bucket_size == 128 && p.group_size == 8
    @test p.error_feedback == false && p.seed == 0 && p.min_compress_bytes == 16384
    @test p.topk_ratio == 0.01f0
    c = QC.qc_policy_t(p)
    @test c.struct_size == sizeof(QC.qc_policy_t)
    @test QC.Policy(c) == p
end

@testset "Policy construction" begin
    p = Policy(codec = :minmax, bits = 2, bucket_size = 64, error_feedback = true,
               min_compress_bytes = 0)
    @test p.codec == QC.QC_CODEC_MINMAX && p.bits == 2 && p.error_feedback
    @test Policy(codec = QC.QC_CODEC_MINMAX, bits = 2, bucket_size = 64, error_feedback = true,
                 min_compress_bytes = 0) == p
    @test Policy(codec = "MinMax", bits = 2, bucket_size = 64, error_feedback = 1,
                 min_compress_bytes = 0) == p
    q = Policy(p; bits = 8)
    @test q.bits == 8 && q.codec == p.codec && q.bucket_size == 64
    @test Policy(p) == p
    @test occursin(":minmax", sprint(show, p))
    @test Policy(rounding = :stochastic, algorithm = :sra, seed = 7).algorithm == QC.QC_ALGO_SRA
    @test Policy().rounding == QC.QC_ROUND_AUTO && Policy().scale == QC.QC_SCALE_AUTO
    @test Policy(scale = :l2).scale == QC.QC_SCALE_L2
    @test QC.Policy(QC.qc_policy_t(Policy(scale = :max_abs))).scale == QC.QC_SCALE_MAX_ABS
    # Rejected in Julia: unknown names, values outside C's types.
    @test_throws ArgumentError Policy(codec = :nope)
    @test_throws ArgumentError Policy(codec = 42)
    @test_throws ArgumentError Policy(rounding = :up)
    @test_throws ArgumentError Policy(scale = :rms)
    @test_throws ArgumentError Policy(min_compress_bytes = -1)
    @test_throws ArgumentError Policy(bits = 2^40)
    @test_throws ArgumentError Policy(error_feedback = 2)
    # Rejected by the library: QCError with QC_ERROR_INVALID_ARGUMENT.
    for bad in ((bits = 0,), (bits = 9,), (bucket_size = 0,), (group_size = 0,),
                (topk_ratio = 0.0,), (topk_ratio = 1.5,), (scale_update_period = 0,))
        err = try
            Policy(; bad...)
            nothing
        catch e
            e
        end
        @test err isa QCError
        if err isa QCError
            @test err.status == QC.QC_ERROR_INVALID_ARGUMENT
            @test err.name == "QC_ERROR_INVALID_ARGUMENT"
            @test !isempty(err.message)
        end
    end
end

@testset "encode / decode" begin
    n = 1000
    x = Float32[sin(0.01f0 * i) * 3 + 0.5f0 * cos(0.37f0 * i) for i in 1:n]
    # codec none: exact.
    none = Policy()
    @test QC.decode(QC.encode(x, none), n) == x
    # fp16: within half a unit in the last place of a Float16.
    y16 = QC.decode(QC.encode(x, Policy(codec = :fp16, min_compress_bytes = 0)), n)
    @test all(abs(a - b) <= abs(b) * 2.0f0^-11 + 2.0f0^-24 for (a, b) in zip(y16, x))
    # minmax, nearest rounding: each value within half a step of its bucket.
    for bits in (8, 4, 2)
        bucket = 64
        p = Policy(codec = :minmax, bits = bits, bucket_size = bucket, min_compress_bytes = 0)
        msg = QC.encode(x, p)
        @test length(msg) <= QC.encoded_size(p, n)
        @test String(msg[1:4]) == "QCWF"
        y = QC.decode(msg, n)
        for start in 1:bucket:n
            r = start:min(start + bucket - 1, n)
            lo, hi = extrema(view(x, r))
            step = (hi - lo) / (2^bits - 1)
            @test maximum(abs.(view(y, r) .- view(x, r))) <= step / 2 * 1.001f0 + 1.0f-5
        end
    end
    # Float16 data.
    h = Float16.(x)
    @test QC.decode(QC.encode(h, none), n, Float16) == h
    out = Vector{Float16}(undef, n)
    @test QC.decode!(out, QC.encode(h, none)) === out && out == h
    # Errors from the library.
    msg = QC.encode(x, none)
    @test status_of(() -> QC.decode(msg, n + 1)) == QC.QC_ERROR_MISMATCH
    broken = copy(msg)
    broken[1] = UInt8('X')
    @test status_of(() -> QC.decode(broken, n)) == QC.QC_ERROR_CORRUPT_DATA
    @test status_of(() -> QC.decode(msg[1:end-1], n)) == QC.QC_ERROR_CORRUPT_DATA
    @test_throws ArgumentError QC.decode(msg, -1)
end

@testset "emulate_allreduce" begin
    n = 5000
    xs = integer_inputs(EXACT_SUM_RANKS, n)
    outs = emulate_allreduce(Policy(), xs)
    @test length(outs) == EXACT_SUM_RANKS
    expected = xs[1] .+ xs[2] .+ xs[3]
    @test all(o == expected for o in outs)
    avg = emulate_allreduce(Policy(), xs; op = :avg)
    @test all(o ≈ expected ./ 3 for o in avg)
    # Compressed: every rank gets the same bits.
    p = Policy(codec = :minmax, bits = 4, bucket_size = 64, min_compress_bytes = 0)
    ys = [randn(Float32, n) for _ in 1:4]
    zs = emulate_allreduce(p, ys)
    @test all(z == zs[1] for z in zs)
    exact = sum(ys)
    @test zs[1] != exact
    @test sqrt(sum(abs2, zs[1] .- exact) / sum(abs2, exact)) < 0.5
    # Checked in Julia before calling C.
    @test_throws DimensionMismatch emulate_allreduce(Policy(), [zeros(Float32, 4), zeros(Float32, 5)])
    @test_throws ArgumentError emulate_allreduce(Policy(), Vector{Float32}[])
    @test_throws ArgumentError emulate_allreduce(Policy(), xs; op = :max)
    @test_throws DimensionMismatch emulate_allreduce(Policy(), xs; error_buffers = [nothing])
end

@testset "emulate_allreduce with error buffers" begin
    n = 2048
    p = Policy(codec = :onebit, bucket_size = 128, error_feedback = true, min_compress_bytes = 0)
    xs = [randn(Float32, n) for _ in 1:3]
    ebs = [ErrorBuffer(nothing, n) for _ in 1:3]
    outs = emulate_allreduce(p, xs; error_buffers = ebs)
    @test all(o == outs[1] for o in outs)
    @test all(QC.norm(e) > 0 for e in ebs)
    foreach(close, ebs)
    @test_throws DimensionMismatch emulate_allreduce(p, xs; error_buffers = [ErrorBuffer(nothing, n + 1) for _ in 1:3])
end

@testset "emulate_alltoall" begin
    nr, per = 3, 10
    xs = [Float32[100 * r + i for i in 1:nr*per] for r in 1:nr]
    outs = emulate_alltoall(Policy(), xs)
    for j in 1:nr, i in 1:nr
        # block i of rank j's output is block j of rank i's input
        @test outs[j][(i-1)*per+1:i*per] == xs[i][(j-1)*per+1:j*per]
    end
    @test_throws DimensionMismatch emulate_alltoall(Policy(), [zeros(Float32, 4) for _ in 1:3])
end

@testset "ErrorBuffer" begin
    n = 100
    eb = ErrorBuffer(nothing, n)
    @test isopen(eb) && length(eb) == n
    @test QC.norm(eb) == 0.0
    image = QC.save(eb)
    @test length(image) == 56 + 4 * n
    @test load!(eb, image) === eb
    @test reset!(eb) === eb
    damaged = copy(image)
    damaged[end] ⊻= 0xff
    @test status_of(() -> load!(eb, damaged)) == QC.QC_ERROR_CORRUPT_DATA
    @test status_of(() -> load!(eb, image[1:end-4])) !== nothing
    other = ErrorBuffer(nothing, n + 1)
    @test status_of(() -> load!(other, image)) in (QC.QC_ERROR_MISMATCH, QC.QC_ERROR_CORRUPT_DATA)
    close(other)
    @test occursin("100 residuals", sprint(show, eb))
    close(eb)
    close(eb)  # idempotent
    @test !isopen(eb)
    @test_throws InvalidStateException QC.norm(eb)
    @test_throws InvalidStateException QC.save(eb)
    @test_throws ArgumentError ErrorBuffer(nothing, -1)
    # Unclosed buffers are freed by their finalizer.
    for _ in 1:10
        ErrorBuffer(nothing, 1000)
    end
    GC.gc()
end

@testset "one-rank local communicator" begin
    comms = local_comms(1; timeout = 30.0)
    @test length(comms) == 1
    c = comms[1]
    @test QC.rank(c) == 0 && nranks(c) == 1
    @test occursin("rank 0 of 1", sprint(show, c))
    x = Float32[1, 2, 3, 4]
    y = similar(x)
    @test allreduce!(c, x, y) === y
    @test y == x
    @test allreduce!(c, copy(x); op = :avg) == x
    @test allreduce!(c, Float16.(x)) == Float16.(x)
    # Validation before the library is called.
    @test_throws DimensionMismatch allreduce!(c, x, zeros(Float32, 3))
    @test_throws ArgumentError allreduce!(c, x; layer = "bad\0name")
    @test_throws ArgumentError allreduce!(c, x; op = :max)
    # Contiguous views are accepted; overlapping or strided ones are not.
    big = Float32[1, 2, 3, 4, 5, 6, 7, 8]
    @test allreduce!(c, view(big, 1:4), view(big, 5:8)) == Float32[1, 2, 3, 4]
    @test_throws ArgumentError allreduce!(c, view(big, 1:4), view(big, 3:6))
    @test_throws ArgumentError allreduce!(c, view(big, 1:2:8))
    @test_throws DimensionMismatch allreduce!(c, x; error_buffer = ErrorBuffer(c, 3))
    # Layer policies.
    p = Policy(codec = :minmax, bits = 4, bucket_size = 64, min_compress_bytes = 0)
    @test set_layer_policy!(c, "fc*", p) === c
    @test layer_policy(c, "fc1") == p
    @test layer_policy(c) == Policy()
    @test policy_preset!(c, "cgx"; base = p) === c
    @test layer_policy(c, "fc.bias").codec == QC.QC_CODEC_NONE
    @test status_of(() -> policy_preset!(c, "no-such-preset")) == QC.QC_ERROR_INVALID_ARGUMENT
    @test_throws ArgumentError set_layer_policy!(c, "a\0b", p)
    allreduce!(c, copy(x); layer = "fc1")
    @test "fc1" in QC.layer_names(c)
    s = QC.stats(c)
    @test s.calls >= 3 && s.logical_bytes > 0
    ls = QC.layer_stats(c, "fc1")
    @test ls.calls == 1 && ls.count == length(x)
    @test QC.layer_stats(c, "never-used").calls == 0
    # Alltoall with one rank is a copy.
    @test alltoall!(c, x, similar(x)) == x
    close(c)
    close(c)
    @test !isopen(c)
    @test occursin("closed", sprint(show, c))
    @test_throws InvalidStateException allreduce!(c, x)
    @test_throws InvalidStateException QC.rank(c)
    @test_throws ArgumentError local_comms(0)
    @test_throws ArgumentError local_comms(2; timeout = 0)
    @test_throws ArgumentError QC.Comm(42)
end

@testset "local communicators, 3 ranks on threads" begin
    if Threads.nthreads() >= EXACT_SUM_RANKS
        include("local_comms.jl")
    else
        # Each rank blocks its thread inside the collective, so the ranks
        # need a thread each: run the file in a child Julia with more threads.
        project = something(Base.active_project(), dirname(@__DIR__))
        script = joinpath(@__DIR__, "local_comms.jl")
        cmd = `$(Base.julia_cmd()) --startup-file=no --threads=$(EXACT_SUM_RANKS + 1) --project=$project $script`
        @test success(pipeline(cmd; stdout = stdout, stderr = stderr))
    end
end

@testset "MPI" begin
    if Base.find_package("MPI") === nothing
        @info "MPI.jl is not installed in this environment: MPI tests skipped"
        @test_skip "MPI.jl not installed"
    else
        include("mpi.jl")
    end
end

end # @testset "QC.jl"
