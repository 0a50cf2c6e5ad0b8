# julia_allreduce.jl - a compressed allreduce from Julia: 3 ranks of an
# in-process group, each a task on its own thread, averaging with 4-bit
# minmax codes and error feedback; checked against the exact average and
# against emulate_allreduce (the same call on virtual ranks, bit for bit).
# The Julia twin of examples/python_allreduce.py.
#
#   QC_LIBRARY=$PWD/build/src/libqc.so julia --threads=4 \
#       --project=bindings/julia/QC.jl examples/julia_allreduce.jl
#
# UNTESTED: Julia is not available on the machines qc is developed on; CI
# only checks that this file parses (julia.parse, tree-sitter-julia).
using QC

# --- snippet: README "Using qc from Julia" ---
p = Policy(codec = :minmax, bits = 4, error_feedback = true)
comms = local_comms(3)                         # ranks 0..2 of one group
grads = [randn(Float32, 1 << 16) for _ in comms]
outs = [similar(g) for g in grads]
tasks = map(comms) do c                        # one task (thread) per rank
    Threads.@spawn begin
        r = QC.rank(c) + 1
        eb = ErrorBuffer(c, length(grads[r]))
        set_layer_policy!(c, "*", p)
        allreduce!(c, grads[r], outs[r]; op = :avg, layer = "fc1.weight", error_buffer = eb)
        close(eb)
    end
end
foreach(wait, tasks)
foreach(close, comms)                          # explicit: no finalizer closes a Comm
# --- end snippet ---

exact = sum(Float64.(g) for g in grads) ./ length(grads)
rel = sqrt(sum(abs2, outs[1] .- exact) / sum(abs2, exact))
println("3 ranks, $(length(grads[1])) floats, minmax 4-bit + error feedback")
println("relative error vs the exact average: ", round(rel; digits = 4))
all(o == outs[1] for o in outs) || error("ranks received different results")
rel < 0.2 || error("error too large")
emulate_allreduce(p, grads; op = :avg) == outs || error("the emulation differs from the real run")
println("OK")
