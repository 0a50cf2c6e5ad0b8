"""
    QC

Julia bindings of qc, a C library of quantized collectives: allreduce and
alltoall that compress what they send (8, 4, 2 or 1 bit per value, sparse
top-k, half precision), with error feedback.

The package has two layers:

- `src/libqc.jl`, generated from `include/qc.h`: the C ABI one to one
  (`qc_allreduce`, `qc_policy_t`, `QC_CODEC_MINMAX`, ...), each function an
  `@ccall` returning the raw `qc_status_t`.
- this file: the Julia API ([`Policy`](@ref), [`Comm`](@ref),
  [`ErrorBuffer`](@ref), [`allreduce!`](@ref), [`emulate_allreduce`](@ref),
  ...). Every failure throws: [`QCError`](@ref) for a status from the
  library, `ArgumentError` / `DimensionMismatch` for arguments rejected
  before the library is called.

The library is `ENV["QC_LIBRARY"]` when that is set (an absolute path to
`libqc.so`), else `libqc` found through `LD_LIBRARY_PATH` and the system's
library path. The value is read when QC is precompiled.
"""
module QC

using Libdl

export QCError, Policy, Comm, ErrorBuffer, local_comms, nranks,
       allreduce!, allreduce_segments!, alltoall!,
       set_layer_policy!, layer_policy, policy_preset!, adapt_policies!,
       reset!, load!, emulate_allreduce, emulate_alltoall

"""
    QC.libqc

The name or path of the qc shared library that every `@ccall` uses:
`ENV["QC_LIBRARY"]` when QC was precompiled (an absolute path to
`libqc.so`), else `"libqc"`, which the dynamic loader finds through
`LD_LIBRARY_PATH` (or the system's library path). After changing
`QC_LIBRARY`, precompile QC again (e.g. touch this package's source, or
`Base.compilecache(Base.identify_package("QC"))`).
"""
const libqc = get(ENV, "QC_LIBRARY", "libqc")

# The library QC_LIBRARY asks for now (an empty value counts as unset).
_requested_library() = (v = get(ENV, "QC_LIBRARY", ""); isempty(v) ? "libqc" : v)

function __init__()
    handle = isempty(libqc) ? nothing :
             Libdl.dlopen(libqc, Libdl.RTLD_LAZY | Libdl.RTLD_GLOBAL; throw_error = false)
    if handle === nothing
        error("QC.jl: cannot load the qc library \"" * libqc * "\". Set the environment variable " *
              "QC_LIBRARY to the absolute path of libqc.so before QC is precompiled (then " *
              "precompile QC again), or put the directory holding libqc.so on LD_LIBRARY_PATH.")
    end
    requested = _requested_library()
    if requested != libqc
        @warn "QC.jl: QC_LIBRARY is \"$requested\" but QC was precompiled with \"$libqc\", which " *
              "is the one in use; precompile QC again to switch libraries."
    end
    libversion = Int(qc_version_number())
    if div(libversion, 10000) != QC_VERSION_MAJOR || libversion < QC_HEADER_VERSION_NUMBER
        @warn "QC.jl: libqc $(unsafe_string(qc_version_string())) is older than, or a different " *
              "major version from, the qc.h these bindings were generated from " *
              "($(QC_VERSION_MAJOR).$(QC_VERSION_MINOR).$(QC_VERSION_PATCH)); calls may fail " *
              "with QC_ERROR_VERSION."
    end
    return nothing
end

# The generated low-level layer: constants, structs and one @ccall per C function.
include("libqc.jl")

"""
    library_version() -> VersionNumber

Version of the libqc that is loaded (it may be newer than the qc.h the
bindings were generated from, `QC.QC_HEADER_VERSION_NUMBER`).
"""
library_version() = VersionNumber(unsafe_string(qc_version_string()))

# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

"""
    QCError(status, name, message) <: Exception

A call into libqc failed. `status` is the `qc_status_t` (compare it with the
constants, e.g. `e.status == QC.QC_ERROR_MISMATCH`), `name` its name
("QC_ERROR_MISMATCH") and `message` the library's detailed message for the
calling thread (`qc_last_error()`), which names the offending argument.
"""
struct QCError <: Exception
    status::qc_status_t
    name::String
    message::String
end

# Read qc_last_error() at once: it is per OS thread and the next qc call on
# this thread replaces it. No task switch can happen between the failed call
# and here (there is no yield point in between).
function QCError(status::Integer)
    st = qc_status_t(status)
    message = unsafe_string(qc_last_error())
    name = unsafe_string(qc_status_string(st))
    return QCError(st, name, message)
end

function Base.showerror(io::IO, e::QCError)
    print(io, "QCError: ", e.name)
    if isempty(e.message)
        print(io, ": ", get(QC_STATUS_DESCRIPTIONS, e.status, "unknown status"))
    else
        print(io, ": ", e.message)
    end
end

"""
    check(status)

Return `nothing` for `QC_SUCCESS`, throw a [`QCError`](@ref) for anything
else. Call it straight after the `qc_*` call, on the same task, before
anything that could yield.
"""
function check(status::Integer)
    status == QC_SUCCESS && return nothing
    throw(QCError(status))
end

# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

# Element types a collective or codec accepts, and their qc_dtype_t.
const QCFloat = Union{Float32,Float16}
_dtype(::Type{Float32}) = QC_DTYPE_FLOAT32
_dtype(::Type{Float16}) = QC_DTYPE_FLOAT16

# A string for a `const char*` argument: a String without embedded NULs.
function _cstring_arg(s::AbstractString, what::AbstractString)
    str = String(s)
    if occursin('\0', str)
        throw(ArgumentError("$what: the string $(repr(str)) contains a NUL character"))
    end
    return str
end
_cstring_arg(s::Symbol, what::AbstractString) = _cstring_arg(String(s), what)

# An optional layer name: `nothing` stands for NULL ("*" for qc).
_layer_arg(::Nothing, what::AbstractString) = nothing
_layer_arg(s::Union{AbstractString,Symbol}, what::AbstractString) = _cstring_arg(s, what)

# What to hand to a Cstring parameter: the String, or C_NULL for nothing.
_cstring_or_null(::Nothing) = C_NULL
_cstring_or_null(s::String) = s

# A raw Cstring for use inside GC.@preserve (the String must stay preserved).
_cstring_ptr(::Nothing) = Cstring(C_NULL)
_cstring_ptr(s::String) = Base.unsafe_convert(Cstring, s)

