# Local groups of 3 ranks, each rank driven by its own task (Threads.@spawn).
# Needs Julia started with at least 3 threads: a rank blocks its thread inside
# the collective until every rank has arrived. runtests.jl includes this file,
# or runs it in a child Julia with --threads=4; it also runs on its own:
#   julia --threads=4 --project=bindings/julia/QC.jl bindings/julia/QC.jl/test/local_comms.jl
using QC, Test

const NRANKS = 3

# Run f(comm) for every comm, each on its own task; results in rank order.
# A rank that throws makes fetch throw (TaskFailedException).
function on_ranks(f, comms)
    tasks = [Threads.@spawn f(c) for c in comms]
    return [fetch(t) for t in tasks]
end

# Like on_ranks, but each rank returns the status of the QCError it threw
# (nothing when it did not throw).
function statuses_on_ranks(f, comms)
    return on_ranks(comms) do c
        try
            f(c)
            nothing
        catch e
            e isa QCError || rethrow()
            e.status
        end
    end
end

# A fresh group per test set, closed afterwards even when a test fails.
function with_group(f; timeout = 60.0)
    comms = local_comms(NRANKS; timeout = timeout)
    try
        f(comms)
    finally
        foreach(close, comms)
    end
end

small_integers(n, r) = Float32[(i * (r + 2)) % 13 - 6 for i in 1:n]

