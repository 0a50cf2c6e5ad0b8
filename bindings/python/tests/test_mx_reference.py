"""An independent reference of qc's block-scaled codecs, checked against qc.

The codecs mxfp8, mxfp8_e5m2, mxfp6, mxfp6_e3m2, mxfp4, mxint8 (OCP MX v1.0)
and nvfp4 are implemented here from docs/wire-format.md alone (section 1 the
header, section 3 "Bit stream of codes" and "Block-scaled formats", section 4
"Random bits"), in numpy with float32 arithmetic wherever the document says
f32, and compared with qc.encode / qc.decode byte for byte.

The element rounding of the document (round_elem, "rounding by formula") is
checked against ml_dtypes' float32 -> small-float casts (round to nearest
even) over many values, so a mistake in this file's reading of the formula
shows up without qc. Stochastic rounding, which ml_dtypes cannot do, then
uses the same formula.

What ml_dtypes 0.6 does (checked; it matters for how the casts are used):
- float8_e4m3fn does not saturate: a float32 at or above the midpoint 464
  between 448 and the (missing) next value becomes NaN (0x7F / 0xFF), +-Inf
  becomes NaN too; values in (448, 464) round to 448 (0x7E).
- float8_e5m2 overflows to +-Inf (0x7C / 0xFC) from the midpoint 61440 up;
  NaN becomes 0x7E.
- float6_e2m3fn, float6_e3m2fn, float4_e2m1fn saturate: any finite overflow
  and +-Inf give +-largest; NaN (which these types lack) gives -0 (0x20,
  0x20, 0x08).
- float8_e8m0fnu: byte b is 2^(b - 127) (byte 0 is 2^-127), 0xFF is NaN;
  casting 0 or a negative value gives NaN (0xFF).
- Bit layout: viewed as uint8, the 6- and 4-bit types hold the code in the
  low 6 / 4 bits (sign at bit 5 / bit 3, magnitude below it) and the high
  bits are 0, the same layout as a qc element code. A uint8 with high bits
  set does not decode as the low bits would (e.g. 0x40 as float4_e2m1fn is
  -0), so only bytes with clean high bits are viewed as these types.
- The sign of zero is kept: -0.0 -> 0x80 (0x20, 0x08), and a negative value
  that rounds to zero gives the negative zero code, as the document says.
So reference (b) clamps q to +-largest before the cast, which makes the cast
saturate as the document's encoder does, for every format.

Running: PYTHONPATH=<build>/bindings/python python -m pytest test_mx_reference.py.
The tests that need qc skip when qc cannot be imported or does not know a
codec's name yet; those that need ml_dtypes skip without it.
"""

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

try:
    import qc
except ImportError:  # the reference tests still run
    qc = None

F32 = np.float32


# ---- formats (wire-format.md, "Block-scaled formats", the table) --------------


@dataclass(frozen=True)
class Fmt:
    codec: str
    codec_id: int
    bits: int
    emax: int
    emin: int  # FP only
    m: int  # mantissa bits, FP only
    largest: float
    block: int
    ml: Optional[str]  # ml_dtypes type of the element (None: mxint8)
    nan_codes: tuple = ()  # magnitudes that are NaN (decode only)
    inf_code: Optional[int] = None  # magnitude that is Inf (decode only)

    @property
    def is_int(self):
        return self.codec == "mxint8"

    @property
    def nvfp4(self):
        return self.codec == "nvfp4"


FORMATS = {
    f.codec: f
    for f in [
        Fmt("mxfp8", 9, 8, 8, -6, 3, 448.0, 32, "float8_e4m3fn", nan_codes=(0x7F,)),
        Fmt("mxfp8_e5m2", 10, 8, 15, -14, 2, 57344.0, 32, "float8_e5m2", nan_codes=(0x7D, 0x7E, 0x7F),
            inf_code=0x7C),
        Fmt("mxfp6", 11, 6, 2, 0, 3, 7.5, 32, "float6_e2m3fn"),
        Fmt("mxfp6_e3m2", 13, 6, 4, -2, 2, 28.0, 32, "float6_e3m2fn"),
        Fmt("mxfp4", 14, 4, 2, 0, 1, 6.0, 32, "float4_e2m1fn"),
        Fmt("mxint8", 12, 8, 0, 0, 0, 127 / 64, 32, None),
        Fmt("nvfp4", 15, 4, 2, 0, 1, 6.0, 16, "float4_e2m1fn"),
    ]
}
FP_FORMATS = [f for f in FORMATS.values() if not f.is_int]
E4M3 = FORMATS["mxfp8"]  # nvfp4's block scale