# Collectives block the calling thread until every peer has arrived. Julia's
# garbage collector stops the world and waits for every thread to reach a
# safepoint; a thread blocked inside C never does. With the ranks of a local
# group on several Julia threads, a collection started by one rank while
# another is blocked would wait for it forever, and the blocked rank waits
# for the rank that is stuck in the collection. So blocking calls run in
# the GC-safe state (as `@ccall gc_safe=true` does on Julia >= 1.12). Between
# enter and leave only bits values are used: every argument is converted
# beforehand, the objects behind pointers are GC.@preserve'd, and nothing
# allocates or throws.
@inline _gc_safe_enter() = ccall(:jl_gc_safe_enter, Int8, ())
@inline _gc_safe_leave(state::Int8) = ccall(:jl_gc_safe_leave, Cvoid, (Int8,), state)

# `@gc_safe call`: evaluates one blocking C call (its arguments already bits
# values, see above) in the GC-safe state and gives its status.
macro gc_safe(call)
    quote
        local state = _gc_safe_enter()
        local status = $(esc(call))
        _gc_safe_leave(state)
        status
    end
end

# Buffers are strided arrays (Array, contiguous views such as view(v, 1:n),
# reshapes) whose elements are contiguous in memory, checked at run time.
function _is_contiguous(a::StridedArray)
    length(a) <= 1 && return true
    expected = 1
    for d in 1:ndims(a)
        size(a, d) == 1 && continue
        stride(a, d) == expected || return false
        expected *= size(a, d)
    end
    return true
end

function _check_contiguous(a::StridedArray, what::AbstractString)
    _is_contiguous(a) ||
        throw(ArgumentError("$what: the array's elements are not contiguous in memory (use copy)"))
    return nothing
end

# Base address of a buffer as Ptr{Cvoid}; only inside GC.@preserve.
@inline _ptr(a::StridedArray) = Ptr{Cvoid}(pointer(a))

# sendbuf and recvbuf may be the same memory (in place) but may not
# otherwise overlap (qc.h). Also checks that both are contiguous.
function _check_overlap(a::StridedArray, b::StridedArray, what::AbstractString)
    _check_contiguous(a, what * ": sendbuf")
    _check_contiguous(b, what * ": recvbuf")
    GC.@preserve a b begin
        pa = UInt(pointer(a))
        pb = UInt(pointer(b))
        na = UInt(length(a) * sizeof(eltype(a)))  # sizeof(a) is the wrapper's size for a view
        nb = UInt(length(b) * sizeof(eltype(b)))
        if pa != pb && na > 0 && nb > 0 && pa < pb + nb && pb < pa + na
            throw(ArgumentError("$what: sendbuf and recvbuf overlap without being the same buffer"))
        end
    end
    return nothing
end

function _nonnegative(n::Integer, what::AbstractString)
    n >= 0 || throw(ArgumentError("$what must be >= 0, got $n"))
    return n
end

# ---------------------------------------------------------------------------
# Enumerations as symbols
# ---------------------------------------------------------------------------

const _CODECS = Dict{Symbol,Cint}(
    :none => QC_CODEC_NONE, :fp16 => QC_CODEC_FP16, :bf16 => QC_CODEC_BF16,
    :minmax => QC_CODEC_MINMAX, :qsgd => QC_CODEC_QSGD,
    :global_linear => QC_CODEC_GLOBAL_LINEAR, :global_exp => QC_CODEC_GLOBAL_EXP,
    :onebit => QC_CODEC_ONEBIT, :topk => QC_CODEC_TOPK,
    :mxfp8 => QC_CODEC_MXFP8, :mxfp8_e5m2 => QC_CODEC_MXFP8_E5M2, :mxfp6 => QC_CODEC_MXFP6,
    :mxfp6_e3m2 => QC_CODEC_MXFP6_E3M2, :mxfp4 => QC_CODEC_MXFP4, :mxint8 => QC_CODEC_MXINT8,
    :nvfp4 => QC_CODEC_NVFP4)
const _ROUNDINGS = Dict{Symbol,Cint}(
    :nearest_even => QC_ROUND_NEAREST_EVEN, :stochastic => QC_ROUND_STOCHASTIC,
    :auto => QC_ROUND_AUTO)
const _SCALES = Dict{Symbol,Cint}(
    :auto => QC_SCALE_AUTO, :l2 => QC_SCALE_L2, :max_abs => QC_SCALE_MAX_ABS)
const _ALGORITHMS = Dict{Symbol,Cint}(
    :auto => QC_ALGO_AUTO, :ring => QC_ALGO_RING,
    :recursive_doubling => QC_ALGO_RECURSIVE_DOUBLING, :sra => QC_ALGO_SRA,
    :tree => QC_ALGO_TREE, :native => QC_ALGO_NATIVE)
const _OPS = Dict{Symbol,Cint}(:sum => QC_OP_SUM, :avg => QC_OP_AVG)
const _ADAPT_METHODS = Dict{Symbol,Cint}(:kmeans => QC_ADAPT_KMEANS, :linear => QC_ADAPT_LINEAR)

function _keys_text(table::Dict{Symbol,Cint})
    return join((repr(k) for k in sort!(collect(keys(table)))), ", ")
end

# A symbol, string or integer (e.g. QC.QC_CODEC_MINMAX) -> the C value.
function _enum_value(x::Symbol, table::Dict{Symbol,Cint}, what::AbstractString)
    v = get(table, x, nothing)
    v === nothing && throw(ArgumentError("$what: $(repr(x)) is not one of $(_keys_text(table))"))
    return v
end
_enum_value(x::AbstractString, table::Dict{Symbol,Cint}, what::AbstractString) =
    _enum_value(Symbol(lowercase(x)), table, what)
function _enum_value(x::Integer, table::Dict{Symbol,Cint}, what::AbstractString)
    if x isa Bool || !(x in values(table))
        throw(ArgumentError("$what: $x is not a valid value (use one of $(_keys_text(table)))"))
    end
    return Cint(x)
end

# The C value -> its symbol (or the integer for a value this package does not know).
function _enum_name(v::Integer, table::Dict{Symbol,Cint})
    for (k, x) in table
        x == v && return k
    end
    return Int(v)
end

_op(op::Union{Symbol,AbstractString,Integer}) = _enum_value(op, _OPS, "op")
_op(::typeof(+)) = QC_OP_SUM

# ---------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------