@testset "local group of $NRANKS ranks" begin
    @test Threads.nthreads() >= NRANKS

    @testset "ranks and sizes" begin
        with_group() do comms
            @test [QC.rank(c) for c in comms] == collect(0:NRANKS-1)
            @test all(nranks(c) == NRANKS for c in comms)
            @test all(QC.async_error(c) === nothing for c in comms)
        end
    end

    @testset "codec none: the exact sum on every rank" begin
        with_group() do comms
            n = 10_000
            xs = [small_integers(n, r) for r in 0:NRANKS-1]
            expected = reduce(+, xs)
            outs = on_ranks(c -> allreduce!(c, xs[QC.rank(c)+1], similar(xs[1])), comms)
            @test all(o == expected for o in outs)
            # in place, and op = :avg
            bufs = [copy(x) for x in xs]
            on_ranks(c -> allreduce!(c, bufs[QC.rank(c)+1]; op = :avg), comms)
            @test all(b ≈ expected ./ NRANKS for b in bufs)
            @test all(b == bufs[1] for b in bufs)
            # Float16
            hs = [Float16.(x) for x in xs]
            outs16 = on_ranks(c -> allreduce!(c, hs[QC.rank(c)+1], similar(hs[1])), comms)
            @test all(o == Float16.(expected) for o in outs16)
        end
    end

    @testset "compressed: equal to emulate_allreduce bit for bit" begin
        for (policy, op) in (
            (Policy(codec = :minmax, bits = 4, bucket_size = 64, min_compress_bytes = 0), :sum),
            (Policy(codec = :minmax, bits = 2, bucket_size = 128, algorithm = :ring, min_compress_bytes = 0), :avg),
            (Policy(codec = :qsgd, bits = 4, bucket_size = 64, min_compress_bytes = 0), :sum),
            (Policy(codec = :onebit, bucket_size = 128, algorithm = :sra, min_compress_bytes = 0), :sum),
        )
            with_group() do comms
                n = 4099
                xs = [randn(Float32, n) for _ in 1:NRANKS]
                emulated = emulate_allreduce(policy, xs; op = op)
                foreach(c -> set_layer_policy!(c, "*", policy), comms)
                outs = on_ranks(c -> allreduce!(c, xs[QC.rank(c)+1], similar(xs[1]); op = op), comms)
                @test all(o == outs[1] for o in outs)
                @test all(reinterpret(UInt32, o) == reinterpret(UInt32, e) for (o, e) in zip(outs, emulated))
                @test outs[1] != reduce(+, xs)   # lossy, so not the exact sum
                s = QC.stats(comms[1])
                @test s.calls == 1 && s.logical_bytes == 4 * n
                @test 0 < s.wire_bytes
            end
        end
    end

    @testset "error feedback: local run equals emulation, buffers save and load" begin
        n = 2048
        policy = Policy(codec = :onebit, bucket_size = 128, error_feedback = true, min_compress_bytes = 0)
        xs = [randn(Float32, n) for _ in 1:NRANKS]
        emu_ebs = [ErrorBuffer(nothing, n) for _ in 1:NRANKS]
        emulated = emulate_allreduce(policy, xs; error_buffers = emu_ebs)
        with_group() do comms
            foreach(c -> set_layer_policy!(c, "*", policy), comms)
            ebs = [ErrorBuffer(c, n) for c in comms]
            @test all(QC.norm(e) == 0.0 for e in ebs)
            outs = on_ranks(comms) do c
                r = QC.rank(c) + 1
                allreduce!(c, xs[r], similar(xs[r]); layer = "grad", error_buffer = ebs[r])
            end
            @test all(o == e for (o, e) in zip(outs, emulated))
            norms = [QC.norm(e) for e in ebs]
            @test all(v > 0 for v in norms)
            @test norms == [QC.norm(e) for e in emu_ebs]
            images = [QC.save(e) for e in ebs]
            @test all(length(img) == 56 + 4 * n for img in images)
            fresh = [ErrorBuffer(c, n) for c in comms]
            for (f, img, v) in zip(fresh, images, norms)
                load!(f, img)
                @test QC.norm(f) == v
                @test QC.save(f) == img
            end
            # another rank's image is refused, the buffer is unchanged
            err = try
                load!(fresh[2], images[1])
                nothing
            catch e
                e
            end
            @test err isa QCError && err.status == QC.QC_ERROR_MISMATCH
            @test QC.norm(fresh[2]) == norms[2]
            reset!(fresh[1])
            @test QC.norm(fresh[1]) == 0.0
            foreach(close, ebs)
            foreach(close, fresh)
        end
        foreach(close, emu_ebs)
    end

    @testset "alltoall" begin
        with_group() do comms
            per = 7
            xs = [Float32[1000 * r + i for i in 1:NRANKS*per] for r in 0:NRANKS-1]
            outs = on_ranks(c -> alltoall!(c, xs[QC.rank(c)+1], similar(xs[1])), comms)
            for j in 1:NRANKS, i in 1:NRANKS
                @test outs[j][(i-1)*per+1:i*per] == xs[i][(j-1)*per+1:j*per]
            end
            @test outs == emulate_alltoall(Policy(), xs)
            @test_throws DimensionMismatch alltoall!(comms[1], zeros(Float32, NRANKS * per + 1))
        end
    end

    @testset "fused segments" begin
        with_group() do comms
            counts = [100, 3000, 7]
            layers = ["a.weight", "a.bias", nothing]
            n = sum(counts)
            xs = [small_integers(n, r) for r in 0:NRANKS-1]
            outs = on_ranks(c -> allreduce_segments!(c, xs[QC.rank(c)+1], similar(xs[1]), counts, layers), comms)
            @test all(o == reduce(+, xs) for o in outs)
            @test_throws DimensionMismatch allreduce_segments!(comms[1], xs[1], similar(xs[1]), [1, 2], nothing)
            @test_throws DimensionMismatch allreduce_segments!(comms[1], xs[1], similar(xs[1]), counts, ["x"])
        end
    end

    @testset "adaptive bit widths" begin
        with_group() do comms
            base = Policy(codec = :minmax, bits = 4, bucket_size = 128, min_compress_bytes = 0)
            foreach(c -> set_layer_policy!(c, "*", base), comms)
            sizes = Dict("big" => 8192, "small" => 512)
            inputs = Dict(name => [randn(Float32, k) .* (name == "big" ? 1.0f0 : 5.0f0) for _ in 1:NRANKS]
                          for (name, k) in sizes)
            on_ranks(comms) do c
                r = QC.rank(c) + 1
                for name in sort!(collect(keys(sizes)))
                    allreduce!(c, inputs[name][r], similar(inputs[name][r]); layer = name)
                end
            end
            reports = on_ranks(c -> adapt_policies!(c; alpha = 2.0), comms)
            @test all(r == reports[1] for r in reports)
            @test reports[1].layers == 2
            @test reports[1].predicted_error <= reports[1].error_budget
            widths = [layer_policy(c, "big").bits for c in comms]
            @test all(w == widths[1] for w in widths) && widths[1] in (2, 3, 4, 8)
            @test_throws ArgumentError adapt_policies!(comms[1]; allowed_bits = 1:9)
        end
    end

    @testset "ranks that disagree all get QC_ERROR_MISMATCH" begin
        with_group() do comms
            statuses = statuses_on_ranks(comms) do c
                n = QC.rank(c) == 0 ? 10 : 11
                allreduce!(c, ones(Float32, n))
            end
            @test all(s == QC.QC_ERROR_MISMATCH for s in statuses)
        end
    end

    @testset "a departed peer: QC_ERROR_TRANSPORT, not a hang" begin
        comms = local_comms(2; timeout = 60.0)
        close(comms[2])
        err = try
            allreduce!(comms[1], ones(Float32, 8))
            nothing
        catch e
            e
        end
        @test err isa QCError
        @test err isa QCError && err.status in (QC.QC_ERROR_TRANSPORT, QC.QC_ERROR_TIMEOUT)
        close(comms[1])
    end

    @testset "timeout" begin
        comms = local_comms(2; timeout = 0.5)
        t0 = time()
        err = try
            allreduce!(comms[1], ones(Float32, 8))
            nothing
        catch e
            e
        end
        @test err isa QCError && err.status == QC.QC_ERROR_TIMEOUT
        @test time() - t0 < 30
        # rank 1 never called, yet learns that its group broke
        late = QC.async_error(comms[2])
        @test late isa QCError && late.status == QC.QC_ERROR_TIMEOUT
        @test occursin("qc_comm_get_async_error", late.message)
        foreach(close, comms)
    end

    @testset "collectives leave the garbage collector free to run" begin
        # Rank 0 enters the collective first and blocks; rank 1 allocates and
        # collects before it joins. With the blocking call outside the
        # GC-safe state this would stall until the timeout.
        with_group(timeout = 20.0) do comms
            outs = on_ranks(comms) do c
                r = QC.rank(c)
                if r != 0
                    sleep(0.2)
                    garbage = [rand(Float32, 1000) for _ in 1:1000]
                    GC.gc()
                    @assert length(garbage) == 1000
                end
                allreduce!(c, fill(Float32(r), 16))
            end
            @test all(o == fill(Float32(sum(0:NRANKS-1)), 16) for o in outs)
        end
    end
end