def magnitude_value(fmt, c):
    """Value of magnitude code(s) c (section "Element codes"); NaN/Inf codes included."""
    c = np.asarray(c, np.int64)
    M = 1 << fmt.m
    sub = c * 2.0 ** (fmt.emin - fmt.m)
    norm = (M + c % M) * np.exp2(fmt.emin + c // M - 1 - fmt.m)
    v = np.where(c < M, sub, norm)
    v = np.where(np.isin(c, fmt.nan_codes), np.nan, v)
    if fmt.inf_code is not None:
        v = np.where(c == fmt.inf_code, np.inf, v)
    return v.astype(F32)  # every value is exact in float32


def value_table(fmt):
    """float32 value of every element code 0 .. 2^bits - 1 (sign bit on top)."""
    codes = np.arange(1 << fmt.bits)
    if fmt.is_int:  # int8, c * 2^-6
        return (codes.astype(np.uint8).view(np.int8).astype(F32) * F32(2.0**-6)).astype(F32)
    sign = codes >> (fmt.bits - 1)
    mag = magnitude_value(fmt, codes & ((1 << (fmt.bits - 1)) - 1))
    return np.where(sign == 1, -mag, mag).astype(F32)


def largest_code(fmt):
    """The magnitude code of the format's largest finite value (the saturation code)."""
    mags = magnitude_value(fmt, np.arange(1 << (fmt.bits - 1)))
    c = int(np.flatnonzero(mags == F32(fmt.largest))[0])
    assert np.nanmax(np.where(np.isinf(mags), np.nan, mags)) == F32(fmt.largest)
    return c


# ---- random bits (section 4) ---------------------------------------------------

_M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def rng_keys(seed, rank=0, stream=0):
    h = splitmix64(seed ^ splitmix64(rank ^ splitmix64(stream)))
    return h & 0xFFFFFFFF, h >> 32


def _lowbias32(x):
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def random_bits(index, seed, rank=0, stream=0):
    k0, k1 = rng_keys(seed, rank, stream)
    i = np.asarray(index, np.uint64)
    lo = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (i >> np.uint64(32)).astype(np.uint32)
    return _lowbias32(_lowbias32(lo ^ np.uint32(k0)) ^ (hi ^ np.uint32(k1)))


def uniform(index, seed):
    """uniform(i) = (bits(i) >> 8) * 2^-24, float32 in [0, 1)."""
    return ((random_bits(index, seed) >> 8).astype(F32) * F32(2.0**-24)).astype(F32)


# ---- element rounding ("Rounding an element") ------------------------------------


def floor_log2(a):
    """floor(log2 a) for float32 a > 0 (exact, subnormals included)."""
    return np.frexp(np.asarray(a, F32))[1].astype(np.int64) - 1


def round_elem(fmt, q, u=None):
    """Element codes of the finite float32 values q: nearest even (u None) or
    stochastic floor(t + u) with the float32 u. (a), the document's formula."""
    q = np.asarray(q, F32)
    if fmt.is_int:  # c = clamp(round(q * 64), -127, 127), no sign split
        with np.errstate(over="ignore"):  # only far beyond the clamp
            t = q * F32(64.0)
        n = np.rint(t) if u is None else np.floor((t + np.asarray(u, F32)).astype(F32))
        return np.clip(n, -127, 127).astype(np.int64).astype(np.int8).view(np.uint8).astype(np.uint8)
    M = 1 << fmt.m
    # |q| far above largest only saturates; the bound keeps 2^(m - e) finite.
    a = np.minimum(np.abs(q), F32(2.0 ** (fmt.emax + 2)))
    e = np.where(a > 0, np.maximum(floor_log2(np.where(a > 0, a, F32(1))), fmt.emin), fmt.emin)
    t = np.ldexp(a, (fmt.m - e).astype(np.int32))  # exact: a power-of-two scaling into [0, 2M)
    assert t.dtype == F32
    if u is None:
        n = np.rint(t)
    else:
        n = np.floor((t + np.asarray(u, F32)).astype(F32))  # t + u: a float32 add (section 4)
    c = np.minimum((e - fmt.emin) * M + n.astype(np.int64), largest_code(fmt))
    return ((np.signbit(q).astype(np.int64) << (fmt.bits - 1)) | c).astype(np.uint8)


def round_elem_ml_dtypes(fmt, q):
    """(b): clamp to +-largest, then ml_dtypes' round-to-nearest-even cast."""
    import ml_dtypes

    lim = F32(fmt.largest)
    return np.clip(np.asarray(q, F32), -lim, lim).astype(getattr(ml_dtypes, fmt.ml)).view(np.uint8)


# ---- bit stream and header (sections 1 and 3) ----------------------------------------


def pack_codes(codes, bits):
    """Element i in bits [i q, (i+1) q), bit b in bit b mod 8 of byte b/8; high bits of the last byte 0."""
    codes = np.asarray(codes, np.uint8)
    stream = np.unpackbits(codes[:, None], axis=1, bitorder="little")[:, :bits].ravel()
    return np.packbits(stream, bitorder="little").tobytes()


def unpack_codes(data, count, bits):
    stream = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[: count * bits]
    return np.packbits(stream.reshape(count, bits), axis=1, bitorder="little").ravel()


HEADER = struct.Struct("<4sBBBBIIQQ")  # magic, version, codec, bits, dtype, bucket, flags, count, payload


def message(fmt, count, scale_bytes, codes, S=None, stochastic=False):
    payload = b""
    if fmt.nvfp4:
        payload += struct.pack("<f", S)
    payload += bytes(np.asarray(scale_bytes, np.uint8)) + pack_codes(codes, fmt.bits)
    head = HEADER.pack(b"QCWF", 1, fmt.codec_id, fmt.bits, 0, fmt.block, int(stochastic), count, len(payload))
    return head + payload


def n_blocks(fmt, count):
    return -(-count // fmt.block)


# ---- encoder -------------------------------------------------------------------------------


def reference_encode(fmt, x, stochastic=False, seed=42):
    """The message qc_codec_encode writes for the float32 values x."""
    z = np.asarray(x, F32).ravel()
    count, k = z.size, fmt.block
    nb = n_blocks(fmt, count)
    zb = np.zeros(nb * k, F32)
    zb[:count] = z
    zb = zb.reshape(nb, k)  # zero padding changes neither amax nor the non-finite test
    u = None
    if stochastic:  # uniform(index_base + i), index_base 0 in qc_codec_encode
        u = np.zeros(nb * k, F32)
        u[:count] = uniform(np.arange(count, dtype=np.uint64), seed)
        u = u.reshape(nb, k)
    bad = ~np.isfinite(zb).all(axis=1)
    absz = np.where(np.isfinite(zb), np.abs(zb), F32(0))
    amax = absz.max(axis=1) if nb else np.zeros(0, F32)
    with np.errstate(all="ignore"):
        if fmt.nvfp4:
            return _encode_nvfp4(fmt, z, zb, u, bad, amax, stochastic)
        # MX block scale (OCP MX v1.0 section 6.3)
        s = np.clip(floor_log2(np.where(amax > 0, amax, F32(1))) - fmt.emax, -127, 127)
        scale = (s + 127).astype(np.uint8)
        zero = (amax == 0) & ~bad
        scale[zero] = 0
        scale[bad] = 0xFF
        a = s >> 1  # arithmetic shift
        b = s - a
        q = (zb * np.exp2(-a).astype(F32)[:, None]) * np.exp2(-b).astype(F32)[:, None]
        assert q.dtype == F32
        q[bad | zero] = 0
        codes = round_elem(fmt, q, u)
        codes[bad | zero] = 0
    return message(fmt, count, scale, codes.ravel()[:count], stochastic=stochastic)


def _encode_nvfp4(fmt, z, zb, u, bad, amax, stochastic):
    fin = np.isfinite(z)
    amax_finite = np.abs(z[fin]).max() if fin.any() else F32(0)
    S = F32(amax_finite) / F32(2688)  # f32 division
    assert isinstance(S, np.float32)
    nb = zb.shape[0]
    scale = np.zeros(nb, np.uint8)
    codes = np.zeros(zb.shape, np.uint8)
    if S != 0:
        d = (amax / F32(6)) / S  # f32, per block
        assert d.dtype == F32
        scale = round_elem(E4M3, d)  # nearest even, saturating at 448, for either rounding
        x = magnitude_value(E4M3, scale) * S  # f32
        live = (x != 0) & ~bad
        q = zb / np.where(live, x, F32(1))[:, None]  # f32 division
        assert q.dtype == F32
        q[~live] = 0
        codes = round_elem(fmt, q, u)
        codes[~live] = 0
    scale[bad] = 0x7F
    codes[bad] = 0
    return message(fmt, z.size, scale, codes.ravel()[: z.size], S=float(S), stochastic=stochastic)


# ---- decoder -------------------------------------------------------------------------------


def reference_decode(data, count):
    """float32 values of a message; ValueError where the document's decoder refuses it."""
    if len(data) < 32:
        raise ValueError("short")
    magic, version, codec, bits, dtype, bucket, flags, n, plen = HEADER.unpack_from(data)
    fmt = {f.codec_id: f for f in FORMATS.values()}.get(codec)
    if magic != b"QCWF" or version != 1 or fmt is None or dtype != 0 or flags & ~1 or plen != len(data) - 32:
        raise ValueError("header")
    if n != count:
        raise ValueError("count")
    if bits != fmt.bits or bucket != fmt.block:
        raise ValueError("bits or bucket")
    nb = n_blocks(fmt, count)
    ncode = -(-count * bits // 8)
    off = 32
    S = None
    if fmt.nvfp4:
        (S,) = struct.unpack_from("<f", data, off)
        S = F32(S)
        off += 4
        if not np.isfinite(S) or S < 0:
            raise ValueError("nvfp4 S")
    if plen != (off - 32) + nb + ncode:
        raise ValueError("payload length")
    scale = np.frombuffer(data, np.uint8, nb, off)
    code_bytes = data[off + nb:]
    if count * bits % 8 and code_bytes[-1] >> (count * bits % 8):
        raise ValueError("unused high bits")
    codes = unpack_codes(code_bytes, count, bits)
    val = value_table(fmt)[codes]
    blk = np.arange(count) // fmt.block
    with np.errstate(all="ignore"):
        if fmt.nvfp4:
            if (scale & 0x80).any():
                raise ValueError("nvfp4 scale sign")
            x = (magnitude_value(E4M3, scale) * S).astype(F32)  # 0x7F: NaN
            out = val * x[blk]
        else:
            s = scale.astype(np.int64) - 127
            a = s >> 1
            b = s - a
            out = (val * np.exp2(a).astype(F32)[blk]) * np.exp2(b).astype(F32)[blk]
            out[scale[blk] == 0xFF] = np.nan
    assert out.dtype == F32
    return out


# ---- comparison helpers ----------------------------------------------------------------------


def describe_difference(fmt, got, want):
    if len(got) != len(want):
        return f"length {len(got)} != {len(want)}"
    i = next(j for j in range(len(got)) if got[j] != want[j])
    nb = n_blocks(fmt, HEADER.unpack_from(want)[7])
    meta = 32 + (4 if fmt.nvfp4 else 0)
    if i < 32:
        where = "header"
    elif i < meta:
        where = "nvfp4 S"
    elif i < meta + nb:
        where = f"scale byte of block {i - meta}"
    else:
        bit = (i - meta - nb) * 8
        where = f"code byte holding elements {bit // fmt.bits}..{(bit + 7) // fmt.bits}"
    return f"first difference at byte {i} ({where}): qc {got[i]:#04x}, reference {want[i]:#04x}"


def assert_same_floats(got, want, what):
    got = np.asarray(got, F32)
    want = np.asarray(want, F32)
    assert got.shape == want.shape, what
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), f"{what}: NaN at {np.flatnonzero(gn != wn)[:10]}"
    diff = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)) & ~gn)
    assert diff.size == 0, (f"{what}: {diff.size} values differ, first at {diff[0]}: "
                            f"qc {got[diff[0]]!r}, reference {want[diff[0]]!r}")