"""
    Policy(; codec=:none, bits=4, bucket_size=128, rounding=:auto,
             algorithm=:auto, error_feedback=false, group_size=8,
             topk_ratio=0.01f0, scale_update_period=1, seed=0,
             min_compress_bytes=16384, scale=:auto)
    Policy(p::Policy; changes...)

How one layer's data is compressed and reduced (`qc_policy_t`). The defaults
are those of the generated `qc_policy_t()` (qc.h's `QC_POLICY_INIT`), so
they cannot drift from the C header.

- `codec`: `:none`, `:fp16`, `:bf16`, `:minmax`, `:qsgd`, `:global_linear`,
  `:global_exp`, `:onebit`, `:topk`, or a block-scaled format: `:mxfp8`,
  `:mxfp8_e5m2`, `:mxfp6`, `:mxfp6_e3m2`, `:mxfp4`, `:mxint8`, `:nvfp4`
  (whose element width and block are the format's) (or a constant such as
  `QC.QC_CODEC_MINMAX`); `rounding`: `:auto` (stochastic for the global
  codecs, nearest for the rest), `:nearest_even` or `:stochastic`;
  `algorithm`: `:auto`, `:ring`, `:recursive_doubling`, `:sra`, `:tree` or
  `:native`.
- `min_compress_bytes`: messages smaller than this go uncompressed; set it
  to 0 to compress everything (e.g. in tests with small arrays).
- `scale`: the global codecs' shared scale, `:auto` (max-abs), `:l2` or
  `:max_abs`.

The policy is validated by the library when it is constructed: an invalid
field (say `bits=0`) throws a [`QCError`](@ref) with status
`QC_ERROR_INVALID_ARGUMENT`. `Policy(p; bits=2)` copies `p` with changes.
"""
struct Policy
    codec::qc_codec_t
    bits::Int
    bucket_size::Int
    rounding::qc_rounding_t
    algorithm::qc_algorithm_t
    error_feedback::Bool
    group_size::Int
    topk_ratio::Float32
    scale_update_period::Int
    seed::UInt64
    min_compress_bytes::Int
    scale::qc_scale_t
end

# The C defaults (QC_POLICY_INIT), from the generated layer; no library call.
const _C_DEFAULT_POLICY = qc_policy_t()

function _int_field(x::Integer, what::AbstractString, lo::Integer, hi::Integer)
    if x isa Bool || !(lo <= x <= hi)
        throw(ArgumentError("Policy: $what = $x is out of range [$lo, $hi]"))
    end
    return Int(x)
end

function Policy(;
    codec = _C_DEFAULT_POLICY.codec,
    bits::Integer = _C_DEFAULT_POLICY.bits,
    bucket_size::Integer = _C_DEFAULT_POLICY.bucket_size,
    rounding = _C_DEFAULT_POLICY.rounding,
    algorithm = _C_DEFAULT_POLICY.algorithm,
    error_feedback::Union{Bool,Integer} = !iszero(_C_DEFAULT_POLICY.error_feedback),
    group_size::Integer = _C_DEFAULT_POLICY.group_size,
    topk_ratio::Real = _C_DEFAULT_POLICY.topk_ratio,
    scale_update_period::Integer = _C_DEFAULT_POLICY.scale_update_period,
    seed::Integer = _C_DEFAULT_POLICY.seed,
    min_compress_bytes::Integer = _C_DEFAULT_POLICY.min_compress_bytes,
    scale = _C_DEFAULT_POLICY.scale,
)
    cmax = typemax(Cint)
    cmin = typemin(Cint)
    if !(error_feedback isa Bool) && !(error_feedback == 0 || error_feedback == 1)
        throw(ArgumentError("Policy: error_feedback = $error_feedback must be true/false (or 0/1)"))
    end
    if !(0 <= seed <= typemax(UInt64))
        throw(ArgumentError("Policy: seed = $seed is out of range [0, $(typemax(UInt64))]"))
    end
    p = Policy(
        _enum_value(codec, _CODECS, "Policy: codec"),
        _int_field(bits, "bits", cmin, cmax),
        _int_field(bucket_size, "bucket_size", cmin, cmax),
        _enum_value(rounding, _ROUNDINGS, "Policy: rounding"),
        _enum_value(algorithm, _ALGORITHMS, "Policy: algorithm"),
        Bool(error_feedback),
        _int_field(group_size, "group_size", cmin, cmax),
        Float32(topk_ratio),
        _int_field(scale_update_period, "scale_update_period", cmin, cmax),
        UInt64(seed),
        _int_field(min_compress_bytes, "min_compress_bytes", 0, typemax(Int)),
        _enum_value(scale, _SCALES, "Policy: scale"),
    )
    validate(p)
    return p
end

function Policy(p::Policy; changes...)
    fields = (codec = p.codec, bits = p.bits, bucket_size = p.bucket_size,
              rounding = p.rounding, algorithm = p.algorithm,
              error_feedback = p.error_feedback, group_size = p.group_size,
              topk_ratio = p.topk_ratio, scale_update_period = p.scale_update_period,
              seed = p.seed, min_compress_bytes = p.min_compress_bytes, scale = p.scale)
    return Policy(; merge(fields, values(changes))...)
end

"""
    Policy(c::QC.qc_policy_t)

The Julia policy of a C one (e.g. one read back with `qc_comm_get_layer_policy`).
Not validated.
"""
function Policy(c::qc_policy_t)
    return Policy(c.codec, Int(c.bits), Int(c.bucket_size), c.rounding, c.algorithm,
                  !iszero(c.error_feedback), Int(c.group_size), c.topk_ratio,
                  Int(c.scale_update_period), c.seed, Int(c.min_compress_bytes), c.scale)
end

"""
    QC.qc_policy_t(p::Policy)

The C struct for `p`, with `struct_size = sizeof(qc_policy_t)`.
"""
function qc_policy_t(p::Policy)
    return qc_policy_t(;
        codec = p.codec,
        bits = Cint(p.bits),
        bucket_size = Cint(p.bucket_size),
        rounding = p.rounding,
        algorithm = p.algorithm,
        error_feedback = Cint(p.error_feedback),
        group_size = Cint(p.group_size),
        topk_ratio = Cfloat(p.topk_ratio),
        scale_update_period = Cint(p.scale_update_period),
        seed = p.seed,
        min_compress_bytes = Csize_t(p.min_compress_bytes),
        scale = p.scale,
    )
end
Base.convert(::Type{qc_policy_t}, p::Policy) = qc_policy_t(p)

"""
    QC.validate(p::Policy) -> p

Check `p` with the library's rules (`qc_codec_encoded_size` validates its
policy); throw a [`QCError`](@ref) (`QC_ERROR_INVALID_ARGUMENT`) naming the
first invalid field. The keyword constructor calls it.
"""
function validate(p::Policy)
    ref = Ref(qc_policy_t(p))
    bytes = Ref{Csize_t}(0)
    check(qc_codec_encoded_size(ref, 0, bytes))
    return p
