// qc-cuda-bench: throughput of the CUDA codec kernels (src/cuda) on one
// tensor in device memory, next to a device-to-device copy of the same
// tensor measured in the same run. GB/s counts input bytes (the float32
// tensor) for every row, the copy included, so "x copy" is the kernel's
// speed as a fraction of just moving the tensor once. Issue 8's target:
// minmax 4-bit encode >= 0.80 x copy.
//
//   qc-cuda-bench [--size MIB] [-i ITERS] [--check]
//
// --check also encodes the tensor on the CPU (scalar reference) and compares
// every byte, the residual included, for each encode row.
// Without a CUDA device it prints "no CUDA device" and exits 77.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "cpu/codec_kernels.h"
#include "cpu/dtype_convert.h"
#include "cpu/random.h"
#include "cuda/device_codec.h"
#include "qc_tool_cli.h"

namespace {

constexpr const char* kProg = "qc-cuda-bench";

struct Options {
  size_t mib = 256;
  int iters = 20;
  bool check = false;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"GB/s of the CUDA codec kernels on one float32 tensor in device memory, next to\n"
               "a device-to-device copy measured in the same run.",
               kProg};
  qctool::init_app(app, "Exit status: 0, 1 a CUDA error or (--check) an encode that differs from "
                        "the CPU,\n2 bad usage, 77 no CUDA device.");
  qctool::add_integer(app, "--size", &o.mib, size_t{1}, size_t{1} << 20,
                      "tensor size in MiB (default 256)");
  qctool::add_integer(app, "-i,--iters", &o.iters, 1, 1000000,
                      "timed runs per row, after 3 untimed; the median is\nreported (default 20)");
  app.add_flag("--check", o.check,
               "also encode on the CPU (scalar reference) and compare\nevery byte of each encode row");
  qctool::parse_or_exit(app, argc, argv);
  return o;
}

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    const cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s: %s: %s\n", kProg, #call, cudaGetErrorString(err_));     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

void status_ok(const qc::Status& s, const char* what) {
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", kProg, what, s.message().c_str());
    std::exit(1);
  }
}

// Median of `iters` timed runs after 3 untimed ones, in milliseconds.
// `reset` runs before each (untimed), e.g. to restore the residual.
double time_ms(int iters, const std::function<void()>& op, const std::function<void()>& reset) {
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  std::vector<double> t;
  for (int i = 0; i < iters + 3; ++i) {
    if (reset) reset();
    CUDA_OK(cudaEventRecord(start));
    op();
    CUDA_OK(cudaEventRecord(stop));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 3) t.push_back(ms);
  }
  CUDA_OK(cudaEventDestroy(start));
  CUDA_OK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  qc_codec_t codec;
  int bits;
  size_t bucket;
  const char* name;
};