# ---- inputs ---------------------------------------------------------------------------------------


def golden_input():
    """tests/tools/golden_cases.h (every step exact in float32)."""
    i = np.arange(300)
    a = ((37 * i) % 101 - 50).astype(F32) / F32(16)
    b = F32(1) + (i % 7).astype(F32) / F32(8)
    x = (a * b).astype(F32)
    x[128:192] = 0.75
    x[299] = -0.0
    return x


def tie_input(fmt, k):
    """Blocks of [anchor, ties...]: the anchor makes the block's element scale
    2^k (nvfp4: the first block's anchor 2688 * 2^k makes S = 2^k, and a block
    anchor 6 * D * 2^k gives d = D, x = D * 2^k), the others lie exactly halfway
    between neighbouring element values, of both signs."""
    vals = value_table(fmt)
    mags = np.unique(np.abs(vals[np.isfinite(vals)])).astype(np.float64)
    mids = (mags[:-1] + mags[1:]) / 2
    mids = np.concatenate([mids, -mids])
    per = fmt.block - 1
    out = []
    for D in [448.0, 1.0, 0.5, 2.0**-6, 2.0**-9] if fmt.nvfp4 else [1.0]:  # nvfp4: E4M3 block scales
        for j in range(0, len(mids), per):
            chunk = list(mids[j : j + per] * D)
            out += [fmt.largest * D] + chunk + [0.0] * (per - len(chunk))
    return (np.array(out) * 2.0**k).astype(F32)