end

function Base.show(io::IO, p::Policy)
    print(io, "QC.Policy(codec=", repr(_enum_name(p.codec, _CODECS)),
          ", bits=", p.bits, ", bucket_size=", p.bucket_size,
          ", rounding=", repr(_enum_name(p.rounding, _ROUNDINGS)),
          ", algorithm=", repr(_enum_name(p.algorithm, _ALGORITHMS)),
          ", error_feedback=", p.error_feedback, ", group_size=", p.group_size,
          ", topk_ratio=", p.topk_ratio, ", scale_update_period=", p.scale_update_period,
          ", seed=", p.seed, ", min_compress_bytes=", p.min_compress_bytes,
          ", scale=", repr(_enum_name(p.scale, _SCALES)), ")")
end

# A policy argument that may be `nothing` (NULL in C).
_policy_ref(::Nothing) = nothing
_policy_ref(p::Policy) = Ref(qc_policy_t(p))
_policy_ptr_arg(::Nothing) = C_NULL
_policy_ptr_arg(r::Base.RefValue{qc_policy_t}) = r

# ---------------------------------------------------------------------------
# Communicators
# ---------------------------------------------------------------------------

"""
    Comm

A qc communicator: one rank of a group. Make one with
[`local_comms`](@ref) (threads of this process), or over MPI with
`QC.Comm(mpicomm::MPI.Comm; timeout=300.0)` once MPI.jl is loaded (the
package extension QCMPIExt).

A communicator must be released with `close(comm)`. There is deliberately
no finalizer: a finalizer runs at an arbitrary time on an arbitrary
thread, possibly after `MPI.Finalize()`, and releasing a communicator over
MPI must happen before that. Using a closed communicator throws an
`InvalidStateException`; `close` on a closed one does nothing.

A communicator is used by one task at a time. The ranks of a local group
must each be driven from their own task on their own thread (start Julia
with `--threads=N`, N at least the group size): a collective blocks its
thread until every rank has made the same call.
"""
mutable struct Comm
    handle::qc_comm_t
    transport::Symbol
end

# Without MPI.jl loaded, say how to get the MPI constructor.
function Comm(x; kwargs...)
    throw(ArgumentError("QC.Comm($(typeof(x))): no such constructor. For a communicator over " *
                        "MPI, load MPI.jl first (`using MPI`; the QCMPIExt extension adds " *
                        "QC.Comm(::MPI.Comm)); for threads of this process use QC.local_comms(n)."))
end

Base.isopen(c::Comm) = c.handle != C_NULL

function _handle(c::Comm)
    h = c.handle
    h == C_NULL && throw(InvalidStateException("QC.Comm: the communicator is closed", :closed))
    return h
end

# Lets a Comm be passed straight to the generated qc_* functions.
Base.cconvert(::Type{qc_comm_t}, c::Comm) = c
Base.unsafe_convert(::Type{qc_comm_t}, c::Comm) = _handle(c)

"""
    close(comm::Comm)

Release the communicator (`qc_comm_destroy`, a local operation that does
not wait for peers). Peers of a local group that wait for this rank fail
with `QC_ERROR_TRANSPORT`. A communicator over MPI must be closed before
`MPI.Finalize()`. Closing twice is a no-op.
"""
function Base.close(c::Comm)
    h = c.handle
    h == C_NULL && return nothing
    c.handle = C_NULL
    check(qc_comm_destroy(h))
    return nothing
end

"""
    local_comms(n; timeout=300.0) -> Vector{Comm}

An in-process group of `n` communicators, ranks `0:n-1`
(`qc_comm_create_local_with_config`). Drive each from its own task on its
own thread (`Threads.@spawn`, Julia started with `--threads` >= n): a
collective blocks until every rank of the group has made the same call, or
fails with `QC_ERROR_TIMEOUT` after `timeout` seconds. Close each with
`close`.
"""
function local_comms(n::Integer; timeout::Real = 300.0)
    n >= 1 || throw(ArgumentError("local_comms: n must be >= 1, got $n"))
    n <= typemax(Cint) || throw(ArgumentError("local_comms: n = $n is too large"))
    timeout > 0 || throw(ArgumentError("local_comms: timeout must be > 0, got $timeout"))
    config = Ref(qc_comm_config_t(; transport = QC_TRANSPORT_LOCAL, timeout_seconds = Float64(timeout)))
    handles = fill(qc_comm_t(C_NULL), Int(n))
    check(qc_comm_create_local_with_config(Cint(n), config, handles))
    return [Comm(h, :local) for h in handles]
end

"""
    QC.rank(comm) -> Int

This communicator's rank, 0-based (as in qc and MPI).
"""
function rank(c::Comm)
    r = Ref{Cint}(0)
    check(qc_comm_rank(_handle(c), r))
    return Int(r[])
end

"""
    nranks(comm) -> Int

The number of ranks in the communicator's group.
"""
function nranks(c::Comm)
    r = Ref{Cint}(0)
    check(qc_comm_size(_handle(c), r))
    return Int(r[])
end

"""
    QC.async_error(comm) -> Union{Nothing, QCError}

The failure that broke the communicator's group, or `nothing` while it is
healthy (`qc_comm_get_async_error`). The error is returned, not thrown. Safe
to call from another task or thread while a collective is blocked; a broken
group stays broken, so close the communicator and create a new one.
"""
function async_error(c::Comm)
    e = Ref{qc_status_t}(QC_SUCCESS)
    check(qc_comm_get_async_error(_handle(c), e))
    # On a failure the library set qc_last_error() to its message; read it
    # before anything can yield.
    return e[] == QC_SUCCESS ? nothing : QCError(e[])
end

function Base.show(io::IO, c::Comm)
    if isopen(c)
        print(io, "QC.Comm(rank ", rank(c), " of ", nranks(c), ", ", c.transport, ")")
    else
        print(io, "QC.Comm(closed, ", c.transport, ")")
    end
end

"""
    QC.stats(comm) -> NamedTuple

This rank's counters since the communicator was created:
`(calls, logical_bytes, wire_bytes, codec_seconds, transport_seconds,
codec_seconds_in_flight)`; the last is the codec time that overlapped transfers.
"""
function stats(c::Comm)
    r = Ref(qc_stats_t())
    check(qc_comm_get_stats(_handle(c), r))
    s = r[]
    return (calls = Int(s.calls), logical_bytes = Int(s.logical_bytes),
            wire_bytes = Int(s.wire_bytes), codec_seconds = Float64(s.codec_seconds),
            transport_seconds = Float64(s.transport_seconds),
            codec_seconds_in_flight = Float64(s.codec_seconds_in_flight))
