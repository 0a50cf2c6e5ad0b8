#include "core/device_residuals.h"

#include <string>

namespace qc {

Status DeviceResiduals::begin(const DeviceMemory& mem, const DeviceMessageCodec& codec,
                              const std::vector<float>& host, bool reset, void* stream,
                              float** work) {
  const size_t count = host.size();
  if (mem_ != &mem || count_ != count) {
    if (newer_) return internal_error("device residuals moved before the host caught up");
    release();
    mem_ = &mem;
    for (float*& block : blocks_) {
      void* p = nullptr;
      Status s = mem.alloc_device(count * sizeof(float), &p);
      if (!s) {
        release();
        return Status(s.code(), "no device memory for the error buffer's residuals: " +
                                    s.message());
      }
      block = static_cast<float*>(p);
    }
    count_ = count;
    current_ = 0;
  }
  QC_RETURN_IF_ERROR(pending_.order_before(stream));
  float* next = blocks_[1 - current_];
  Status s;
  if (reset) {
    s = codec.zero(next, count, stream);
  } else if (newer_) {
    s = codec.copy(next, blocks_[current_], count, stream);
  } else {
    s = mem.to_device(next, host.data(), count * sizeof(float), stream);
  }
  if (!s) return s;
  *work = next;
  return Status::ok();
}

void DeviceResiduals::commit() {
  current_ = 1 - current_;
  newer_ = true;
}

Status DeviceResiduals::to_host(std::vector<float>* host) {
  if (!newer_) return Status::ok();
  if (host->size() != count_) return internal_error("device residuals of another size");
  QC_RETURN_IF_ERROR(pending_.wait());
  Status s = mem_->to_host(host->data(), blocks_[current_], count_ * sizeof(float), nullptr);
  if (!s) {
    return Status(s.code(), "could not copy the error buffer's residuals from the device: " +
                                s.message());
  }
  newer_ = false;
  return Status::ok();
}

void DeviceResiduals::release() {
  // After a wait that timed out the blocks are left allocated: work that
  // may still write them must not find them freed.
  const bool idle = pending_.wait().is_ok();
  for (float*& block : blocks_) {
    if (idle && block != nullptr) mem_->free_device(block);
    block = nullptr;
  }
  mem_ = nullptr;
  count_ = 0;
  newer_ = false;
}

}  // namespace qc
