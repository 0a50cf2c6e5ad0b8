// The CUDA kernel tests, shared by the GPU run (test_cuda_codecs.cpp) and
// the CPU warp-emulator run (test_cuda_emulated.cpp): the CUDA codec kernels
// (src/cuda) against the CPU scalar reference (src/cpu/kernels_scalar.cpp),
// byte for byte: metadata, codes and the error-feedback residual of every
// encode; every float of decode and decode-accumulate; the fp16/bf16 casts.
// Inputs: the golden vectors (tests/data) and seeded random tensors with
// NaN, +-Inf, -0, denormals, ties and constant runs, bits 1..8, bucket sizes
// that take the single-pass kernel (multiples of 8) and the two-kernel path
// (others), float32 and 16-bit input, aligned and misaligned buffers,
// stochastic rounding with element offsets past 2^32. Device buffers carry
// canaries, so an out-of-bounds write fails the test.
//
// Under the emulator (32 coroutine lanes per warp on one CPU thread) the
// tensors are kSizeScale times smaller and the widest sweep takes one data
// kind per combination in turn; the kernels and paths covered are the same.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/codecs/codec_block_scaled.h"
#include "core/codecs/codec_global.h"
#include "cpu/codec_kernels.h"
#include "cpu/dtype_convert.h"
#include "cpu/random.h"
#include "cuda/device_codec.h"
#include "golden_cases.h"
#include "../unit/kernel_test_data.h"

namespace {

using namespace qc_kernel_test;

#if defined(QC_CUDA_EMULATION)
constexpr bool kEmulated = true;
constexpr size_t kSizeScale = 4;
#else
constexpr bool kEmulated = false;
constexpr size_t kSizeScale = 1;
#endif
constexpr uint8_t kCanary = 0xA5;
constexpr size_t kGuard = 64;

// Device memory: cudaMalloc'd on a GPU, 256-byte aligned host memory under
// the emulator (cudaMalloc's alignment, so the float4 paths run there too).
#if defined(QC_CUDA_EMULATION)
void* dev_alloc(size_t n) { return std::aligned_alloc(256, (n + 255) / 256 * 256); }
void dev_free(void* p) { std::free(p); }
void dev_upload(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);  // an empty vector's data() may be NULL
}
void dev_download(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}
void sync() {}
#else
void* dev_alloc(size_t n) {
  void* p = nullptr;
  return cudaMalloc(&p, n) == cudaSuccess ? p : nullptr;
}
void dev_free(void* p) { cudaFree(p); }
void dev_upload(void* dst, const void* src, size_t n) {
  EXPECT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), cudaSuccess);
}
void dev_download(void* dst, const void* src, size_t n) {
  EXPECT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), cudaSuccess);
}
void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }
#endif

// A device allocation with canary bytes around the part in use, so a kernel
// that writes out of bounds shows up as a changed canary.
class DeviceBytes {
 public:
  // `size` usable bytes starting `offset` bytes into the allocation.
  DeviceBytes(size_t size, size_t offset = 0) : size_(size), offset_(offset) {
    total_ = offset + size + kGuard;
    base_ = dev_alloc(total_);
    EXPECT_NE(base_, nullptr);
    std::vector<uint8_t> canary(total_, kCanary);
    dev_upload(base_, canary.data(), total_);
  }
  ~DeviceBytes() { dev_free(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  uint8_t* data() { return static_cast<uint8_t*>(base_) + offset_; }
  void upload(const void* src, size_t n) {
    ASSERT_LE(n, size_);
    dev_upload(data(), src, n);
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> all(total_);
    dev_download(all.data(), base_, total_);
    return all;
  }
  // The bytes in use; fails the test when a canary around them changed.
  std::vector<uint8_t> contents() const {
    const std::vector<uint8_t> all = download();
    for (size_t i = 0; i < offset_; ++i) EXPECT_EQ(all[i], kCanary) << "canary before, byte " << i;
    for (size_t i = offset_ + size_; i < total_; ++i)
      EXPECT_EQ(all[i], kCanary) << "canary after, byte " << i - offset_ - size_;
    return std::vector<uint8_t>(all.begin() + offset_, all.begin() + offset_ + size_);
  }

 private:
  void* base_ = nullptr;
  size_t size_, offset_, total_;
};

std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  if (!f.empty()) std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}


const qc::cpu::KernelTable& ref() { return *qc::cpu::scalar_kernels(); }

struct QuantFns {
  qc::cpu::QuantEncodeFn enc;
  qc::cpu::QuantDecodeFn dec;
  size_t meta_floats;
};
QuantFns quant_fns(qc_codec_t c) {
  switch (c) {
    case QC_CODEC_MINMAX: return {ref().minmax_encode, ref().minmax_decode, 2};
    case QC_CODEC_QSGD: return {ref().qsgd_encode, ref().qsgd_decode, 1};
    default: return {ref().onebit_encode, ref().onebit_decode, 1};
  }
}

struct QuantCase {
  qc_codec_t codec;
  int bits;
  size_t bucket;
  size_t count;
  bool stochastic;
  bool error_feedback;
  qc_dtype_t dtype;
  size_t misalign;  // elements (input) and bytes (message) off the allocation's alignment
  uint64_t index_base;
  Data data;
  uint64_t seed;