def near_largest_input(fmt, k):
    """Values at and just above the largest element after scaling (all with the same block scale)."""
    L = fmt.largest
    top = 2.0 ** (fmt.emax + 1)  # block scale stays 2^k below this
    v = [L, np.nextafter(F32(L), F32(np.inf)), (L + top) / 2, top * (1 - 2**-24), L * (1 + 2**-5), L * (1 + 2**-4)]
    v = [w for w in v if w < top]
    if fmt.nvfp4:
        # S = 1: a block whose amax/6 lies just above (or at the tie after) an E4M3 value, so q > 6 saturates
        blocks = [[2688.0] + [2688 * f for f in (0.999, 1.0, 0.5)]]
        for d in (1.0, 1.03, 1.0625, 1.06, 1.0626, 440.0, 447.9, 0.004, 0.0029296875):
            blocks.append([6 * d, -6 * d, 6 * d * 0.99, 3 * d, 5.5 * d, 5.0 * d])
        x = []
        for b in blocks:
            x += b + [0.0] * (fmt.block - len(b))
        return (np.array(x) * 2.0**k).astype(F32)
    block = v + [-w for w in v] + [0.0] * (fmt.block - 2 * len(v))
    return (np.array(block) * 2.0**k).astype(F32)


def _round_down_f32(t):
    """The largest float32 <= each float64 t."""
    f = t.astype(F32)
    return np.where(f.astype(np.float64) > t, np.nextafter(f, F32(-np.inf)), f).astype(F32)