end

"""
    QC.layer_stats(comm, layer=nothing) -> NamedTuple

This rank's counters for one layer name (`nothing` means "*"):
`(calls, count, logical_bytes, wire_bytes, codec_seconds,
transport_seconds, last_rel_error, mean_sq_norm)`; all zero for a name no
call has used.
"""
function layer_stats(c::Comm, layer::Union{Nothing,AbstractString,Symbol} = nothing)
    name = _layer_arg(layer, "layer_stats: layer")
    r = Ref(qc_layer_stats_t())
    check(qc_comm_get_layer_stats(_handle(c), _cstring_or_null(name), r))
    s = r[]
    return (calls = Int(s.calls), count = Int(s.count), logical_bytes = Int(s.logical_bytes),
            wire_bytes = Int(s.wire_bytes), codec_seconds = Float64(s.codec_seconds),
            transport_seconds = Float64(s.transport_seconds),
            last_rel_error = Float64(s.last_rel_error), mean_sq_norm = Float64(s.mean_sq_norm))
end

"""
    QC.layer_names(comm) -> Vector{String}

The layer names this rank's collectives have used, in byte order.
"""
function layer_names(c::Comm)
    h = _handle(c)
    count = Ref{Csize_t}(0)
    check(qc_comm_layer_count(h, count))
    names = String[]
    len = Ref{Csize_t}(0)
    for i in 0:Int(count[])-1
        check(qc_comm_layer_name(h, i, C_NULL, 0, len))
        buf = Vector{UInt8}(undef, Int(len[]) + 1)
        check(qc_comm_layer_name(h, i, buf, length(buf), len))
        push!(names, String(buf[1:Int(len[])]))
    end
    return names
end

"""
    set_layer_policy!(comm, pattern, policy::Policy) -> comm

Use `policy` for layers whose name matches `pattern` (an exact name, or a
glob with `*` and `?`; `"*"` is the default). Local: every rank must make
the same calls. Applies from the next collective on.
"""
function set_layer_policy!(c::Comm, pattern::Union{AbstractString,Symbol}, policy::Policy)
    pat = _cstring_arg(pattern, "set_layer_policy!: pattern")
    check(qc_comm_set_layer_policy(_handle(c), pat, Ref(qc_policy_t(policy))))
    return c
end

"""
    layer_policy(comm, layer=nothing) -> Policy

The policy that layer name `layer` resolves to (`nothing` means "*").
"""
function layer_policy(c::Comm, layer::Union{Nothing,AbstractString,Symbol} = nothing)
    name = _layer_arg(layer, "layer_policy: layer")
    r = Ref(qc_policy_t())
    check(qc_comm_get_layer_policy(_handle(c), _cstring_or_null(name), r))
    return Policy(r[])
end

"""
    policy_preset!(comm, name="cgx"; base=nothing) -> comm

Set a named group of layer policies (`qc_comm_apply_preset`). `"cgx"`: `base`
(or, for `nothing`, the policy now set for the pattern "*") for everything, with
`min_compress_bytes` at least 16 KiB, and codec none for biases and
normalisation layers. Local: every rank must make the same call.
"""
function policy_preset!(c::Comm, name::Union{AbstractString,Symbol} = "cgx";
                        base::Union{Nothing,Policy} = nothing)
    n = _cstring_arg(name, "policy_preset!: name")
    check(qc_comm_apply_preset(_handle(c), n, _policy_ptr_arg(_policy_ref(base))))
    return c
end

"""
    adapt_policies!(comm; method=:kmeans, alpha=2.0, allowed_bits=(2, 3, 4, 8)) -> NamedTuple

Choose a bit width per minmax/qsgd layer from the statistics collected so
far (`qc_comm_adapt_policies`; paper 003 §5). Collective: every rank must call
it after the same collectives. Returns the report `(layers,
predicted_error, error_budget, e4, predicted_bytes, bytes_at_4)`.
"""
function adapt_policies!(c::Comm; method = :kmeans, alpha::Real = 2.0,
                         allowed_bits = (2, 3, 4, 8))
    nb = length(allowed_bits)
    1 <= nb <= 8 || throw(ArgumentError("adapt_policies!: allowed_bits must have 1 to 8 entries, got $nb"))
    bits = collect(allowed_bits)
    for b in bits
        (b isa Integer && 1 <= b <= 8) ||
            throw(ArgumentError("adapt_policies!: allowed_bits entry $b is not a width in 1:8"))
    end
    tuple8 = ntuple(i -> i <= nb ? Cint(bits[i]) : Cint(0), 8)
    config = Ref(qc_adapt_config_t(; method = _enum_value(method, _ADAPT_METHODS, "adapt_policies!: method"),
                                   alpha = Float64(alpha), num_allowed = Cint(nb),
                                   allowed_bits = tuple8))
    report = Ref(qc_adapt_report_t())
    h = _handle(c)
    rc = GC.@preserve config report begin
        cp = Base.unsafe_convert(Ptr{qc_adapt_config_t}, config)
        rp = Base.unsafe_convert(Ptr{qc_adapt_report_t}, report)
        @gc_safe @inline qc_comm_adapt_policies(h, cp, rp)
    end
    check(rc)
    r = report[]
    return (layers = Int(r.layers), predicted_error = Float64(r.predicted_error),
            error_budget = Float64(r.error_budget), e4 = Float64(r.e4),
            predicted_bytes = Int(r.predicted_bytes), bytes_at_4 = Int(r.bytes_at_4))
end

# ---------------------------------------------------------------------------
# Error buffers
# ---------------------------------------------------------------------------

"""
    ErrorBuffer(comm::Union{Comm,Nothing}, count)

Residuals for error feedback on one tensor of `count` elements, all zero at
creation (`qc_error_buffer_create`). It belongs to the rank and group size
of `comm` (with `nothing`: to those of its first [`emulate_allreduce`](@ref)).
Pass it as `error_buffer=` to [`allreduce!`](@ref) with a policy that has
`error_feedback=true`.

Freeing it is purely local, so it has a finalizer; `close(eb)` frees it at
once. Using a closed buffer throws an `InvalidStateException`.
"""
mutable struct ErrorBuffer
    handle::qc_error_buffer_t
    count::Int
    function ErrorBuffer(comm::Union{Comm,Nothing}, count::Integer)
        _nonnegative(count, "ErrorBuffer: count")
        ch = comm === nothing ? qc_comm_t(C_NULL) : _handle(comm)
        ref = Ref{qc_error_buffer_t}(C_NULL)
        check(qc_error_buffer_create(ch, Csize_t(count), ref))
        eb = new(ref[], Int(count))
        return finalizer(_free_error_buffer!, eb)
    end