  std::string describe() const {
    std::ostringstream os;
    os << "codec " << codec << " bits " << bits << " bucket " << bucket << " count " << count
       << (stochastic ? " stochastic" : " nearest") << (error_feedback ? " ef" : "") << " dtype "
       << dtype << " misalign " << misalign << " index_base " << index_base << " data "
       << static_cast<int>(data) << " seed " << seed;
    return os.str();
  }
};

// Encodes on both sides and compares metadata, codes and residual; then
// decodes the CPU's message on the GPU (plain and accumulate) and compares.
void check_quant(const QuantCase& c) {
  SCOPED_TRACE(c.describe());
  const QuantFns f = quant_fns(c.codec);
  const std::vector<float> x32 = make_data(c.count, c.data, c.seed);
  std::vector<uint16_t> x16(c.count);
  if (c.dtype != QC_DTYPE_FLOAT32) {
    for (size_t i = 0; i < c.count; ++i)
      x16[i] = c.dtype == QC_DTYPE_FLOAT16 ? qc::cpu::float_to_half(x32[i])
                                            : qc::cpu::float_to_bfloat16(x32[i]);
  }
  const void* x_host = c.dtype == QC_DTYPE_FLOAT32 ? static_cast<const void*>(x32.data())
                                                   : static_cast<const void*>(x16.data());
  const size_t elem = c.dtype == QC_DTYPE_FLOAT32 ? 4 : 2;
  std::vector<float> e_cpu;
  if (c.error_feedback) e_cpu = make_data(c.count, Data::kPlain, c.seed + 1000);

  qc::cpu::QuantArgs a;
  a.bits = c.bits;
  a.bucket = c.bucket;
  a.stochastic = c.stochastic;
  a.rng = qc::cpu::make_random_stream(c.seed, static_cast<uint32_t>(c.seed % 5), c.seed % 3);
  a.index_base = c.index_base;
  a.input_dtype = c.dtype;
  const size_t meta_bytes = qc::cpu::bucket_count(c.count, c.bucket) * f.meta_floats * 4;
  const size_t code_bytes = qc::cpu::codes_bytes(c.count, c.bits);
  std::vector<uint8_t> msg_cpu(meta_bytes + code_bytes);
  std::vector<float> e_gpu_in = e_cpu;
  f.enc(static_cast<const float*>(x_host), c.error_feedback ? e_cpu.data() : nullptr, c.count, a,
        msg_cpu.data(), msg_cpu.data() + meta_bytes);

  DeviceBytes x_dev(c.count * elem, c.misalign * elem);
  x_dev.upload(x_host, c.count * elem);
  DeviceBytes e_dev(c.count * 4, c.misalign * 4);
  if (c.error_feedback) e_dev.upload(e_gpu_in.data(), c.count * 4);
  // The payload sits at message offset 32 in real messages; misalign shifts
  // the whole message so the metadata is unaligned too.
  DeviceBytes msg_dev(meta_bytes + code_bytes, 32 + c.misalign);

  qc::cuda::DeviceQuantArgs d;
  d.codec = c.codec;
  d.bits = c.bits;
  d.bucket = c.bucket;
  d.stochastic = c.stochastic;
  d.rng = a.rng;
  d.index_base = c.index_base;
  d.input_dtype = c.dtype;
  const qc::Status st =
      qc::cuda::quant_encode(x_dev.data(), c.error_feedback ? reinterpret_cast<float*>(e_dev.data()) : nullptr,
                             c.count, d, msg_dev.data(), msg_dev.data() + meta_bytes, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.message();
  sync();
  const std::vector<uint8_t> msg_gpu = msg_dev.contents();
  for (size_t i = 0; i < msg_cpu.size(); ++i) {
    ASSERT_EQ(msg_gpu[i], msg_cpu[i])
        << (i < meta_bytes ? "metadata" : "codes") << " byte "
        << (i < meta_bytes ? i : i - meta_bytes) << " differs";
  }
  if (c.error_feedback) {
    const long diff = first_float_diff(as_floats(e_dev.contents()), e_cpu);
    ASSERT_EQ(diff, -1) << "residual element " << diff << " differs";
  }

  // Decode the CPU's message on the GPU: plain, then accumulate onto data.
  std::vector<float> out_cpu(c.count);
  f.dec(msg_cpu.data(), msg_cpu.data() + meta_bytes, c.count, c.bits, c.bucket, out_cpu.data(), false);
  DeviceBytes src_dev(msg_cpu.size(), c.misalign);
  src_dev.upload(msg_cpu.data(), msg_cpu.size());
  DeviceBytes out_dev(c.count * 4, c.misalign * 4);
  qc::Status ds = qc::cuda::quant_decode(c.codec, src_dev.data(), src_dev.data() + meta_bytes, c.count,
                                         c.bits, c.bucket, reinterpret_cast<float*>(out_dev.data()),
                                         false, nullptr);
  ASSERT_TRUE(ds.is_ok()) << ds.message();
  sync();
  long diff = first_float_diff(as_floats(out_dev.contents()), out_cpu);
  ASSERT_EQ(diff, -1) << "decoded element " << diff << " differs";

  std::vector<float> acc_cpu = make_data(c.count, Data::kPlain, c.seed + 2000);
  out_dev.upload(acc_cpu.data(), c.count * 4);
  f.dec(msg_cpu.data(), msg_cpu.data() + meta_bytes, c.count, c.bits, c.bucket, acc_cpu.data(), true);
  ds = qc::cuda::quant_decode(c.codec, src_dev.data(), src_dev.data() + meta_bytes, c.count, c.bits,
                              c.bucket, reinterpret_cast<float*>(out_dev.data()), true, nullptr);
  ASSERT_TRUE(ds.is_ok()) << ds.message();
  sync();
  diff = first_float_diff(as_floats(out_dev.contents()), acc_cpu);
  ASSERT_EQ(diff, -1) << "accumulated element " << diff << " differs";
}

int min_bits(qc_codec_t c) { return c == QC_CODEC_QSGD ? 2 : 1; }
int max_bits(qc_codec_t c) { return c == QC_CODEC_ONEBIT ? 1 : 8; }

const qc_codec_t kQuantCodecs[] = {QC_CODEC_MINMAX, QC_CODEC_QSGD, QC_CODEC_ONEBIT};

// Every width, both rounding modes, both kernel paths, every data kind.
TEST(CudaQuant, EveryWidthAndBucketMatchesTheCpu) {
  const size_t buckets[] = {8, 32, 128, 1000 /* multiple of 8 */, 1, 3, 100, 129};
  const Data datas[] = {Data::kPlain, Data::kSpecial, Data::kTies, Data::kConstant};
  uint64_t seed = 1;
  for (qc_codec_t codec : kQuantCodecs)
    for (int bits = min_bits(codec); bits <= max_bits(codec); ++bits)
      for (size_t bucket : buckets)
        for (bool stochastic : {false, true})
          for (Data data : datas) {
            // The emulator takes one data kind per combination, in turn.
            if (kEmulated && static_cast<uint64_t>(data) != seed / 4 % 4) continue;
            check_quant({codec, bits, bucket, 10007 / kSizeScale, stochastic, false,
                         QC_DTYPE_FLOAT32, 0, 0, data, seed++});
            if (HasFatalFailure()) return;
          }
}

TEST(CudaQuant, ErrorFeedbackResidualMatchesTheCpu) {
  uint64_t seed = 500;
  for (qc_codec_t codec : kQuantCodecs)
    for (int bits : {1, 2, 3, 4, 8})
      for (size_t bucket : {size_t{128}, size_t{100}})
        for (bool stochastic : {false, true})
          // kHuge: buckets whose residuals the hygiene rule drops (codec_kernels.h)
          for (Data data : {Data::kPlain, Data::kSpecial, Data::kHuge}) {
            if (bits < min_bits(codec) || bits > max_bits(codec)) continue;
            check_quant({codec, bits, bucket, 4099 / kSizeScale, stochastic, true, QC_DTYPE_FLOAT32, 0, 0, data,
                         seed++});
            if (HasFatalFailure()) return;
          }
}

TEST(CudaQuant, SixteenBitInputMatchesTheCpu) {
  uint64_t seed = 900;
  for (qc_codec_t codec : kQuantCodecs)
    for (qc_dtype_t dtype : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16})
      for (size_t bucket : {size_t{64}, size_t{7}, size_t{128}}) {
        check_quant({codec, codec == QC_CODEC_ONEBIT ? 1 : 4, bucket, 3001 / kSizeScale, true, false, dtype, 0, 0,
                     Data::kSpecial, seed++});
        if (HasFatalFailure()) return;
      }
}

// Misaligned buffers take the scalar-load paths; tiny and odd counts end
// inside a code byte; offsets past 2^32 use the high word of the random index.
TEST(CudaQuant, EdgesMatchTheCpu) {
  uint64_t seed = 1300;
  for (qc_codec_t codec : kQuantCodecs)
    for (size_t bucket : {size_t{16}, size_t{5}})
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{9}, size_t{17}, size_t{255}})
        for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}}) {
          const int bits = codec == QC_CODEC_ONEBIT ? 1 : 3;
          check_quant({codec, bits, bucket, count, true, true, QC_DTYPE_FLOAT32, misalign, 0,
                       Data::kSpecial, seed++});
          if (HasFatalFailure()) return;
        }
  for (qc_codec_t codec : kQuantCodecs) {
    check_quant({codec, codec == QC_CODEC_ONEBIT ? 1 : 5, 256, 70000 / kSizeScale, true, true, QC_DTYPE_FLOAT32, 0,
                 (uint64_t{1} << 32) - 30000, Data::kPlain, seed++});
    if (HasFatalFailure()) return;
    // Bucket 128 takes the kernel for whole warps of whole buckets, here
    // with scalar loads (misaligned input), with and without feedback.
    for (bool error_feedback : {false, true}) {
      check_quant({codec, codec == QC_CODEC_ONEBIT ? 1 : 4, 128, 3001 / kSizeScale, false, error_feedback,
                   QC_DTYPE_FLOAT32, 1, 0, Data::kSpecial, seed++});
      if (HasFatalFailure()) return;
    }
  }
}