def float32_add_edge(fmt, seed=42, blocks=8):
    """(x, t, u): stochastic-rounding inputs whose t = q * 2^(m - e) (mxint8: q * 64)
    lies just below an integer minus u(i), so that the float32 sum t + u often
    rounds up to the integer and floor(t + u) differs from exact arithmetic.
    Each block's first element fixes the block scale so that q = x exactly (MX:
    the format's largest, s = 0; nvfp4: 2688 in the first block makes S = 1, 6
    in the others makes d = 1 and x = 1)."""
    count = blocks * fmt.block
    u = uniform(np.arange(count, dtype=np.uint64), seed)
    rng = np.random.default_rng(11 + fmt.codec_id)
    if fmt.is_int:
        t = _round_down_f32(rng.integers(-120, 120, count) + 1 - u.astype(np.float64))
        q = t / F32(64)
    else:
        M = 1 << fmt.m
        t = _round_down_f32(rng.integers(1, 2 * M - 1, count) + 1 - u.astype(np.float64))  # t + u < 2M
        e = np.where(t >= M, rng.integers(fmt.emin, fmt.emax, count), fmt.emin)  # no saturation
        q = np.ldexp(t, (e - fmt.m).astype(np.int32)) * np.where(rng.random(count) < 0.5, F32(-1), F32(1))
    q = q.astype(F32)
    q[:: fmt.block] = 6.0 if fmt.nvfp4 else fmt.largest
    if fmt.nvfp4:
        q[0] = 2688.0
    return q, t, u


def inputs(fmt):
    rng = np.random.default_rng(20240611 + fmt.codec_id)
    cases = [("golden", golden_input())]
    for scale in (1e-30, 1.0, 1e20):
        for n in (1, 31, 32, 33, 100, 1000):
            cases.append((f"normal*{scale:g} n={n}", (rng.standard_normal(n) * scale).astype(F32)))
    cases.append(("float32 t + u edge", float32_add_edge(fmt)[0]))
    cases.append(("student-t df=2", rng.standard_t(2, 1000).astype(F32)))
    cases.append(("student-t df=1 *1e10", (rng.standard_t(1, 500) * 1e10).astype(F32)))
    cases.append(("zeros", np.zeros(40, F32)))
    cases.append(("-0.0", np.full(40, -0.0, F32)))
    cases.append(("zeros, -0.0 and one 1.0", np.array([0.0, -0.0] * 20 + [1.0] + [-0.0] * 10, F32)))
    sub = np.array([1e-45, -1e-45, 1e-40, -3e-39, 1.1754942e-38, 7e-42, -0.0, 2e-44], F32)
    cases.append(("float32 subnormals", np.tile(sub, 5)))
    cases.append(("subnormals with a small normal amax", np.array(
        [2.0**-112, 2.0**-127, -(2.0**-130), 1e-40, 2.0**-140, 3e-39, -(2.0**-115), 2.0**-149], F32)))
    for k in (0, 10, -20, -120):
        cases.append((f"ties*2^{k}", tie_input(fmt, k)))
    for k in (0, 7, -30):
        cases.append((f"at and above largest*2^{k}", near_largest_input(fmt, k)))
    x = (rng.standard_normal(100)).astype(F32)
    x[5] = np.nan
    cases.append(("one NaN", x))
    x = (rng.standard_normal(100)).astype(F32)
    x[40], x[70] = np.inf, -np.inf
    cases.append(("+Inf and -Inf", x))
    x = np.full(40, np.nan, F32)
    cases.append(("all NaN", x))
    big = np.array([3e38, 1.0, -2.5e38, 1e30, np.finfo(F32).max, -np.finfo(F32).max, 1e38, 7.0], F32)
    cases.append(("3e38 and FLT_MAX", np.tile(big, 5)))
    cases.append(("1e-40 with 1.0", np.array([1e-40, 1.0, -1e-40, 0.5, 1e-40, -1.0] * 6, F32)))
    cases.append(("wide range in a block", np.array([1e30, 1e-30, -1e20, 1e10, 1.0, -1e-10] * 6, F32)))
    return cases


# ---- qc access ---------------------------------------------------------------------------------