end

# Finalizer and close: free once, never throw (a finalizer must not).
function _free_error_buffer!(eb::ErrorBuffer)
    h = eb.handle
    if h != C_NULL
        eb.handle = C_NULL
        qc_error_buffer_destroy(h)
    end
    return nothing
end

"""
    close(eb::ErrorBuffer)

Free the residuals now (the finalizer would do it later). Idempotent.
"""
Base.close(eb::ErrorBuffer) = _free_error_buffer!(eb)
Base.isopen(eb::ErrorBuffer) = eb.handle != C_NULL
Base.length(eb::ErrorBuffer) = eb.count

function _handle(eb::ErrorBuffer)
    h = eb.handle
    h == C_NULL && throw(InvalidStateException("QC.ErrorBuffer: the error buffer is closed", :closed))
    return h
end

# The handle to pass for an optional error buffer of `n` elements.
_eb_handle(::Nothing, n::Integer, what::AbstractString) = qc_error_buffer_t(C_NULL)
function _eb_handle(eb::ErrorBuffer, n::Integer, what::AbstractString)
    eb.count == n || throw(DimensionMismatch("$what: the error buffer holds $(eb.count) residuals, the data $n elements"))
    return _handle(eb)
end

function Base.show(io::IO, eb::ErrorBuffer)
    print(io, "QC.ErrorBuffer(", eb.count, " residuals", isopen(eb) ? ")" : ", closed)")
end

"""
    reset!(eb::ErrorBuffer) -> eb

Set every residual to zero.
"""
function reset!(eb::ErrorBuffer)
    check(qc_error_buffer_reset(_handle(eb)))
    return eb
end

"""
    QC.norm(eb::ErrorBuffer) -> Float64

L2 norm of the residuals (computed in double precision).
"""
function norm(eb::ErrorBuffer)
    r = Ref{Cdouble}(0.0)
    check(qc_error_buffer_norm(_handle(eb), r))
    return Float64(r[])
end

"""
    QC.save(eb::ErrorBuffer) -> Vector{UInt8}

The residuals as a versioned, checksummed image (`56 + 4 * length(eb)`
bytes) for a checkpoint; restore it with [`load!`](@ref).
"""
function save(eb::ErrorBuffer)
    h = _handle(eb)
    nbytes = Ref{Csize_t}(0)
    check(qc_error_buffer_save(h, C_NULL, 0, nbytes))
    image = Vector{UInt8}(undef, Int(nbytes[]))
    check(qc_error_buffer_save(h, image, length(image), nbytes))
    return resize!(image, Int(nbytes[]))
end

"""
    load!(eb::ErrorBuffer, image::AbstractVector{UInt8}) -> eb

Restore residuals saved by [`QC.save`](@ref). A damaged or foreign image
throws `QC_ERROR_CORRUPT_DATA`; one for another element count, rank or
group size `QC_ERROR_MISMATCH`. The buffer is unchanged on failure.
"""
function load!(eb::ErrorBuffer, image::AbstractVector{UInt8})
    bytes = image isa Vector{UInt8} ? image : Vector{UInt8}(image)
    check(qc_error_buffer_load(_handle(eb), bytes, length(bytes)))
    return eb
end

"""
    QC.save(c::Comm) -> Vector{UInt8}

Every layer's call count (which keys its stochastic rounding), as a
versioned, checksummed image for a checkpoint (`qc_comm_save_state`);
restore it with [`load!`](@ref) on every rank of the resumed run.
"""
function save(c::Comm)
    h = _handle(c)
    nbytes = Ref{Csize_t}(0)
    check(qc_comm_save_state(h, C_NULL, 0, nbytes))
    image = Vector{UInt8}(undef, Int(nbytes[]))
    check(qc_comm_save_state(h, image, length(image), nbytes))
    return resize!(image, Int(nbytes[]))
end

"""
    load!(c::Comm, image::AbstractVector{UInt8}) -> c

Restore the layer call counts saved by [`QC.save`](@ref)`(c)`
(`qc_comm_load_state`). A damaged or foreign image throws
`QC_ERROR_CORRUPT_DATA`; the communicator is unchanged on failure.
"""
function load!(c::Comm, image::AbstractVector{UInt8})
    bytes = image isa Vector{UInt8} ? image : Vector{UInt8}(image)
    check(qc_comm_load_state(_handle(c), bytes, length(bytes)))
    return c
end

# ---------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------

"""
    allreduce!(comm, sendbuf, recvbuf; op=:sum, layer=nothing, error_buffer=nothing) -> recvbuf
    allreduce!(comm, buf; op=:sum, layer=nothing, error_buffer=nothing) -> buf

Reduce over all ranks (`qc_allreduce`); every rank gets the same result,
bit for bit. The buffers are arrays of `Float32` or `Float16` whose
elements are contiguous in memory (`Array`, `view(v, i:j)`, `reshape`; the
same element type and length; in place when one buffer is given). `op` is
`:sum` (or `+`) or `:avg`. `layer` names the policy that applies (see
[`set_layer_policy!`](@ref)); `nothing` means "*". `error_buffer` (an
[`ErrorBuffer`](@ref) of `length(sendbuf)`) keeps the residuals when the
policy has error feedback.

Blocks until every rank of the group has made the same call. After a
`QC_ERROR_MISMATCH`, `_TIMEOUT`, `_TRANSPORT` or `_CORRUPT_DATA` failure
the communicator is broken: close it.
"""
function allreduce!(comm::Comm, sendbuf::StridedArray{T}, recvbuf::StridedArray{T};
                    op = :sum, layer::Union{Nothing,AbstractString,Symbol} = nothing,
                    error_buffer::Union{Nothing,ErrorBuffer} = nothing) where {T<:QCFloat}
    n = length(sendbuf)
    length(recvbuf) == n ||
        throw(DimensionMismatch("allreduce!: recvbuf has $(length(recvbuf)) elements, sendbuf $n"))
    _check_overlap(sendbuf, recvbuf, "allreduce!")
    h = _handle(comm)
    opc = _op(op)
    name = _layer_arg(layer, "allreduce!: layer")
    ebh = _eb_handle(error_buffer, n, "allreduce!")
    dtype = _dtype(T)
    count = Csize_t(n)
    rc = GC.@preserve comm sendbuf recvbuf name error_buffer begin
        sp = _ptr(sendbuf)
        rp = _ptr(recvbuf)
        lp = _cstring_ptr(name)
        @gc_safe @inline qc_allreduce(h, sp, rp, count, dtype, opc, lp, ebh, C_NULL)
    end
    check(rc)
    return recvbuf