const qc::cpu::KernelTable& ref() { return *qc::cpu::scalar_kernels(); }

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (qc::cuda::device_count() == 0) {
    std::printf("%s: no CUDA device\n", kProg);
    return 77;
  }
  int dev = 0, driver = 0, runtime = 0;
  CUDA_OK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  CUDA_OK(cudaDriverGetVersion(&driver));
  CUDA_OK(cudaRuntimeGetVersion(&runtime));
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const size_t count = o.mib * (size_t{1} << 20) / 4;
  const double in_gb = static_cast<double>(count) * 4 / 1e9;
  std::printf("# %s: %s (sm_%d%d, %d SMs), driver %d, runtime %d, %s\n", kProg, prop.name,
              prop.major, prop.minor, prop.multiProcessorCount, driver, runtime, date);
  std::printf("# tensor %zu MiB float32 (%zu elements), median of %d runs; GB/s = input bytes / time\n",
              o.mib, count, o.iters);

  std::vector<float> x(count), e0(count);
  qc::cpu::RandomStream noise = qc::cpu::make_random_stream(7, 0, 0);
  for (size_t i = 0; i < count; ++i) {
    x[i] = (qc::cpu::random_uniform(noise, i) - 0.5f) * 4.0f;
    e0[i] = (qc::cpu::random_uniform(noise, i + count) - 0.5f) * 0.01f;
  }
  float *x_dev, *e_dev, *copy_dev, *out_dev;
  uint8_t* msg_dev;
  const size_t msg_cap = count * 4 + (count / 8 + 1) * 8;  // >= every codec's payload
  CUDA_OK(cudaMalloc(&x_dev, count * 4));
  CUDA_OK(cudaMalloc(&e_dev, count * 4));
  CUDA_OK(cudaMalloc(&copy_dev, count * 4));
  CUDA_OK(cudaMalloc(&out_dev, count * 4));
  CUDA_OK(cudaMalloc(&msg_dev, msg_cap));
  CUDA_OK(cudaMemcpy(x_dev, x.data(), count * 4, cudaMemcpyHostToDevice));
  const auto reset_e = [&] { CUDA_OK(cudaMemcpy(e_dev, e0.data(), count * 4, cudaMemcpyHostToDevice)); };

  const double copy_ms = time_ms(
      o.iters, [&] { CUDA_OK(cudaMemcpyAsync(copy_dev, x_dev, count * 4, cudaMemcpyDeviceToDevice)); },
      nullptr);
  const double copy_gbs = in_gb / (copy_ms / 1e3);
  std::printf("%-8s %4s %6s %-14s %10s %9s %7s %s\n", "codec", "bits", "bucket", "op", "time_us",
              "GB/s", "xcopy", o.check ? "cpu==gpu" : "");
  std::printf("%-8s %4s %6s %-14s %10.1f %9.1f %7.2f\n", "copy", "-", "-", "d2d", copy_ms * 1e3,
              copy_gbs, 1.0);

  const Row rows[] = {
      {QC_CODEC_MINMAX, 4, 128, "minmax"}, {QC_CODEC_MINMAX, 8, 128, "minmax"},
      {QC_CODEC_MINMAX, 2, 128, "minmax"}, {QC_CODEC_MINMAX, 1, 128, "minmax"},
      {QC_CODEC_MINMAX, 4, 100, "minmax"}, {QC_CODEC_QSGD, 4, 128, "qsgd"},
      {QC_CODEC_ONEBIT, 1, 128, "onebit"}, {QC_CODEC_FP16, 16, 0, "fp16"},
      {QC_CODEC_BF16, 16, 0, "bf16"},
  };
  int failures = 0;
  for (const Row& r : rows) {
    const bool cast = r.codec == QC_CODEC_FP16 || r.codec == QC_CODEC_BF16;
    const size_t meta = cast ? 0 : qc::cpu::bucket_count(count, r.bucket) * (r.codec == QC_CODEC_MINMAX ? 8 : 4);
    uint8_t* codes = msg_dev + meta;
    qc::cuda::DeviceQuantArgs a;
    a.codec = r.codec;
    a.bits = r.bits;
    a.bucket = r.bucket;
    a.rng = qc::cpu::make_random_stream(42, 0, 0);
    const auto encode = [&](float* e) {
      if (cast) status_ok(qc::cuda::cast_encode(r.codec, x_dev, nullptr, count, msg_dev, nullptr), "encode");
      else status_ok(qc::cuda::quant_encode(x_dev, e, count, a, msg_dev, codes, nullptr), "encode");
    };
    const auto decode = [&](bool acc) {
      if (cast) status_ok(qc::cuda::cast_decode(r.codec, msg_dev, count, out_dev, acc, nullptr), "decode");
      else status_ok(qc::cuda::quant_decode(r.codec, msg_dev, codes, count, r.bits, r.bucket, out_dev, acc, nullptr), "decode");
    };
    struct Op {
      const char* name;
      std::function<void()> run;
      std::function<void()> reset;
    };
    std::vector<Op> ops = {{"encode", [&] { encode(nullptr); }, nullptr}};
    if (!cast) ops.push_back({"encode+ef(DQE)", [&] { encode(e_dev); }, reset_e});
    ops.push_back({"decode", [&] { decode(false); }, nullptr});
    ops.push_back({"decode-acc", [&] { decode(true); }, nullptr});
    for (const Op& op : ops) {
      if (op.name[0] == 'd') encode(nullptr);  // decode a real message
      const double ms = time_ms(o.iters, op.run, op.reset);
      std::string verdict;
      if (o.check && std::strncmp(op.name, "encode", 6) == 0) {
        const bool ef = op.reset != nullptr;
        if (ef) reset_e();
        op.run();
        CUDA_OK(cudaDeviceSynchronize());
        const size_t bytes = cast ? 2 * count : meta + qc::cpu::codes_bytes(count, r.bits);
        std::vector<uint8_t> gpu(bytes), cpu(bytes);
        CUDA_OK(cudaMemcpy(gpu.data(), msg_dev, bytes, cudaMemcpyDeviceToHost));
        std::vector<float> e_cpu = e0, e_gpu(ef ? count : 0);
        if (cast) {
          qc::cpu::from_float32(x.data(), r.codec == QC_CODEC_FP16 ? QC_DTYPE_FLOAT16 : QC_DTYPE_BFLOAT16,
                                cpu.data(), count);
        } else {
          qc::cpu::QuantArgs ca;
          ca.bits = r.bits;
          ca.bucket = r.bucket;
          ca.rng = a.rng;
          const auto fn = r.codec == QC_CODEC_MINMAX ? ref().minmax_encode
                          : r.codec == QC_CODEC_QSGD ? ref().qsgd_encode
                                                     : ref().onebit_encode;
          fn(x.data(), ef ? e_cpu.data() : nullptr, count, ca, cpu.data(), cpu.data() + meta);
        }
        bool same = gpu == cpu;
        if (ef) {
          CUDA_OK(cudaMemcpy(e_gpu.data(), e_dev, count * 4, cudaMemcpyDeviceToHost));
          same = same && std::memcmp(e_gpu.data(), e_cpu.data(), count * 4) == 0;
        }
        verdict = same ? "yes" : "NO";
        if (!same) ++failures;
      }
      const double gbs = in_gb / (ms / 1e3);
      std::printf("%-8s %4d %6zu %-14s %10.1f %9.1f %7.2f %s\n", r.name, r.bits, r.bucket, op.name,
                  ms * 1e3, gbs, gbs / copy_gbs, verdict.c_str());
    }
  }
  cudaFree(x_dev);
  cudaFree(e_dev);
  cudaFree(copy_dev);
  cudaFree(out_dev);
  cudaFree(msg_dev);
  if (failures != 0) {
    std::printf("# %d encode(s) differ from the CPU reference\n", failures);
    return 1;
  }
  return 0;
}