def qc_policy(fmt, rounding):
    """qc.Policy for the codec, or skip while qc or the codec is not there."""
    if qc is None:
        pytest.skip("qc is not importable (PYTHONPATH=<build>/bindings/python)")
    if fmt.codec not in qc.CODECS:
        pytest.skip(f"this qc has no codec {fmt.codec!r} yet")
    assert qc.CODECS[fmt.codec] == fmt.codec_id
    return qc.Policy(codec=fmt.codec, rounding=rounding, seed=42, min_compress_bytes=0)


def qc_encode(x, policy):
    try:
        return qc.encode(x, policy)
    except qc.UnsupportedError as e:
        pytest.skip(f"qc: {e}")


CODEC_NAMES = list(FORMATS)
ROUNDINGS = ["nearest", "stochastic"]


# ---- 1. the reference's element rounding against ml_dtypes (no qc) ----------------------------


def test_random_bits_pinned_values():
    """Section 4's pinned values for (seed 42, rank 0, stream 0)."""
    assert rng_keys(42) == (0x6466471F, 0x483374F0)
    assert random_bits([0, 2**32], 42).tolist() == [0x96EC4A25, 0x3654C9A1]


def _rounding_samples(fmt, rng):
    """float32 values: random bit patterns over a wide range, every element
    value and tie with their float32 neighbours, float32 subnormals, zeros,
    values around and far above the largest; both signs."""
    mags = np.unique(np.abs(value_table(fmt)[np.isfinite(value_table(fmt))])).astype(np.float64)
    points = np.concatenate([mags, (mags[:-1] + mags[1:]) / 2, [fmt.largest * 1.5, fmt.largest * 2]]).astype(F32)
    near = (points.view(np.int32)[:, None] + np.arange(-40, 41, dtype=np.int32)[None, :]).ravel()
    near = near[near >= 0].view(F32)
    lo = np.array(2.0 ** (fmt.emin - fmt.m - 4), F32).view(np.int32)
    hi = np.array(fmt.largest * 4, F32).view(np.int32)
    wide = rng.integers(lo, hi, 1_000_000, dtype=np.int32).view(F32)
    tiny = rng.integers(0, lo, 100_000, dtype=np.int32).view(F32)  # float32 subnormals and tiny normals
    huge = rng.integers(hi, 0x7F800000, 100_000, dtype=np.int32).view(F32)  # saturation, up to FLT_MAX
    x = np.concatenate([near, wide, tiny, huge, np.array([0.0, np.finfo(F32).max], F32)])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("codec", [f.codec for f in FP_FORMATS if f.codec != "nvfp4"] + ["mxint8"])
def test_element_rounding_matches_ml_dtypes(codec):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = FORMATS[codec]
    rng = np.random.default_rng(7)
    q = _rounding_samples(fmt, rng)
    got = round_elem(fmt, q)
    if fmt.is_int:  # no ml_dtypes type: int8 round-half-even on q * 64, from float64
        want = np.clip(np.rint(q.astype(np.float64) * 64), -127, 127).astype(np.int8).view(np.uint8)
    else:
        want = round_elem_ml_dtypes(fmt, q)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} differ; first q = {q[bad[0]]!r}: formula {got[bad[0]]:#04x}, "
                           f"ml_dtypes {want[bad[0]]:#04x}")
    # sign of zero is kept, ties go to even, saturation at the largest code
    assert round_elem(fmt, F32(-0.0)).item() == (0 if fmt.is_int else 1 << (fmt.bits - 1))
    if not fmt.is_int:
        L = largest_code(fmt)
        assert round_elem(fmt, np.array([fmt.largest, 1e30, -1e30], F32)).tolist() == [
            L, L, L | (1 << (fmt.bits - 1))]
        assert ml_dtypes.finfo(getattr(ml_dtypes, fmt.ml)).max == fmt.largest


