// The CPU codecs standing in for the CUDA kernels (qc::DeviceMessageCodec)
// over a FakeDevice's memory, so the code that runs the codec on the device
// is tested without a GPU. It counts and records what it is asked to do.
#ifndef QC_TESTS_UNIT_FAKE_DEVICE_CODEC_H
#define QC_TESTS_UNIT_FAKE_DEVICE_CODEC_H

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/codecs/device_message_codec.h"
#include "core/communicator.h"
#include "core/executors/input_norm.h"
#include "cpu/dtype_convert.h"
#include "fake_device.h"

namespace qcfake {

// The CUDA kernels write the CPU's bytes (tests/cuda), so the CPU codecs
// stand in for them exactly. One per rank: not thread-safe.
class CpuMessageCodec final : public qc::DeviceMessageCodec {
 public:
  qc::Status encode(const qc::Codec& codec, const qc::WireHeader& h, const float* src,
                    const qc::RandomKey& key, float* residual, uint8_t* payload,
                    void* stream) const override {
    ++encodes;
    if (residual != nullptr) ++compensated_encodes;
    streams.push_back(stream);
    expect_device(src, h.count * 4, "encode input");
    expect_device(payload, h.payload_bytes, "encode output");
    if (residual != nullptr) expect_device(residual, h.count * 4, "encode residuals");
    std::vector<uint8_t> msg(codec.max_encoded_size(h.count));
    size_t written = 0;
    QC_RETURN_IF_ERROR(
        residual != nullptr
            ? codec.encode_error_compensated(src, residual, h.count, key, msg.data(), msg.size(),
                                             &written)
            : codec.encode(src, h.count, key, msg.data(), msg.size(), &written));
    if (written != qc::kWireHeaderBytes + h.payload_bytes) {
      return qc::internal_error("the header promised another payload size");
    }
    std::memcpy(payload, msg.data() + qc::kWireHeaderBytes, h.payload_bytes);
    return qc::Status::ok();
  }
  qc::Status decode(const qc::Codec& codec, const qc::WireHeader& h, const uint8_t* payload,
                    float* dst, bool accumulate, void* stream) const override {
    ++(accumulate ? accumulating_decodes : decodes);
    streams.push_back(stream);
    expect_device(payload, h.payload_bytes, "decode input");
    expect_device(dst, h.count * 4, "decode output");
    if (fail_decode) return qc::internal_error("fake decode failed");
    std::vector<uint8_t> msg(qc::kWireHeaderBytes + h.payload_bytes);
    qc::write_wire_header(h, msg.data());
    std::memcpy(msg.data() + qc::kWireHeaderBytes, payload, h.payload_bytes);
    return accumulate ? codec.decode_accumulate(msg.data(), msg.size(), dst, h.count)
                      : codec.decode(msg.data(), msg.size(), dst, h.count);
  }
  qc::Status zero(float* dst, size_t count, void* stream) const override {
    return arithmetic("zero", dst, count, stream, [&](size_t i) { dst[i] = 0.0f; });
  }
  qc::Status add(float* dst, const float* src, size_t count, void* stream) const override {
    expect_device(src, count * 4, "add input");
    return arithmetic("add", dst, count, stream, [&](size_t i) { dst[i] += src[i]; });
  }
  qc::Status scale(float* dst, float factor, size_t count, void* stream) const override {
    return arithmetic("scale", dst, count, stream, [&](size_t i) { dst[i] *= factor; });
  }
  qc::Status copy(float* dst, const float* src, size_t count, void* stream) const override {
    expect_device(src, count * 4, "copy input");
    return arithmetic("copy", dst, count, stream, [&](size_t i) { dst[i] = src[i]; });
  }
  qc::Status widen(const void* src, qc_dtype_t dtype, float* dst, size_t count,
                   void* stream) const override {
    expect_device(src, count * 2, "widen input");
    return arithmetic("widen", dst, count, stream,
                      [&](size_t i) { qc::cpu::to_float32(static_cast<const uint16_t*>(src) + i,
                                                          dtype, dst + i, 1); });
  }
  qc::Status narrow(const float* src, qc_dtype_t dtype, void* dst, size_t count,
                    void* stream) const override {
    expect_device(src, count * 4, "narrow input");
    expect_device(dst, count * 2, "narrow output");
    arithmetic_ops.push_back("narrow");
    streams.push_back(stream);
    qc::cpu::from_float32(src, dtype, dst, count);
    return qc::Status::ok();
  }
  qc::Status synchronize(void* stream) const override {
    ++synchronizations;
    streams.push_back(stream);
    return qc::Status::ok();
  }
  // The host loop's sum, so the device calls' layer norms equal the host
  // path's exactly here (on a GPU they agree to rounding).
  qc::Status squared_norm(const float* src, size_t count, void* scratch, void* stream,
                          double* out) const override {
    ++norms;
    streams.push_back(stream);
    expect_device(src, count * 4, "norm input");
    expect_device(scratch, kNormScratchBytes, "norm scratch");
    if (reinterpret_cast<uintptr_t>(scratch) % 8 != 0) ADD_FAILURE() << "norm scratch misaligned";
    if (fail_norm) return qc::Status(QC_ERROR_INTERNAL, "injected norm failure");
    *out = qc::InputNorm::of(src, count);
    return qc::Status::ok();
  }

  // When set, every pointer handed in must be this fake's device memory.
  const FakeDevice* device = nullptr;
  bool fail_decode = false;
  bool fail_norm = false;
  mutable int encodes = 0, compensated_encodes = 0, decodes = 0, accumulating_decodes = 0,
              synchronizations = 0, norms = 0;
  mutable std::vector<std::string> arithmetic_ops;
  mutable std::vector<void*> streams;

 private:
  void expect_device(const void* p, size_t bytes, const char* what) const {
    if (device == nullptr || bytes == 0) return;
    if (!device->is_device(p) || !device->is_device(static_cast<const char*>(p) + bytes - 1)) {
      ADD_FAILURE() << what << ": " << bytes << " bytes not on the fake device";
    }
  }
  template <class Op>
  qc::Status arithmetic(const char* name, float* dst, size_t count, void* stream, Op op) const {
    arithmetic_ops.push_back(name);
    streams.push_back(stream);
    expect_device(dst, count * 4, name);
    for (size_t i = 0; i < count; ++i) op(i);
    return qc::Status::ok();
  }
};

}  // namespace qcfake

#endif  // QC_TESTS_UNIT_FAKE_DEVICE_CODEC_H
