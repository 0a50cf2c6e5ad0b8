// minmax, qsgd and onebit on the device: the same bytes as the CPU
// reference (cpu/kernels_scalar.cpp), written by kernels shaped for a GPU.
//
// Work split. A bucket is handled by a team of 4 lanes, 8 teams per warp.
// The canonical sum (16 partial sums acc[i % 16], each added in index order,
// then a fixed tree) is what fixes the team size: lane l of a team reads the
// float4 at bucket offsets 16k + 4l, so it alone owns acc[4l .. 4l+3] and
// adds to them in the CPU's order; the tree is two shuffles and two adds.
// Min and max are order-free except for which of +0 / -0 wins a tie, so
// they carry the element index and the lower index wins, as in the CPU's
// left-to-right scan.
//
// Codes. Eight consecutive codes fill exactly `bits` bytes, so when the
// bucket size is a multiple of 8 every bucket starts on a byte and each
// even lane, holding 4 codes and its odd neighbour's 4, writes whole bytes
// no other lane touches: the single-pass kernel (encode_fused_kernel). Other
// bucket sizes put two buckets' codes in one byte; they take two kernels,
// one for the statistics and one that quantizes per group of 8 elements.
//
// Rounding. The .cu files are compiled with --fmad=false (no contraction of
// a * b + c), division and sqrt are IEEE (no fast math), and min/max follow
// std::min/std::max exactly (ref_min/ref_max), so every value rounds as on
// the CPU.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "cpu/codec_kernels.h"
#include "cpu/half_convert.h"
#include "cpu/random.h"
#include "cuda/cuda_check.h"
#include "cuda/device_codec.h"
#include "cuda/kernel_common.cuh"