@pytest.mark.parametrize("codec", [f.codec for f in FP_FORMATS if f.codec != "nvfp4"])
def test_element_values_match_ml_dtypes(codec):
    """value(code) of the document (NaN/Inf codes included) is ml_dtypes' value of the same bits."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = FORMATS[codec]
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    want = codes.view(getattr(ml_dtypes, fmt.ml)).astype(F32)
    assert_same_floats(value_table(fmt), want, codec)
    # and the formula rounds every value back to its code (NaN/Inf codes excluded)
    fin = np.isfinite(want)
    assert np.array_equal(round_elem(fmt, want[fin]), codes[fin])


def test_e8m0_scale_matches_ml_dtypes():
    """Scale byte b: 2^a * 2^b with s = b - 127, a = s >> 1, b = s - a (the decode's two factors)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    byte = np.arange(255)
    s = byte - 127
    a = s >> 1
    two = np.exp2(a) * np.exp2(s - a)
    assert np.array_equal(two, byte.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64))
    assert np.isnan(np.array([0xFF], np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(F32)[0])
    assert a.min() >= -64 and a.max() <= 63 and (s - a).min() >= -63 and (s - a).max() <= 64


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_stochastic_rounding_brackets_q(codec):
    """Stochastic codes are one of the two element values around q (after
    saturation), element values keep their code, and the mean error is about 0 (no qc)."""
    fmt = FORMATS[codec]
    rng = np.random.default_rng(3)
    q = (rng.standard_normal(20000) * fmt.largest / 3).astype(F32)
    u = uniform(np.arange(q.size, dtype=np.uint64), 42)
    vals = value_table(fmt)
    codes = np.arange(vals.size)
    written = np.isfinite(vals) & ~((codes == 0x80) & fmt.is_int)  # the codes the encoder writes
    grid = np.unique(vals[written].astype(np.float64))
    got = vals[round_elem(fmt, q, u)].astype(np.float64)
    qq = np.clip(q.astype(np.float64), -fmt.largest, fmt.largest)
    i = np.clip(np.searchsorted(grid, qq, side="right") - 1, 0, grid.size - 2)
    lo, hi = grid[i], grid[i + 1]
    assert np.all((got == lo) | (got == hi) | (got == qq))
    exact = vals[written]
    assert np.array_equal(vals[round_elem(fmt, exact, uniform(np.arange(exact.size, dtype=np.uint64), 1))], exact)
    inside = np.abs(q) < fmt.largest * 0.9
    err = (got - q)[inside]
    assert abs(err.mean()) < 4 * err.std() / math.sqrt(err.size) + 1e-12


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_float32_add_edge_input_is_an_edge(codec):
    """The "float32 t + u edge" input does pin the float32 add: for several
    elements floor(float32(t + u)) differs from floor(t + u) (no qc)."""
    fmt = FORMATS[codec]
    x, t, u = float32_add_edge(fmt)
    i = np.arange(x.size)
    live = (i % fmt.block != 0) & ~(fmt.nvfp4 & (i < fmt.block))  # where q == x (not nvfp4's first block)
    exact = np.floor(t.astype(np.float64) + u)
    f32 = np.floor((t + u).astype(F32))
    assert (exact != f32)[live].sum() >= 10
    # and the reference encoder uses the float32 sum: decoded value = floor(t + u) * (x / t)
    y = reference_decode(reference_encode(fmt, x, stochastic=True), x.size)
    if fmt.is_int:
        want = np.clip(f32, -127, 127) / 64
    else:
        want = np.abs(x).astype(np.float64) / t * f32  # x / t = +-2^(e - m), exact
    assert np.array_equal(np.abs(y[live]).astype(np.float64), np.abs(want[live])), codec


def test_reference_roundtrip_is_close():
    """Sanity of the reference encoder/decoder on normal data (no qc)."""
    x = np.random.default_rng(1).standard_normal(1000).astype(F32)
    for fmt in FORMATS.values():
        y = reference_decode(reference_encode(fmt, x), x.size)
        rel = np.abs(y - x).max() / np.abs(x).max()
        assert rel < {4: 0.25, 6: 0.07, 8: 0.07}[fmt.bits], (fmt.codec, rel)


# ---- 2. and 3. qc's encoder and decoder against the reference --------------------------------


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_encode_matches_reference(codec, rounding):
    fmt = FORMATS[codec]
    policy = qc_policy(fmt, rounding)
    stochastic = rounding == "stochastic"
    failures = []
    for name, x in inputs(fmt):
        want = reference_encode(fmt, x, stochastic)
        got = qc_encode(x, policy)
        if got != want:
            failures.append(f"{name}: {describe_difference(fmt, got, want)}")
    # float16 input is encoded as its float32 widening (section 3)
    h = (np.random.default_rng(5).standard_normal(100) * 300).astype(np.float16)
    if qc_encode(h, policy) != reference_encode(fmt, h.astype(F32), stochastic):
        failures.append("float16 input")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_decode_matches_reference(codec, rounding):
    fmt = FORMATS[codec]
    qc_policy(fmt, rounding)
    for name, x in inputs(fmt):
        msg = reference_encode(fmt, x, rounding == "stochastic")
        assert_same_floats(qc.decode(msg, x.size), reference_decode(msg, x.size), f"{codec} {name}")


def handmade_messages(fmt):
    """Every element code (NaN/Inf codes, mxint8's 0x80 included) under many block scales."""
    per = 1 << fmt.bits
    if fmt.nvfp4:
        scales = np.arange(0x80, dtype=np.uint8)  # 0x7F: NaN
        count = scales.size * fmt.block
        codes = np.arange(count) % per
        for S in (1.0, 2.0**-140, 1e-3, 3e38, 0.0, 6.0 / 2688):
            yield f"S={S!r}", message(fmt, count, scales, codes, S=S), count
        yield "short last block", message(fmt, 21, [0x38, 0x7F], np.arange(21) % per, S=0.5), 21
        return
    scales = np.array([0, 1, 2, 63, 64, 65, 100, 126, 127, 128, 129, 150, 190, 200, 253, 254, 0xFF], np.uint8)
    count = per * scales.size
    nb = n_blocks(fmt, count)
    codes = np.arange(count) % per
    yield "every code", message(fmt, count, np.resize(scales, nb), codes), count
    rolled = np.roll(codes, 7)
    yield "every code, shifted", message(fmt, count, np.resize(scales[::-1], nb), rolled), count
    yield "short last block", message(fmt, 45, [127, 0xFF], np.arange(45) % per), 45


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_decode_handmade_messages(codec):
    fmt = FORMATS[codec]
    qc_policy(fmt, "nearest")
    for name, msg, count in handmade_messages(fmt):
        assert_same_floats(qc.decode(msg, count), reference_decode(msg, count), f"{codec} {name}")


def test_reference_decodes_special_codes():
    """The reference's reading of the special codes (no qc)."""
    e4m3, e5m2, i8 = FORMATS["mxfp8"], FORMATS["mxfp8_e5m2"], FORMATS["mxint8"]
    y = reference_decode(message(e4m3, 3, [127], [0x7F, 0xFF, 0x7E]), 3)
    assert np.isnan(y[:2]).all() and y[2] == 448
    y = reference_decode(message(e5m2, 4, [130], [0x7C, 0xFC, 0x7D, 0x7B]), 4)
    assert y[0] == np.inf and y[1] == -np.inf and np.isnan(y[2]) and y[3] == 57344 * 8
    y = reference_decode(message(i8, 2, [128], [0x80, 0x7F]), 2)
    assert y.tolist() == [-4.0, 127 / 32]
    assert np.isnan(reference_decode(message(i8, 2, [0xFF], [0, 1]), 2)).all()


def golden_files():
    """(codec, rounding, path) of the block-scaled golden vectors in tests/data
    (tests/tools/golden_cases.h lists them; make_golden writes them with qc)."""
    data = Path(__file__).resolve().parents[3] / "tests" / "data"
    for codec, fmt in FORMATS.items():
        for rounding in ROUNDINGS:
            path = data / f"golden_{codec}_{fmt.bits}_{fmt.block}_{rounding}.bin"
            if path.exists():
                yield codec, rounding, path


def test_golden_vectors_match_reference():
    """The checked-in golden messages (qc's bytes, which unit.codecs re-encodes
    on every ISA) are the reference's encoding of the golden input (no qc)."""
    files = list(golden_files())
    if not files:
        pytest.skip("tests/data is not next to this file (an installed copy)")
    assert {codec for codec, _, _ in files} == set(FORMATS), "a format has no golden vector"
    x = golden_input()
    for codec, rounding, path in files:
        want = reference_encode(FORMATS[codec], x, rounding == "stochastic")
        assert path.read_bytes() == want, f"{path.name}: {describe_difference(FORMATS[codec], path.read_bytes(), want)}"


# ---- 4. refused messages -------------------------------------------------------------------


def corrupt_messages(fmt):
    """(name, message, count) that the document's decoder refuses."""
    for count in (1, 3, 33):
        good = reference_encode(fmt, np.linspace(-1, 1, count).astype(F32))
        used = count * fmt.bits % 8
        if used:
            for bit in range(used, 8):
                bad = bytearray(good)
                bad[-1] |= 1 << bit
                yield f"count {count}: unused bit {bit} of the last code byte set", bytes(bad), count
    good = reference_encode(fmt, np.linspace(-1, 1, 40).astype(F32))
    other_bits, other_block = (4 if fmt.bits != 4 else 8), (16 if fmt.block != 16 else 32)
    for field, off, value in (("bits", 6, other_bits), ("bucket", 8, other_block)):
        bad = bytearray(good)
        struct.pack_into("<B" if field == "bits" else "<I", bad, off, value)
        yield f"header {field} {value}", bytes(bad), 40
    if fmt.nvfp4:
        nb = n_blocks(fmt, 40)
        for byte in (0x80, 0xB8, 0xFF):
            for blk in (0, nb - 1):
                bad = bytearray(good)
                bad[36 + blk] = byte
                yield f"scale byte {byte:#04x} in block {blk}", bytes(bad), 40
        for S in (-1.0, -(2.0**-149), np.inf, -np.inf, np.nan):
            bad = bytearray(good)
            struct.pack_into("<f", bad, 32, S)
            yield f"S = {S!r}", bytes(bad), 40


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_decode_refuses_corrupt_messages(codec):
    fmt = FORMATS[codec]
    qc_policy(fmt, "nearest")
    cases = list(corrupt_messages(fmt))
    assert cases
    for name, msg, count in cases:
        with pytest.raises(ValueError):  # the reference agrees that it is corrupt
            reference_decode(msg, count)
        with pytest.raises(qc.CorruptDataError):
            qc.decode(msg, count)
            pytest.fail(f"{codec}: qc decoded a corrupt message ({name})")