end

allreduce!(comm::Comm, buf::StridedArray{T}; kwargs...) where {T<:QCFloat} =
    allreduce!(comm, buf, buf; kwargs...)

"""
    allreduce_segments!(comm, sendbuf, recvbuf, counts, layers=nothing;
                        op=:sum, error_buffer=nothing) -> recvbuf

One fused allreduce over a flat buffer made of several layers
(`qc_allreduce_segments`): segment `i` is `counts[i]` elements with the
policy of `layers[i]` (`nothing`, or an entry `nothing`, means "*"); the
segments lie back to back and `sum(counts) == length(sendbuf)`. In place
when `sendbuf === recvbuf`. `error_buffer` covers the whole buffer.
"""
function allreduce_segments!(comm::Comm, sendbuf::StridedArray{T}, recvbuf::StridedArray{T},
                             counts::AbstractVector{<:Integer},
                             layers::Union{Nothing,AbstractVector} = nothing;
                             op = :sum, error_buffer::Union{Nothing,ErrorBuffer} = nothing) where {T<:QCFloat}
    n = length(sendbuf)
    length(recvbuf) == n ||
        throw(DimensionMismatch("allreduce_segments!: recvbuf has $(length(recvbuf)) elements, sendbuf $n"))
    _check_overlap(sendbuf, recvbuf, "allreduce_segments!")
    nseg = length(counts)
    segcounts = Csize_t[Csize_t(_nonnegative(k, "allreduce_segments!: each count")) for k in counts]
    total = sum(Int, counts; init = 0)
    total == n ||
        throw(DimensionMismatch("allreduce_segments!: the counts add up to $total, the buffers hold $n elements"))
    names = if layers === nothing
        nothing
    else
        length(layers) == nseg ||
            throw(DimensionMismatch("allreduce_segments!: $(length(layers)) layers for $nseg counts"))
        Union{Nothing,String}[_layer_arg(l, "allreduce_segments!: layer") for l in layers]
    end
    h = _handle(comm)
    opc = _op(op)
    ebh = _eb_handle(error_buffer, n, "allreduce_segments!")
    dtype = _dtype(T)
    cstrs = names === nothing ? nothing : Vector{Cstring}(undef, nseg)
    rc = GC.@preserve comm sendbuf recvbuf segcounts names cstrs error_buffer begin
        if cstrs !== nothing
            for i in 1:nseg
                cstrs[i] = _cstring_ptr(names[i])
            end
        end
        lp = cstrs === nothing ? Ptr{Cstring}(C_NULL) : pointer(cstrs)
        cp = pointer(segcounts)
        sp = _ptr(sendbuf)
        rp = _ptr(recvbuf)
        nsegments = Csize_t(nseg)
        @gc_safe @inline qc_allreduce_segments(h, sp, rp, nsegments, cp, lp, dtype, opc, ebh, C_NULL)
    end
    check(rc)
    return recvbuf
end

"""
    alltoall!(comm, sendbuf, recvbuf; layer=nothing) -> recvbuf
    alltoall!(comm, buf; layer=nothing) -> buf

Every rank sends block `j` of `sendbuf` (`length(sendbuf) ÷ nranks(comm)`
elements) to rank `j` and receives rank `i`'s block into block `i` of
`recvbuf` (`qc_alltoall`); each block is encoded with the layer's codec.
The length must be a multiple of the number of ranks.
"""
function alltoall!(comm::Comm, sendbuf::StridedArray{T}, recvbuf::StridedArray{T};
                   layer::Union{Nothing,AbstractString,Symbol} = nothing) where {T<:QCFloat}
    n = length(sendbuf)
    length(recvbuf) == n ||
        throw(DimensionMismatch("alltoall!: recvbuf has $(length(recvbuf)) elements, sendbuf $n"))
    _check_overlap(sendbuf, recvbuf, "alltoall!")
    nr = nranks(comm)
    n % nr == 0 ||
        throw(DimensionMismatch("alltoall!: $n elements are not a multiple of the $nr ranks"))
    h = _handle(comm)
    name = _layer_arg(layer, "alltoall!: layer")
    dtype = _dtype(T)
    per_rank = Csize_t(div(n, nr))
    rc = GC.@preserve comm sendbuf recvbuf name begin
        sp = _ptr(sendbuf)
        rp = _ptr(recvbuf)
        lp = _cstring_ptr(name)
        @gc_safe @inline qc_alltoall(h, sp, rp, per_rank, dtype, lp, C_NULL)
    end
    check(rc)
    return recvbuf
end

alltoall!(comm::Comm, buf::StridedArray{T}; kwargs...) where {T<:QCFloat} =
    alltoall!(comm, buf, buf; kwargs...)

# ---------------------------------------------------------------------------
# Codecs on their own
# ---------------------------------------------------------------------------

"""
    QC.encoded_size(policy, count) -> Int

Upper bound on the bytes [`QC.encode`](@ref) writes for `count` elements.
"""
function encoded_size(policy::Policy, count::Integer)
    _nonnegative(count, "encoded_size: count")
    bytes = Ref{Csize_t}(0)
    check(qc_codec_encoded_size(Ref(qc_policy_t(policy)), count, bytes))
    return Int(bytes[])
end

"""
    QC.encode(x, policy::Policy) -> Vector{UInt8}

Encode `x` (a contiguous array of `Float32` or `Float16`) with the
policy's codec into a self-describing message (a 32-byte "QCWF" header and
the payload).
"""
function encode(x::StridedArray{T}, policy::Policy) where {T<:QCFloat}
    _check_contiguous(x, "encode: x")
    pref = Ref(qc_policy_t(policy))
    bound = Ref{Csize_t}(0)
    check(qc_codec_encoded_size(pref, length(x), bound))
    message = Vector{UInt8}(undef, Int(bound[]))
    written = Ref{Csize_t}(0)
    GC.@preserve x begin
        check(qc_codec_encode(pref, _ptr(x), length(x), _dtype(T), message, length(message), written))
    end
    return resize!(message, Int(written[]))
end