// Large buckets (few teams, many steps each) and a tensor of 2^22 elements.
TEST(CudaQuant, LargeTensorsMatchTheCpu) {
  for (qc_codec_t codec : kQuantCodecs) {
    const int bits = codec == QC_CODEC_ONEBIT ? 1 : 4;
    check_quant({codec, bits, 65536, 300000 / kSizeScale, false, true, QC_DTYPE_FLOAT32, 0, 0, Data::kPlain, 77});
    if (HasFatalFailure()) return;
    check_quant({codec, bits, 128, (size_t{1} << 22) / kSizeScale, true, true, QC_DTYPE_FLOAT32, 0, 0, Data::kPlain,
                 78});
    if (HasFatalFailure()) return;
  }
}

TEST(CudaQuant, BadArgumentsAreRefused) {
  DeviceBytes buf(4096);
  float* f = reinterpret_cast<float*>(buf.data());
  qc::cuda::DeviceQuantArgs d;
  d.codec = QC_CODEC_QSGD;
  d.bits = 1;  // qsgd needs 2..8
  EXPECT_EQ(qc::cuda::quant_encode(f, nullptr, 10, d, buf.data(), buf.data() + 64, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  d.bits = 4;
  d.bucket = 0;
  EXPECT_EQ(qc::cuda::quant_encode(f, nullptr, 10, d, buf.data(), buf.data() + 64, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  d.bucket = 32;
  d.input_dtype = QC_DTYPE_FLOAT16;  // error feedback needs float32
  EXPECT_EQ(qc::cuda::quant_encode(f, f + 100, 10, d, buf.data(), buf.data() + 64, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  d.input_dtype = QC_DTYPE_FLOAT32;
  EXPECT_EQ(qc::cuda::quant_encode(buf.data() + 1, nullptr, 10, d, buf.data(), buf.data() + 64,
                                   nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);  // float32 input at an odd address
  d.codec = QC_CODEC_TOPK;
  EXPECT_EQ(qc::cuda::quant_encode(f, nullptr, 10, d, buf.data(), buf.data() + 64, nullptr).code(),
            QC_ERROR_UNSUPPORTED);
  EXPECT_EQ(qc::cuda::quant_decode(QC_CODEC_MINMAX, buf.data(), buf.data() + 64, 10, 4, 32,
                                   reinterpret_cast<float*>(buf.data() + 2), false, nullptr)
                .code(),
            QC_ERROR_INVALID_ARGUMENT);
}

// ---- global codecs ------------------------------------------------------------------

// What the global and block-scaled checks share: the CPU codec `ref`
// encodes x (with a residual when ef) and the device's `encode(key, x, e,
// n, payload)` must write the same payload (after the 32-byte header) and
// residual; then the device's `decode(src, n, out, accumulate)` of the
// CPU's message must equal the CPU's decode, plain and accumulating. The
// payload sits at an odd address.
template <class Encode, class Decode>
void check_device_matches_cpu(const qc::Codec& ref, bool ef, const std::vector<float>& x,
                              uint64_t seed, uint64_t index_base, Encode&& encode,
                              Decode&& decode) {
  const size_t n = x.size();
  qc::RandomKey key;
  key.seed = seed;
  key.rank = static_cast<uint32_t>(seed % 3);
  key.stream = seed % 5;
  key.element_offset = index_base;
  std::vector<float> e_cpu = make_data(n, Data::kPlain, seed + 7);
  for (float& v : e_cpu) v *= 0.01f;
  const std::vector<float> e_in = e_cpu;
  std::vector<uint8_t> msg(ref.max_encoded_size(n));
  size_t written = 0;
  const qc::Status cs = ef ? ref.encode_error_compensated(x.data(), e_cpu.data(), n, key, msg.data(),
                                                          msg.size(), &written)
                           : ref.encode(x.data(), n, key, msg.data(), msg.size(), &written);
  ASSERT_TRUE(cs.is_ok()) << cs.message();
  const std::vector<uint8_t> want(msg.begin() + 32, msg.end());

  DeviceBytes x_dev(4 * n), e_dev(4 * n), payload(want.size(), 1);
  x_dev.upload(x.data(), 4 * n);
  e_dev.upload(e_in.data(), 4 * n);
  const qc::Status gs = encode(key, reinterpret_cast<float*>(x_dev.data()),
                               ef ? reinterpret_cast<float*>(e_dev.data()) : nullptr, n,
                               payload.data());
  ASSERT_TRUE(gs.is_ok()) << gs.message();
  sync();
  const std::vector<uint8_t> got = payload.contents();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "payload byte " << i << " differs";
  if (ef) {
    const long diff = first_float_diff(as_floats(e_dev.contents()), e_cpu);
    ASSERT_EQ(diff, -1) << "residual element " << diff << " differs";
  }

  for (bool accumulate : {false, true}) {
    std::vector<float> out_cpu = make_data(n, Data::kPlain, seed + 9);
    DeviceBytes out_dev(4 * n), src_dev(want.size(), 3);
    out_dev.upload(out_cpu.data(), 4 * n);
    src_dev.upload(want.data(), want.size());
    const qc::Status ds = accumulate ? ref.decode_accumulate(msg.data(), written, out_cpu.data(), n)
                                     : ref.decode(msg.data(), written, out_cpu.data(), n);
    ASSERT_TRUE(ds.is_ok()) << ds.message();
    const qc::Status gd =
        decode(src_dev.data(), n, reinterpret_cast<float*>(out_dev.data()), accumulate);
    ASSERT_TRUE(gd.is_ok()) << gd.message();
    sync();
    const long diff = first_float_diff(as_floats(out_dev.contents()), out_cpu);
    ASSERT_EQ(diff, -1) << (accumulate ? "accumulated" : "decoded") << " element " << diff;
  }
}

// The GPU's norm, codes and residual against the CPU codec (GlobalCodec),
// then the GPU decoding the CPU's message (the norm is the payload's first
// 4 bytes).
void check_global(qc_codec_t codec, int bits, bool stochastic, bool ef, const std::vector<float>& x,
                  uint64_t seed, uint64_t index_base, bool max_abs = false) {
  SCOPED_TRACE("codec " + std::to_string(codec) + " bits " + std::to_string(bits) +
               (stochastic ? " stochastic" : " nearest") + (ef ? " ef" : "") + " count " +
               std::to_string(x.size()) + " seed " + std::to_string(seed) +
               (max_abs ? " max-abs" : " l2"));
  const qc::GlobalCodec ref(codec, bits, stochastic, max_abs);
  check_device_matches_cpu(
      ref, ef, x, seed, index_base,
      [&](const qc::RandomKey& key, float* x_dev, float* e_dev, size_t n, uint8_t* payload) {
        return qc::cuda::global_encode(codec, bits, stochastic, max_abs,
                                       qc::cpu::make_random_stream(key.seed, key.rank, key.stream),
                                       index_base, x_dev, e_dev, n, payload, payload + 4, nullptr);
      },
      [&](const uint8_t* src, size_t n, float* out, bool accumulate) {
        return qc::cuda::global_decode(codec, bits, src, src + 4, n, out, accumulate, nullptr);
      });
}

TEST(CudaGlobal, LinearAndExponentialMatchTheCpu) {
  uint64_t seed = 3000;
  for (qc_codec_t codec : {QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP})
    for (int bits : {2, 3, 4, 8})
      for (bool stochastic : {false, true})
        for (bool ef : {false, true}) {
          const bool max_abs = (bits + (ef ? 1 : 0)) % 2 == 0;  // both scales, every other case
          check_global(codec, bits, stochastic, ef, make_data(10007 / kSizeScale, Data::kPlain, seed),
                       seed, 0, max_abs);
          ++seed;
          if (HasFatalFailure()) return;
        }
}

// A NaN anywhere makes the whole message NaN; an all-zero tensor has norm 0;
// counts that end inside a byte; offsets past 2^32 for the random bits.
TEST(CudaGlobal, EdgesMatchTheCpu) {
  uint64_t seed = 4000;
  for (qc_codec_t codec : {QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP}) {
    for (bool max_abs : {false, true}) {
      check_global(codec, 4, true, true, make_data(3001 / kSizeScale, Data::kSpecial, seed), seed, 0,
                   max_abs);
      if (HasFatalFailure()) return;
      check_global(codec, 3, false, true, std::vector<float>(100, 0.0f), ++seed, 0, max_abs);
      if (HasFatalFailure()) return;
    }
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{17}}) {
      ++seed;
      check_global(codec, 5, true, false, make_data(n, Data::kPlain, seed), seed, 0);
      if (HasFatalFailure()) return;
    }
    ++seed;
    check_global(codec, 4, true, true, make_data(40000 / kSizeScale, Data::kTies, seed), seed,
                 (uint64_t{1} << 32) - 1000);
    if (HasFatalFailure()) return;
    // Residual hygiene (codec_kernels.h): a finite norm whose level gap is
    // over the limit drops every residual; a smaller one keeps them.
    for (float magnitude : {1e17f, 1e15f}) {
      std::vector<float> big(10007 / kSizeScale);
      for (size_t i = 0; i < big.size(); ++i) big[i] = magnitude * static_cast<float>(int(i % 7) - 3);
      check_global(codec, 4, false, true, big, ++seed, 0);
      if (HasFatalFailure()) return;
    }
  }
}

// ---- block-scaled codecs (MX, nvfp4) -----------------------------------------------

const qc_codec_t kBlockCodecs[] = {QC_CODEC_MXFP8, QC_CODEC_MXFP8_E5M2, QC_CODEC_MXFP6,
                                   QC_CODEC_MXFP6_E3M2, QC_CODEC_MXFP4, QC_CODEC_MXINT8,
                                   QC_CODEC_NVFP4};

// The GPU's payload (scales, codes) and residual against the CPU codec
// (BlockScaledCodec), then the GPU decoding the CPU's message.
void check_block(qc_codec_t codec, bool stochastic, bool ef, const std::vector<float>& x,
                 uint64_t seed, uint64_t index_base) {
  SCOPED_TRACE("codec " + std::to_string(codec) + (stochastic ? " stochastic" : " nearest") +
               (ef ? " ef" : "") + " count " + std::to_string(x.size()) + " seed " +
               std::to_string(seed));
  const qc::BlockScaledCodec ref(codec, stochastic);
  qc::cpu::BlockArgs args = qc::block_kernel_args(codec, stochastic);
  args.index_base = index_base;
  check_device_matches_cpu(
      ref, ef, x, seed, index_base,
      [&](const qc::RandomKey& key, float* x_dev, float* e_dev, size_t n, uint8_t* payload) {
        args.rng = qc::cpu::make_random_stream(key.seed, key.rank, key.stream);
        return qc::cuda::block_encode(args, x_dev, e_dev, n, payload, nullptr);
      },
      [&](const uint8_t* src, size_t n, float* out, bool accumulate) {
        return qc::cuda::block_decode(args, src, n, out, accumulate, nullptr);
      });
}

TEST(CudaBlockScaled, EveryFormatMatchesTheCpu) {
  uint64_t seed = 6000;
  for (qc_codec_t codec : kBlockCodecs)
    for (bool stochastic : {false, true})
      for (bool ef : {false, true}) {
        check_block(codec, stochastic, ef, make_data(10007 / kSizeScale, Data::kPlain, seed), seed, 0);
        ++seed;
        if (HasFatalFailure()) return;
      }
}

// NaN/Inf blocks, zero blocks, ties, huge values, counts that end inside a
// block or a code byte, offsets past 2^32 for the random bits, and nvfp4
// messages large enough for the partial maxima of its message scale.
TEST(CudaBlockScaled, EdgesMatchTheCpu) {
  uint64_t seed = 7000;
  for (qc_codec_t codec : kBlockCodecs) {
    for (Data data : {Data::kSpecial, Data::kTies, Data::kConstant, Data::kHuge}) {
      check_block(codec, (seed % 2) == 0, true, make_data(3001 / kSizeScale, data, seed), seed, 0);
      ++seed;
      if (HasFatalFailure()) return;
    }
    check_block(codec, false, true, std::vector<float>(100, 0.0f), ++seed, 0);
    if (HasFatalFailure()) return;
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{17}, size_t{33}}) {
      ++seed;
      check_block(codec, true, false, make_data(n, Data::kPlain, seed), seed, 0);
      if (HasFatalFailure()) return;
    }
    ++seed;
    check_block(codec, true, true, make_data(5000 / kSizeScale, Data::kTies, seed), seed,
                (uint64_t{1} << 32) - 1000);
    if (HasFatalFailure()) return;
  }
  for (bool ef : {false, true}) {
    ++seed;
    check_block(QC_CODEC_NVFP4, false, ef, make_data(40000, Data::kSpecial, seed), seed, 0);
    if (HasFatalFailure()) return;
    // The message's largest |x| alone at either end (first and last chunk).
    for (size_t at : {size_t{0}, size_t{39999}}) {
      ++seed;
      std::vector<float> big = make_data(40000, Data::kPlain, seed);
      big[at] = 3e3f;
      check_block(QC_CODEC_NVFP4, ef, ef, big, seed, 0);
      if (HasFatalFailure()) return;
    }
  }
}

// ---- casts ------------------------------------------------------------------------

TEST(CudaCast, Fp16AndBf16MatchTheCpu) {
  for (qc_codec_t codec : {QC_CODEC_FP16, QC_CODEC_BF16}) {
    const qc_dtype_t dtype = codec == QC_CODEC_FP16 ? QC_DTYPE_FLOAT16 : QC_DTYPE_BFLOAT16;
    // misalign 0: x 16-byte and the wire 8-byte aligned (four elements per
    // thread, then the count % 4 tail); 1: an odd wire (byte stores); 2: a
    // 2-byte aligned wire and x 4 bytes off 16 (one element per thread).
    for (size_t misalign : {size_t{0}, size_t{1}, size_t{2}}) {
      SCOPED_TRACE(std::string(codec == QC_CODEC_FP16 ? "fp16" : "bf16") + " misalign " +
                   std::to_string(misalign));
      std::vector<float> x = make_data(20011 / kSizeScale, Data::kSpecial, 31 + misalign);
      // Values at the half's rounding and overflow edges.
      const float edges[] = {65504.0f, 65519.99f, 65520.0f, 5.9604645e-8f, 2.9802322e-8f,
                             2.9802326e-8f, 6.1035156e-5f, -0.0f, 1.0f + 1.0f / 2048};
      for (size_t i = 0; i < sizeof edges / sizeof edges[0]; ++i) x[i] = edges[i];
      const size_t n = x.size();
      std::vector<uint8_t> wire_cpu(2 * n);
      qc::cpu::from_float32(x.data(), dtype, wire_cpu.data(), n);

      const size_t float_offset = misalign == 2 ? 4 : 0;
      DeviceBytes x_dev(4 * n, float_offset);
      x_dev.upload(x.data(), 4 * n);
      DeviceBytes wire_dev(2 * n, 32 + misalign);
      qc::Status st = qc::cuda::cast_encode(codec, reinterpret_cast<float*>(x_dev.data()),
                                            nullptr, n, wire_dev.data(), nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      ASSERT_EQ(wire_dev.contents(), wire_cpu);

      std::vector<float> back_cpu(n);
      qc::cpu::to_float32(wire_cpu.data(), dtype, back_cpu.data(), n);
      DeviceBytes back_dev(4 * n, float_offset);
      st = qc::cuda::cast_decode(codec, wire_dev.data(), n, reinterpret_cast<float*>(back_dev.data()),
                                 false, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      ASSERT_EQ(first_float_diff(as_floats(back_dev.contents()), back_cpu), -1);

      std::vector<float> acc = make_data(n, Data::kPlain, 99);
      back_dev.upload(acc.data(), 4 * n);
      qc::cpu::accumulate_to_float32(wire_cpu.data(), dtype, acc.data(), n);
      st = qc::cuda::cast_decode(codec, wire_dev.data(), n, reinterpret_cast<float*>(back_dev.data()),
                                 true, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      ASSERT_EQ(first_float_diff(as_floats(back_dev.contents()), acc), -1);
    }
  }
}

// First 16-bit wire value (fp16 or bf16) that differs, or -1; two NaNs are
// equal. first_float_diff's rule for values arithmetic made: z = x + e keeps
// a NaN x's payload on x86 but is CUDA's canonical NaN on the GPU (seen on
// an H200, 2026-11-26), and its cast carries that payload onto the wire.
// a and b are the same size.
long first_wire_half_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                          bool bf16) {
  auto is_nan = [bf16](uint16_t h) {
    return bf16 ? (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0
                : (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
  };
  for (size_t i = 0; i + 1 < a.size(); i += 2) {
    const uint16_t ha = static_cast<uint16_t>(a[i] | a[i + 1] << 8);
    const uint16_t hb = static_cast<uint16_t>(b[i] | b[i + 1] << 8);
    if (ha != hb && !(is_nan(ha) && is_nan(hb))) return static_cast<long>(i / 2);
  }
  return -1;
}

// The error-compensated cast (error feedback on device values) against the
// CPU codec's encode_error_compensated: the same payload bytes and the same
// residuals, bit for bit except NaN payloads (above), over two encodes (the
// second starts from the first's residuals), NaN and the half's overflow
// edge included.
TEST(CudaCast, ErrorCompensatedEncodeMatchesTheCpuCodec) {
  for (qc_codec_t codec : {QC_CODEC_FP16, QC_CODEC_BF16}) {
    SCOPED_TRACE(codec == QC_CODEC_FP16 ? "fp16" : "bf16");
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = codec;
    std::unique_ptr<qc::Codec> cpu_codec;
    ASSERT_TRUE(qc::make_codec(p, QC_DTYPE_FLOAT32, &cpu_codec).is_ok());
    const size_t n = 10007 / kSizeScale;
    std::vector<float> e_cpu = make_data(n, Data::kPlain, 5);
    for (float& v : e_cpu) v *= 1e-3f;
    DeviceBytes e_dev(4 * n);
    e_dev.upload(e_cpu.data(), 4 * n);
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      std::vector<float> x = make_data(n, Data::kSpecial, 41 + round);
      x[0] = 65519.99f;  // rounds to the largest half; with e, perhaps to infinity
      std::vector<uint8_t> msg(cpu_codec->max_encoded_size(n));
      size_t written = 0;
      ASSERT_TRUE(cpu_codec
                      ->encode_error_compensated(x.data(), e_cpu.data(), n, qc::RandomKey{},
                                                 msg.data(), msg.size(), &written)
                      .is_ok());
      const std::vector<uint8_t> want(msg.begin() + 32, msg.begin() + written);
      DeviceBytes x_dev(4 * n);
      x_dev.upload(x.data(), 4 * n);
      DeviceBytes wire_dev(2 * n, 32);
      qc::Status st = qc::cuda::cast_encode(codec, reinterpret_cast<float*>(x_dev.data()),
                                            reinterpret_cast<float*>(e_dev.data()), n,
                                            wire_dev.data(), nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      const std::vector<uint8_t> got = wire_dev.contents();
      ASSERT_EQ(got.size(), want.size());
      const long at = first_wire_half_diff(got, want, codec == QC_CODEC_BF16);
      ASSERT_EQ(at, -1) << "wire value " << at << ": device 0x" << std::hex
                        << (got[2 * at] | got[2 * at + 1] << 8) << ", CPU 0x"
                        << (want[2 * at] | want[2 * at + 1] << 8) << " (x = " << std::dec
                        << x[at] << ")";
      ASSERT_EQ(first_float_diff(as_floats(e_dev.contents()), e_cpu), -1);
    }
  }
}

// ---- the squared norm of the layer statistics --------------------------------------

// norm_kernels.cu: the host loop's sum to rounding (the device adds in its
// own order), the same double on a second run, NaN and infinity as the host
// sum gives them, nothing written past the scratch, bad pointers refused.
TEST(CudaNorm, SquaredNormMatchesTheHostSum) {
  const size_t kSizes[] = {0, 1, 31, 1000, 300007 / kSizeScale};
  for (size_t n : kSizes) {
    for (int special = 0; special < 3; ++special) {
      SCOPED_TRACE("n " + std::to_string(n) + " special " + std::to_string(special));
      std::vector<float> x = make_data(n, Data::kPlain, 7 + n);
      if (n > 0 && special == 1) x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      if (n > 0 && special == 2) x[n - 1] = -std::numeric_limits<float>::infinity();
      double want = 0;
      for (float v : x) want += double(v) * v;
      DeviceBytes x_dev(4 * n);
      x_dev.upload(x.data(), 4 * n);
      DeviceBytes scratch(qc::cuda::kNormScratchBytes);
      double got[2] = {-1, -1};
      for (double& g : got) {
        qc::Status st = qc::cuda::squared_norm_on_device(reinterpret_cast<float*>(x_dev.data()),
                                                         n, scratch.data(), nullptr);
        ASSERT_TRUE(st.is_ok()) << st.message();
        sync();
        dev_download(&g, qc::cuda::squared_norm_result(scratch.data()), sizeof g);
      }
      scratch.contents();  // the canaries after the scratch
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[0]));
      } else if (std::isinf(want)) {
        EXPECT_EQ(got[0], want);
      } else {
        EXPECT_NEAR(got[0], want, 1e-12 * want);
      }
      EXPECT_EQ(std::memcmp(&got[0], &got[1], sizeof(double)), 0) << "two runs differ";
      if (n == 0) {
        EXPECT_EQ(got[0], 0.0);
      }
    }
  }
  DeviceBytes x_dev(64);
  DeviceBytes scratch(qc::cuda::kNormScratchBytes + 8);
  EXPECT_EQ(qc::cuda::squared_norm_on_device(reinterpret_cast<float*>(x_dev.data() + 2), 4,
                                             scratch.data(), nullptr)
                .code(),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::squared_norm_on_device(reinterpret_cast<float*>(x_dev.data()), 4,
                                             scratch.data() + 4, nullptr)
                .code(),
            QC_ERROR_INVALID_ARGUMENT);
}

// ---- the arithmetic between codec calls (vector_kernels.cu) -----------------------

// add, scale, zero, widen and narrow against the host path's loops
// (CollectiveContext's dst[i] += src[i], dst[i] *= factor; cpu::to_float32 and
// from_float32): every element bit for bit, NaN, infinities, -0 and
// denormals included; buffers 4 bytes off the allocation's alignment; nothing
// written past the count (canaries), count 0 writing nothing.
TEST(CudaVector, ArithmeticMatchesTheHostLoops) {
  const size_t kSizes[] = {0, 1, 7, 1000, 65537 / kSizeScale};
  for (size_t n : kSizes) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> a = make_data(n, Data::kSpecial, 11 + n);
    const std::vector<float> b = make_data(n, Data::kSpecial, 12 + n);
    DeviceBytes dst(4 * n, 4), src(4 * n, 4);

    std::vector<float> want = a;
    for (size_t i = 0; i < n; ++i) want[i] += b[i];
    dst.upload(a.data(), 4 * n);
    src.upload(b.data(), 4 * n);
    qc::Status st = qc::cuda::add_values(reinterpret_cast<float*>(dst.data()),
                                         reinterpret_cast<float*>(src.data()), n, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    sync();
    ASSERT_EQ(first_float_diff(as_floats(dst.contents()), want), -1) << "add";
    ASSERT_EQ(first_float_diff(as_floats(src.contents()), b), -1) << "add changed its source";

    for (float factor : {1.0f / 3, -0.0f, 1e-30f}) {
      SCOPED_TRACE("factor " + std::to_string(factor));
      std::vector<float> scaled = a;
      for (float& v : scaled) v *= factor;
      dst.upload(a.data(), 4 * n);
      st = qc::cuda::scale_values(reinterpret_cast<float*>(dst.data()), factor, n, nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      ASSERT_EQ(first_float_diff(as_floats(dst.contents()), scaled), -1) << "scale";
    }

    dst.upload(a.data(), 4 * n);
    st = qc::cuda::zero_values(reinterpret_cast<float*>(dst.data()), n, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    sync();
    for (uint8_t byte : dst.contents()) ASSERT_EQ(byte, 0) << "zero";

    for (qc_dtype_t dtype : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
      SCOPED_TRACE(dtype == QC_DTYPE_FLOAT16 ? "float16" : "bfloat16");
      std::vector<uint8_t> narrow_want(2 * n);
      qc::cpu::from_float32(a.data(), dtype, narrow_want.data(), n);
      DeviceBytes half(2 * n, 2);
      dst.upload(a.data(), 4 * n);
      st = qc::cuda::narrow_values(reinterpret_cast<float*>(dst.data()), dtype, half.data(), n,
                                   nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      ASSERT_EQ(half.contents(), narrow_want) << "narrow";

      std::vector<float> widen_want(n);
      qc::cpu::to_float32(narrow_want.data(), dtype, widen_want.data(), n);
      st = qc::cuda::widen_values(half.data(), dtype, reinterpret_cast<float*>(dst.data()), n,
                                  nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      sync();
      ASSERT_EQ(first_float_diff(as_floats(dst.contents()), widen_want), -1) << "widen";
    }
  }
}

// Misaligned pointers and a dtype that is not 16-bit are refused before any
// launch, and nothing is written.
TEST(CudaVector, BadArgumentsAreRefused) {
  DeviceBytes buf(64);
  float* f = reinterpret_cast<float*>(buf.data());
  float* odd = reinterpret_cast<float*>(buf.data() + 2);
  EXPECT_EQ(qc::cuda::add_values(odd, f, 4, nullptr).code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::add_values(f, odd, 4, nullptr).code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::scale_values(odd, 2.0f, 4, nullptr).code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::widen_values(buf.data() + 1, QC_DTYPE_FLOAT16, f, 4, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::widen_values(buf.data(), QC_DTYPE_FLOAT32, f, 4, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::narrow_values(f, QC_DTYPE_BFLOAT16, buf.data() + 1, 4, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc::cuda::narrow_values(odd, QC_DTYPE_FLOAT16, buf.data(), 4, nullptr).code(),
            QC_ERROR_INVALID_ARGUMENT);
  sync();
  for (uint8_t byte : buf.contents()) ASSERT_EQ(byte, kCanary);
}

// ---- golden vectors ---------------------------------------------------------------

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// The golden files: where the build saw them, unless QC_TEST_DATA_DIR says
// otherwise (a test binary carried to a GPU machine runs from another tree).
std::string test_data_dir() {
  const char* env = std::getenv("QC_TEST_DATA_DIR");
  return env != nullptr && *env != '\0' ? env : QC_TEST_DATA_DIR;
}

// The GPU payload of each golden case equals the checked-in message's bytes
// after its 32-byte header (the header is the host's; the payload the GPU's).
TEST(CudaGolden, PayloadsEqualTheGoldenVectors) {
  const std::vector<float> x = qc_golden::golden_input();
  const qc::cpu::RandomStream rng = qc::cpu::make_random_stream(qc_golden::kSeed, 0, 0);
  int checked = 0;
  for (const qc_golden::GoldenCase& g : qc_golden::golden_cases()) {
    const bool quant = g.codec == QC_CODEC_MINMAX || g.codec == QC_CODEC_QSGD || g.codec == QC_CODEC_ONEBIT;
    const bool cast = g.codec == QC_CODEC_FP16 || g.codec == QC_CODEC_BF16;
    const bool global = g.codec == QC_CODEC_GLOBAL_LINEAR || g.codec == QC_CODEC_GLOBAL_EXP;
    if (!quant && !cast && !global) continue;  // none is a copy; topk has no CUDA kernel
    SCOPED_TRACE(g.file);
    std::vector<uint8_t> golden;
    ASSERT_TRUE(read_file(test_data_dir() + "/" + g.file, &golden)) << test_data_dir();
    ASSERT_GT(golden.size(), 32u);
    const std::vector<uint8_t> want(golden.begin() + 32, golden.end());

    DeviceBytes x_dev(4 * x.size());
    x_dev.upload(x.data(), 4 * x.size());
    DeviceBytes payload(want.size(), 32);
    qc::Status st;
    if (quant) {
      qc::cuda::DeviceQuantArgs d;
      d.codec = g.codec;
      d.bits = g.codec == QC_CODEC_ONEBIT ? 1 : g.bits;
      d.bucket = static_cast<size_t>(g.bucket);
      d.stochastic = g.rounding == QC_ROUND_STOCHASTIC;
      d.rng = rng;
      const size_t meta = qc::cpu::bucket_count(x.size(), d.bucket) * (g.codec == QC_CODEC_MINMAX ? 8 : 4);
      st = qc::cuda::quant_encode(x_dev.data(), nullptr, x.size(), d, payload.data(),
                                  payload.data() + meta, nullptr);
    } else if (global) {
      st = qc::cuda::global_encode(g.codec, g.bits, g.rounding == QC_ROUND_STOCHASTIC,
                                   g.scale == QC_SCALE_MAX_ABS, rng, 0,
                                   reinterpret_cast<float*>(x_dev.data()), nullptr, x.size(),
                                   payload.data(), payload.data() + 4, nullptr);
    } else {
      st = qc::cuda::cast_encode(g.codec, reinterpret_cast<float*>(x_dev.data()), nullptr,
                                 x.size(), payload.data(), nullptr);
    }
    ASSERT_TRUE(st.is_ok()) << st.message();
    sync();
    ASSERT_EQ(payload.contents(), want);
    ++checked;
  }
  EXPECT_EQ(checked, 13);  // fp16, bf16, five minmax, two qsgd, one onebit, three global
}

}  // namespace
