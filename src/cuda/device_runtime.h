// The CUDA runtime as the rest of qc uses it, without CUDA types: is there a
// device, is a pointer device memory, copies and waits. Defined in
// device_runtime.cu (only in a CUDA build; core code calls these under
// QC_HAVE_CUDA).
#pragma once

#include <cstddef>

#include "core/status.h"

namespace qc {
namespace cuda {

// Number of CUDA devices this process can use; 0 when there is no driver or
// no device. Asked once per process (CUDA does not hot-plug devices).
int device_count();

// True for memory a kernel reads in place: device memory (cudaMalloc) and
// managed memory (cudaMallocManaged). False for host memory, pinned host
// memory included (its bytes are read on the CPU path), and for every
// pointer when there is no device.
bool is_device_memory(const void* p);

Status copy_to_device(void* dst, const void* src, size_t bytes);
Status copy_to_host(void* dst, const void* src, size_t bytes);
// Copies ordered after the work already enqueued on `stream` (a
// cudaStream_t; NULL: the default stream); they return once `dst` holds the
// bytes. Host memory may be pageable; pinned memory (alloc_pinned) is faster.
Status copy_to_host_after(void* dst, const void* src, size_t bytes, void* stream);
Status copy_to_device_after(void* dst, const void* src, size_t bytes, void* stream);
// Device memory of the current device (cudaMalloc); free with free_device.
Status alloc_device(size_t bytes, void** p);
void free_device(void* p);
// Page-locked host memory (cudaMallocHost); free with free_pinned.
Status alloc_pinned(size_t bytes, void** p);
void free_pinned(void* p);
// Device to device, enqueued on `stream`.
Status copy_on_device(void* dst, const void* src, size_t bytes, void* stream);
// Waits for the work enqueued on `stream` (a cudaStream_t; NULL: the
// default stream) and reports an error a kernel hit.
Status synchronize(void* stream);

// Events (cudaEvent_t, without timing): a point in a stream's work that
// other streams and the host wait for. Unlike the stream, an event stays
// valid when the caller destroys the stream it was recorded on.
Status create_event(void** event);
void destroy_event(void* event);
Status record_event(void* event, void* stream);
Status stream_wait_event(void* stream, void* event);
// *done once the work before the event has run; never blocks.
Status query_event(void* event, bool* done);

}  // namespace cuda
}  // namespace qc