namespace qc {
namespace cuda {
namespace {

using namespace kernel;

constexpr int kTeamLanes = 4;
constexpr int kTeamsPerWarp = 32 / kTeamLanes;
constexpr int kTeamTile = 16;  // elements a team covers per step: 4 lanes x 4

enum class Kind { kMinmax, kQsgd, kOnebit };

struct EncodeJob {
  const void* x;
  float* e;
  size_t count;
  size_t bucket;
  int bits;
  qc_dtype_t dtype;
  bool stochastic;
  cpu::RandomStream rng;
  uint64_t index_base;
  uint8_t* meta;
  uint8_t* codes;
  bool vector_io;  // float32, x and e 16-byte aligned, bucket % 4 == 0: float4 loads/stores
  size_t first_bucket;  // the bucket-team kernels start here (a launch of the rest)
  float keep_limit;     // residual hygiene: cpu::residual_limit (codec_kernels.h)
};

__device__ __forceinline__ float load_input(const EncodeJob& j, size_t i) {
  if (j.dtype == QC_DTYPE_FLOAT16) return cpu::half_to_float(static_cast<const uint16_t*>(j.x)[i]);
  if (j.dtype == QC_DTYPE_BFLOAT16)
    return cpu::bfloat16_to_float(static_cast<const uint16_t*>(j.x)[i]);
  return static_cast<const float*>(j.x)[i];
}

// z = x + e (x alone without error feedback: -0 + 0 would be +0).
__device__ __forceinline__ float load_z(const EncodeJob& j, size_t i) {
  const float x = load_input(j, i);
  return j.e != nullptr ? x + j.e[i] : x;
}

// The `valid` (0..4) values at i, i+1, ...; i is a multiple of 4.
__device__ __forceinline__ void load_z4(const EncodeJob& j, size_t i, int valid, float z[4]) {
  if (valid == 4 && j.vector_io) {
    const float4 x = *reinterpret_cast<const float4*>(static_cast<const float*>(j.x) + i);
    z[0] = x.x, z[1] = x.y, z[2] = x.z, z[3] = x.w;
    if (j.e != nullptr) {
      const float4 e = *reinterpret_cast<const float4*>(j.e + i);
      z[0] = z[0] + e.x, z[1] = z[1] + e.y, z[2] = z[2] + e.z, z[3] = z[3] + e.w;
    }
    return;
  }
  for (int c = 0; c < 4; ++c) z[c] = c < valid ? load_z(j, i + c) : 0.0f;
}

__device__ __forceinline__ void store_e4(const EncodeJob& j, size_t i, int valid, const float r[4]) {
  if (valid == 4 && j.vector_io) {
    *reinterpret_cast<float4*>(j.e + i) = make_float4(r[0], r[1], r[2], r[3]);
    return;
  }
  QC_UNROLL
  for (int c = 0; c < 4; ++c)
    if (c < valid) j.e[i + c] = r[c];
}

// ---- bucket statistics --------------------------------------------------------

// What one lane has seen of its bucket.
struct LaneStats {
  int finite = 1;
  // minmax: every finite value is < lo and > hi at first, so the first one
  // sets both; a non-finite value makes the metadata NaN whatever they hold.
  float lo = INFINITY, hi = -INFINITY;
  uint32_t lo_at = 0, hi_at = 0;  // bucket-local index of lo / hi
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // canonical sum partials acc[4l + c]
};

template <Kind K>
__device__ __forceinline__ void add_to_stats(LaneStats& s, float z, uint32_t at, int c) {
  s.finite &= isfinite(z) ? 1 : 0;
  if constexpr (K == Kind::kMinmax) {
    if (z < s.lo) s.lo = z, s.lo_at = at;  // strict: the first of equal values stays
    if (s.hi < z) s.hi = z, s.hi_at = at;
  } else if constexpr (K == Kind::kQsgd) {
    const float sq = z * z;
    s.acc[c] = s.acc[c] + sq;
  } else {
    s.acc[c] = s.acc[c] + fabsf(z);
  }
}

// The bucket's metadata from its team's lane statistics (every lane of the
// warp must call this: it shuffles). m1 is minmax's scale, else unused.
template <Kind K>
__device__ void team_meta(const LaneStats& s, size_t n, int bits, float* m0, float* m1) {
  int finite = s.finite;
  finite &= __shfl_xor_sync(kFullMask, finite, 1);
  finite &= __shfl_xor_sync(kFullMask, finite, 2);
  const float nan = __int_as_float(0x7fc00000);
  *m1 = 0.0f;
  if constexpr (K == Kind::kMinmax) {
    float lo = s.lo, hi = s.hi;
    uint32_t lo_at = s.lo_at, hi_at = s.hi_at;
    for (int off = 1; off < kTeamLanes; off <<= 1) {
      const float olo = __shfl_xor_sync(kFullMask, lo, off);
      const float ohi = __shfl_xor_sync(kFullMask, hi, off);
      const uint32_t olo_at = __shfl_xor_sync(kFullMask, lo_at, off);
      const uint32_t ohi_at = __shfl_xor_sync(kFullMask, hi_at, off);
      // A lane that saw nothing holds +-inf, which every finite value beats.
      if (olo < lo || (olo == lo && olo_at < lo_at)) lo = olo, lo_at = olo_at;
      if (hi < ohi || (ohi == hi && ohi_at < hi_at)) hi = ohi, hi_at = ohi_at;
    }
    const float L = static_cast<float>((1u << bits) - 1u);
    *m0 = finite ? lo : nan;
    *m1 = finite ? (hi - lo) / L : nan;
  } else {
    // cpu canonical_reduce16: acc[j] += acc[j + w] for w = 8, 4, 2, 1.
    float a[4];
    for (int c = 0; c < 4; ++c) a[c] = s.acc[c];
    for (int c = 0; c < 4; ++c) a[c] = a[c] + __shfl_down_sync(kFullMask, a[c], 2, kTeamLanes);
    for (int c = 0; c < 4; ++c) a[c] = a[c] + __shfl_down_sync(kFullMask, a[c], 1, kTeamLanes);
    a[0] = a[0] + a[2];
    a[1] = a[1] + a[3];
    a[0] = a[0] + a[1];
    const float sum = __shfl_sync(kFullMask, a[0], 0, kTeamLanes);
    if constexpr (K == Kind::kQsgd) {
      *m0 = finite ? sqrtf(sum) : nan;
    } else {
      *m0 = finite ? sum / static_cast<float>(n) : nan;
    }
  }
}

// ---- per-element arithmetic (encode and decode) -------------------------------

// A bucket's quantizing constants, from its metadata (NaN metadata marks a
// bucket that held a NaN or an infinity: codes 0, residual 0). `drop`:
// residual hygiene (cpu/codec_kernels.h), the bucket's residuals are 0
// because its gauge exceeds the call's keep_limit (or is NaN). The CPU
// decides from the same floats; its extra test, a non-finite residual,
// fires only with reused scales, which the device does not do.
struct BucketQuant {
  bool nan;
  bool drop;
  float lo, inv, top;  // top: minmax L, qsgd M
  float step;          // qsgd norm / M, onebit scale
  cpu::MinmaxLevels levels;
};

// keep_limit: the encode's (EncodeJob::keep_limit); a decode passes +inf.
template <Kind K>
__device__ __forceinline__ BucketQuant bucket_quant(float m0, float m1, int bits,
                                                    float keep_limit) {
  BucketQuant q{};
  float gauge;
  if constexpr (K == Kind::kMinmax) {
    q.nan = isnan(m1) || isnan(m0);
    q.top = static_cast<float>((1u << bits) - 1u);
    q.lo = m0;
    q.inv = m1 >= cpu::kMinInvertibleScale ? 1.0f / m1 : 0.0f;
    q.levels = cpu::minmax_levels(m0, m1, q.top);
    gauge = m1;
  } else if constexpr (K == Kind::kQsgd) {
    q.nan = isnan(m0);
    q.top = static_cast<float>((1u << (bits - 1)) - 1u);
    q.inv = m0 > 0 ? q.top / m0 : 0.0f;
    q.step = m0 / q.top;
    gauge = q.step;
  } else {
    q.nan = isnan(m0);
    q.step = m0;
    gauge = m0;
  }
  q.drop = !cpu::keeps_residuals(gauge, keep_limit);
  return q;
}

template <Kind K>
__device__ __forceinline__ BucketQuant bucket_quant_from_meta(const uint8_t* meta, size_t b,
                                                              int bits, float keep_limit) {
  if constexpr (K == Kind::kMinmax) {
    return bucket_quant<K>(load_meta(meta + 8 * b), load_meta(meta + 8 * b + 4), bits,
                           keep_limit);
  } else {
    return bucket_quant<K>(load_meta(meta + 4 * b), 0.0f, bits, keep_limit);
  }
}

__device__ __forceinline__ float minmax_level(const cpu::MinmaxLevels& m, float j) {
  return ref_min((m.lo + j * m.scale) * m.f, FLT_MAX);
}

// Stochastic rounding is a template parameter, not a branch: as a branch the
// compiler computed the random draw for every element and selected, so the
// nearest rounding paid for it too (minmax encode at 0.46 of a copy, H200).
template <bool kStochastic>
__device__ __forceinline__ float round_code(float t, const EncodeJob& j, uint64_t index) {
  if constexpr (kStochastic) return floorf(t + cpu::random_uniform(j.rng, index));
  return rintf(t);
}

// The code of z and, in *residual, z - decode(code).
template <Kind K, bool kStochastic>
__device__ __forceinline__ uint32_t quantize(const BucketQuant& q, float z, const EncodeJob& j,
                                             uint64_t index, float* residual) {
  if (q.nan) {
    *residual = 0.0f;  // nothing sensible to carry forward
    return 0;
  }
  if constexpr (K == Kind::kMinmax) {
    const float t = (z - q.lo) * q.inv;
    const float code = ref_min(ref_max(round_code<kStochastic>(t, j, index), 0.0f), q.top);
    *residual = q.drop ? 0.0f : z - minmax_level(q.levels, code);
    return static_cast<uint32_t>(code);
  } else if constexpr (K == Kind::kQsgd) {
    const float t = fabsf(z) * q.inv;
    const float level = ref_min(ref_max(round_code<kStochastic>(t, j, index), 0.0f), q.top);
    const bool negative = z < 0;
    const float v = level * q.step;
    *residual = q.drop ? 0.0f : z - (negative ? -v : v);
    return (negative ? 1u << (j.bits - 1) : 0u) | static_cast<uint32_t>(level);
  } else {
    const bool negative = z < 0;
    *residual = q.drop ? 0.0f : z - (negative ? -q.step : q.step);
    return negative ? 1u : 0u;
  }
}

template <Kind K>
__device__ __forceinline__ float dequantize(const BucketQuant& q, uint32_t code, int bits) {
  if constexpr (K == Kind::kMinmax) {
    return minmax_level(q.levels, static_cast<float>(code));
  } else if constexpr (K == Kind::kQsgd) {
    const uint32_t sign_bit = 1u << (bits - 1);
    const float v = static_cast<float>(code & (sign_bit - 1u)) * q.step;
    return (code & sign_bit) ? -v : v;
  } else {
    return code ? -q.step : q.step;
  }
}

// ---- kernels ------------------------------------------------------------------

// Elements the lane holds at step k of its bucket (0..4), i its first.
__device__ __forceinline__ int valid_at(size_t i, size_t n) {
  return i < n ? static_cast<int>(size_min(4, n - i)) : 0;
}

template <Kind K>
__device__ __forceinline__ void add4_to_stats(LaneStats& s, const float z[4], size_t i, int valid) {
  QC_UNROLL
  for (int c = 0; c < 4; ++c)
    if (c < valid) add_to_stats<K>(s, z[c], static_cast<uint32_t>(i + c), c);
}

// One team of 4 lanes per bucket: statistics, then (kQuantize) the codes.
// Loops are uniform across the warp (every team runs ceil(bucket / 16)
// steps, idle lanes with no valid elements) because the statistics and the
// code pairs are exchanged with full-warp shuffles.
//
// kCachedSteps > 0, for buckets of at most 16 * kCachedSteps elements: the
// lane issues all its loads at once and keeps z in registers from the
// statistics to the codes, so the input is read once and many loads are in
// flight; otherwise the codes step reads the bucket again (from cache).
// kFull: every bucket the launch covers holds exactly 16 * kCachedSteps
// elements (the host launches it on the whole warps' worth of such buckets,
// the rest separately), so every count and test of `valid` is a constant.
//
// The kernel was bound by instructions and latency, not memory (Nsight
// Compute on an H200: SM 58% busy, DRAM 15%), so what it leaves out
// matters: without error feedback (kErrorFeedback false) no residual is
// computed; the cached encode is held to 64 registers (4 blocks an SM; its
// natural 94 gave 2) with no spills; and kFull drops every count test.
// minmax 4-bit encode, as a fraction of a copy on an H200, went 0.47 ->
// 0.64 -> 0.78 -> 1.32 (docs/benchmarks.md).
template <Kind K, bool kQuantize, int kCachedSteps, bool kStochastic, bool kErrorFeedback,
          bool kFull>
__global__ void __launch_bounds__(kThreads, kCachedSteps == 0 ? 1 : (kErrorFeedback ? 2 : 4))
    bucket_team_kernel(EncodeJob j) {
  // A constant null e lets the compiler drop the residuals and their tests.
  if constexpr (!kErrorFeedback) j.e = nullptr;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned team_lane = lane & (kTeamLanes - 1);
  const unsigned team = lane / kTeamLanes;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const size_t nbuckets = (j.count + j.bucket - 1) / j.bucket;
  const size_t steps = (j.bucket + kTeamTile - 1) / kTeamTile;
  static_assert(!kFull || kCachedSteps > 0, "kFull is a case of the cached kernel");

  for (size_t first = j.first_bucket + warp * kTeamsPerWarp; first < nbuckets;
       first += warps * kTeamsPerWarp) {
    const size_t b = first + team;
    const bool active = b < nbuckets;
    const size_t b0 = active ? b * j.bucket : 0;
    const size_t n = active ? size_min(j.bucket, j.count - b0) : 0;

    auto valid_of = [&](size_t i) { return kFull ? 4 : valid_at(i, n); };
    LaneStats s;
    [[maybe_unused]] float cached[kCachedSteps > 0 ? kCachedSteps : 1][4];
    if constexpr (kCachedSteps > 0) {
      QC_UNROLL
      for (int k = 0; k < kCachedSteps; ++k) {
        const size_t i = k * kTeamTile + team_lane * 4;
        load_z4(j, b0 + i, valid_of(i), cached[k]);
      }
      QC_UNROLL
      for (int k = 0; k < kCachedSteps; ++k) {
        const size_t i = k * kTeamTile + team_lane * 4;
        add4_to_stats<K>(s, cached[k], i, valid_of(i));
      }
    } else {
      for (size_t k = 0; k < steps; ++k) {
        const size_t i = k * kTeamTile + team_lane * 4;
        float z[4];
        load_z4(j, b0 + i, valid_of(i), z);
        add4_to_stats<K>(s, z, i, valid_of(i));
      }
    }
    float m0, m1;
    team_meta<K>(s, n, j.bits, &m0, &m1);
    if (active && team_lane == 0) {
      if constexpr (K == Kind::kMinmax) {
        store_meta(j.meta + 8 * b, m0);
        store_meta(j.meta + 8 * b + 4, m1);
      } else {
        store_meta(j.meta + 4 * b, m0);
      }
    }
    if constexpr (kQuantize) {
      const BucketQuant q = bucket_quant<K>(m0, m1, j.bits, j.keep_limit);
      // Step k's codes from its values z (warp-uniform: it shuffles).
      auto codes_step = [&](size_t k, const float z[4]) {
        const size_t i = k * kTeamTile + team_lane * 4;
        const int valid = valid_of(i);
        float r[4];
        uint32_t packed = 0;  // 4 codes, 4 * bits <= 32 bits
        QC_UNROLL
        for (int c = 0; c < 4; ++c)
          if (c < valid)
            packed |= quantize<K, kStochastic>(q, z[c], j, j.index_base + b0 + i + c, &r[c])
                      << (c * j.bits);
        if (j.e != nullptr && valid > 0) store_e4(j, b0 + i, valid, r);
        const uint32_t odd = __shfl_down_sync(kFullMask, packed, 1);
        if ((team_lane & 1u) == 0 && valid > 0) {
          // The pair's 8 elements start on a byte (bucket % 8 == 0) and lie
          // in this bucket; at the tensor's end the high bits stay 0.
          const uint64_t word = packed | static_cast<uint64_t>(odd) << (4 * j.bits);
          const size_t in_pair = kFull ? 8 : size_min(8, n - i);
          store_code_bytes(j.codes + (b0 + i) * j.bits / 8, word, (in_pair * j.bits + 7) / 8);
        }
      };
      if constexpr (kCachedSteps > 0) {
        QC_UNROLL
        for (int k = 0; k < kCachedSteps; ++k)
          if (kFull || static_cast<size_t>(k) < steps) codes_step(k, cached[k]);
      } else {
        for (size_t k = 0; k < steps; ++k) {
          const size_t i = k * kTeamTile + team_lane * 4;
          float z[4];
          load_z4(j, b0 + i, valid_of(i), z);
          codes_step(k, z);
        }
      }
    }
  }
}

// The second kernel of the two-kernel path: one thread per group of 8
// elements (whose codes are exactly `bits` whole bytes), any bucket size.
template <Kind K, bool kStochastic>
__global__ void __launch_bounds__(kThreads) quantize_groups_kernel(EncodeJob j) {
  for_each_group_of_8(j.count, [&](size_t g, size_t i0, int valid) {
    size_t b = i0 / j.bucket;
    size_t next = (b + 1) * j.bucket;
    BucketQuant q = bucket_quant_from_meta<K>(j.meta, b, j.bits, j.keep_limit);
    uint64_t word = 0;
    for (int c = 0; c < valid; ++c) {
      const size_t i = i0 + c;
      if (i >= next) {  // bucket >= 1, so one step reaches i's bucket
        ++b;
        next += j.bucket;
        q = bucket_quant_from_meta<K>(j.meta, b, j.bits, j.keep_limit);
      }
      float r;
      const uint32_t code = quantize<K, kStochastic>(q, load_z(j, i), j, j.index_base + i, &r);
      word |= static_cast<uint64_t>(code) << (c * j.bits);
      if (j.e != nullptr) j.e[i] = r;
    }
    store_code_bytes(j.codes + g * j.bits, word, (valid * j.bits + 7) / 8);
  });
}

struct DecodeJob {
  const uint8_t* meta;
  const uint8_t* codes;
  size_t count;
  size_t bucket;
  int bits;
  float* dst;
  bool accumulate;
  bool vector_io;  // dst 16-byte aligned
};

// One thread per group of 8 elements: `bits` code bytes in, 8 floats out
// (two float4 stores when dst is aligned), any bucket size.
template <Kind K>
__global__ void __launch_bounds__(kThreads) decode_groups_kernel(DecodeJob d) {
  const uint32_t mask = (1u << d.bits) - 1u;
  for_each_group_of_8(d.count, [&](size_t g, size_t i0, int valid) {
    const uint64_t word = load_code_bytes(d.codes + g * d.bits, (valid * d.bits + 7) / 8);
    size_t b = i0 / d.bucket;
    size_t next = (b + 1) * d.bucket;
    BucketQuant q = bucket_quant_from_meta<K>(d.meta, b, d.bits, INFINITY);
    float v[8];
    for (int c = 0; c < valid; ++c) {
      if (i0 + c >= next) {
        ++b;
        next += d.bucket;
        q = bucket_quant_from_meta<K>(d.meta, b, d.bits, INFINITY);
      }
      v[c] = dequantize<K>(q, static_cast<uint32_t>(word >> (c * d.bits)) & mask, d.bits);
    }
    float* out = d.dst + i0;
    if (valid == 8 && d.vector_io) {
      float4* o = reinterpret_cast<float4*>(out);
      float4 lo = make_float4(v[0], v[1], v[2], v[3]), hi = make_float4(v[4], v[5], v[6], v[7]);
      if (d.accumulate) {
        const float4 a = o[0], b4 = o[1];
        lo = make_float4(a.x + lo.x, a.y + lo.y, a.z + lo.z, a.w + lo.w);
        hi = make_float4(b4.x + hi.x, b4.y + hi.y, b4.z + hi.z, b4.w + hi.w);
      }
      o[0] = lo;
      o[1] = hi;
    } else {
      for (int c = 0; c < valid; ++c) out[c] = d.accumulate ? out[c] + v[c] : v[c];
    }
  });
}

// ---- host side ----------------------------------------------------------------

Status check_bits(qc_codec_t codec, int bits) {
  const int lo = codec == QC_CODEC_QSGD ? 2 : 1;
  const int hi = codec == QC_CODEC_ONEBIT ? 1 : 8;
  if (bits < lo || bits > hi)
    return invalid_argument("cuda: bits " + std::to_string(bits) + " out of range for this codec");
  return Status::ok();
}

template <Kind K, bool kStochastic, bool kErrorFeedback>
Status launch_encode(const EncodeJob& j, cudaStream_t s) {
  const size_t nbuckets = (j.count + j.bucket - 1) / j.bucket;
  const auto threads_for = [](size_t buckets) {
    return (buckets + kTeamsPerWarp - 1) / kTeamsPerWarp * 32;
  };
  // Buckets of up to 128 elements (the default and the common sizes) stay in
  // registers between statistics and codes.
  constexpr int kCachedSteps = 8;
  constexpr size_t kCachedBucket = kCachedSteps * kTeamTile;
  const bool cached = j.bucket <= kCachedBucket;
  if (j.bucket % 8 == 0) {
    EncodeJob rest = j;
    if (j.bucket == kCachedBucket && j.count / kCachedBucket >= kTeamsPerWarp) {
      // Whole warps of whole buckets first, by the kernel compiled for them.
      EncodeJob whole = j;
      whole.count = j.count / kCachedBucket / kTeamsPerWarp * kTeamsPerWarp * kCachedBucket;
      auto* full = &bucket_team_kernel<K, true, kCachedSteps, kStochastic, kErrorFeedback, true>;
      QC_LAUNCH(full, blocks_for(threads_for(whole.count / kCachedBucket)), kThreads, s)(whole);
      QC_RETURN_IF_ERROR(launch_status("cuda: quantize (single pass, whole buckets)"));
      rest.first_bucket = whole.count / kCachedBucket;
      if (rest.first_bucket == nbuckets) return Status::ok();
    }
    auto* single_pass =
        cached ? &bucket_team_kernel<K, true, kCachedSteps, kStochastic, kErrorFeedback, false>
               : &bucket_team_kernel<K, true, 0, kStochastic, kErrorFeedback, false>;
    const size_t rest_buckets = nbuckets - rest.first_bucket;
    QC_LAUNCH(single_pass, blocks_for(threads_for(rest_buckets)), kThreads, s)(rest);
    return launch_status("cuda: quantize (single pass)");
  }
  auto* statistics = cached ? &bucket_team_kernel<K, false, kCachedSteps, false, true, false>
                            : &bucket_team_kernel<K, false, 0, false, true, false>;
  QC_LAUNCH(statistics, blocks_for(threads_for(nbuckets)), kThreads, s)(j);
  QC_RETURN_IF_ERROR(launch_status("cuda: bucket statistics"));
  auto* groups = &quantize_groups_kernel<K, kStochastic>;
  QC_LAUNCH(groups, blocks_for((j.count + 7) / 8), kThreads, s)(j);
  return launch_status("cuda: quantize groups");
}

template <Kind K>
Status launch_encode(const EncodeJob& j, cudaStream_t s) {
  if (j.e != nullptr)
    return j.stochastic ? launch_encode<K, true, true>(j, s) : launch_encode<K, false, true>(j, s);
  return j.stochastic ? launch_encode<K, true, false>(j, s) : launch_encode<K, false, false>(j, s);
}

template <Kind K>
Status launch_decode(const DecodeJob& d, cudaStream_t s) {
  auto* decode = &decode_groups_kernel<K>;
  QC_LAUNCH(decode, blocks_for((d.count + 7) / 8), kThreads, s)(d);
  return launch_status("cuda: decode");
}

}  // namespace

Status quant_encode(const void* x, float* e, size_t count, const DeviceQuantArgs& a,
                    uint8_t* meta, uint8_t* codes, void* stream) {
  QC_RETURN_IF_ERROR(check_bits(a.codec, a.bits));
  if (a.bucket == 0 || a.bucket > UINT32_MAX) return invalid_argument("cuda: bucket size out of range");
  if (a.input_dtype != QC_DTYPE_FLOAT32 && e != nullptr)
    return invalid_argument("cuda: error feedback needs float32 input");
  const size_t elem = a.input_dtype == QC_DTYPE_FLOAT32 ? 4 : 2;
  if (!aligned(x, elem) || (e != nullptr && !aligned(e, 4)))
    return invalid_argument("cuda: device input must be aligned to its element size");
  if (count == 0) return Status::ok();
  EncodeJob j{x, e, count, a.bucket, a.bits, a.input_dtype, a.stochastic, a.rng, a.index_base,
              meta, codes, false, 0, cpu::residual_limit(a.codec, a.bucket)};
  // A team's float4 at bucket offset 16k + 4l is 16-byte aligned only when
  // bucket starts are (found by the warp emulator: bucket 5 faulted).
  j.vector_io = a.input_dtype == QC_DTYPE_FLOAT32 && a.bucket % 4 == 0 && aligned(x, 16) &&
                (e == nullptr || aligned(e, 16));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (a.codec) {
    case QC_CODEC_MINMAX: return launch_encode<Kind::kMinmax>(j, s);
    case QC_CODEC_QSGD: return launch_encode<Kind::kQsgd>(j, s);
    case QC_CODEC_ONEBIT: return launch_encode<Kind::kOnebit>(j, s);
    default: return unsupported("cuda: quant_encode takes minmax, qsgd or onebit");
  }
}

Status quant_decode(qc_codec_t codec, const uint8_t* meta, const uint8_t* codes, size_t count,
                    int bits, size_t bucket, float* dst, bool accumulate, void* stream) {
  QC_RETURN_IF_ERROR(check_bits(codec, bits));
  if (bucket == 0) return invalid_argument("cuda: bucket size out of range");
  if (!aligned(dst, 4)) return invalid_argument("cuda: device output must be 4-byte aligned");
  if (count == 0) return Status::ok();
  const DecodeJob d{meta, codes, count, bucket, bits, dst, accumulate, aligned(dst, 16)};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (codec) {
    case QC_CODEC_MINMAX: return launch_decode<Kind::kMinmax>(d, s);
    case QC_CODEC_QSGD: return launch_decode<Kind::kQsgd>(d, s);
    case QC_CODEC_ONEBIT: return launch_decode<Kind::kOnebit>(d, s);
    default: return unsupported("cuda: quant_decode takes minmax, qsgd or onebit");
  }
}

}  // namespace cuda
}  // namespace qc