"""
    QC.decode(message, count, T=Float32) -> Vector{T}
    QC.decode!(out::StridedArray{T}, message) -> out

Decode a message from [`QC.encode`](@ref) into `count` elements of `T`
(`Float32` or `Float16`). A count that differs from the message's throws
`QC_ERROR_MISMATCH`; a damaged message `QC_ERROR_CORRUPT_DATA`.
"""
function decode(message::AbstractVector{UInt8}, count::Integer, ::Type{T} = Float32) where {T<:QCFloat}
    _nonnegative(count, "decode: count")
    return decode!(Vector{T}(undef, Int(count)), message)
end

function decode!(out::StridedArray{T}, message::AbstractVector{UInt8}) where {T<:QCFloat}
    _check_contiguous(out, "decode!: out")
    bytes = message isa Vector{UInt8} ? message : Vector{UInt8}(message)
    GC.@preserve out begin
        check(qc_codec_decode(bytes, length(bytes), _ptr(out), length(out), _dtype(T)))
    end
    return out
end

# ---------------------------------------------------------------------------
# Emulation: N virtual ranks in one call
# ---------------------------------------------------------------------------

# One buffer per rank: contiguous strided arrays of one element type
# (Float32 or Float16) and one length. Returns (length, element type).
function _same_shape(sendbufs::AbstractVector, what::AbstractString)
    isempty(sendbufs) && throw(ArgumentError("$what: expected one buffer per rank, got none"))
    length(sendbufs) <= typemax(Cint) || throw(ArgumentError("$what: too many ranks"))
    x1 = first(sendbufs)
    (x1 isa StridedArray && eltype(x1) in (Float32, Float16)) ||
        throw(ArgumentError("$what: buffers must be arrays of Float32 or Float16, got $(typeof(x1))"))
    T = eltype(x1)
    n = length(x1)
    for (i, x) in enumerate(sendbufs)
        (x isa StridedArray && eltype(x) === T) ||
            throw(ArgumentError("$what: buffer $i is a $(typeof(x)); every buffer must be an array of $T"))
        length(x) == n ||
            throw(DimensionMismatch("$what: buffer $i has $(length(x)) elements, buffer 1 has $n"))
        _check_contiguous(x, "$what: buffer $i")
    end
    return n, T
end

"""
    emulate_allreduce(policy, sendbufs; op=:sum, error_buffers=nothing, layer=nothing,
                      call_index=0) -> Vector

Run one allreduce over `length(sendbufs)` virtual ranks in this process
(`qc_emulate_allreduce`): rank `i`'s input is `sendbufs[i]` (contiguous
arrays of `Float32` or `Float16`, one element type and length for all). Returns the outputs, one new
array per rank. The result is bit-identical to call `call_index` (0: the
first) of `layer` (`nothing`: "*") in a real run of the same inputs, policy
and residuals. `error_buffers`: `nothing`, or one [`ErrorBuffer`](@ref) (or
`nothing`) per rank.
"""
function emulate_allreduce(policy::Policy, sendbufs::AbstractVector;
                           op = :sum, error_buffers::Union{Nothing,AbstractVector} = nothing,
                           layer::Union{Nothing,AbstractString,Symbol} = nothing,
                           call_index::Integer = 0)
    n, T = _same_shape(sendbufs, "emulate_allreduce")
    name = _layer_arg(layer, "emulate_allreduce: layer")
    index = UInt64(call_index)
    nr = length(sendbufs)
    opc = _op(op)
    ehs = if error_buffers === nothing
        nothing
    else
        length(error_buffers) == nr ||
            throw(DimensionMismatch("emulate_allreduce: $(length(error_buffers)) error buffers for $nr ranks"))
        qc_error_buffer_t[_eb_handle(e, n, "emulate_allreduce") for e in error_buffers]
    end
    outs = [similar(x) for x in sendbufs]
    sps = Vector{Ptr{Cvoid}}(undef, nr)
    rps = Vector{Ptr{Cvoid}}(undef, nr)
    pref = Ref(qc_policy_t(policy))
    dtype = _dtype(T)
    rc = GC.@preserve sendbufs outs sps rps ehs error_buffers pref begin
        for i in 1:nr
            sps[i] = _ptr(sendbufs[i])
            rps[i] = _ptr(outs[i])
        end
        ep = ehs === nothing ? Ptr{qc_error_buffer_t}(C_NULL) : pointer(ehs)
        pp = Base.unsafe_convert(Ptr{qc_policy_t}, pref)
        spp = pointer(sps)
        rpp = pointer(rps)
        nranks_c = Cint(nr)
        count = Csize_t(n)
        lp = _cstring_or_null(name)
        @gc_safe @inline qc_emulate_allreduce(nranks_c, spp, rpp, count, dtype, opc, lp, index, pp, ep)
    end
    check(rc)
    return outs
end

"""
    emulate_alltoall(policy, sendbufs; layer=nothing, call_index=0) -> Vector

Run one alltoall over `length(sendbufs)` virtual ranks
(`qc_emulate_alltoall`), as call `call_index` of `layer` (see
[`emulate_allreduce`](@ref)); each buffer holds one equal block per rank.
Returns the outputs, one new array per rank.
"""
function emulate_alltoall(policy::Policy, sendbufs::AbstractVector;
                          layer::Union{Nothing,AbstractString,Symbol} = nothing,
                          call_index::Integer = 0)
    n, T = _same_shape(sendbufs, "emulate_alltoall")
    name = _layer_arg(layer, "emulate_alltoall: layer")
    index = UInt64(call_index)
    nr = length(sendbufs)
    n % nr == 0 ||
        throw(DimensionMismatch("emulate_alltoall: $n elements are not a multiple of the $nr ranks"))
    outs = [similar(x) for x in sendbufs]
    sps = Vector{Ptr{Cvoid}}(undef, nr)
    rps = Vector{Ptr{Cvoid}}(undef, nr)
    pref = Ref(qc_policy_t(policy))
    dtype = _dtype(T)
    rc = GC.@preserve sendbufs outs sps rps pref begin
        for i in 1:nr
            sps[i] = _ptr(sendbufs[i])
            rps[i] = _ptr(outs[i])
        end
        pp = Base.unsafe_convert(Ptr{qc_policy_t}, pref)
        spp = pointer(sps)
        rpp = pointer(rps)
        nranks_c = Cint(nr)
        per_rank = Csize_t(div(n, nr))
        lp = _cstring_or_null(name)
        @gc_safe @inline qc_emulate_alltoall(nranks_c, spp, rpp, per_rank, dtype, lp, index, pp)
    end
    check(rc)
    return outs
end

end # module QC
