#include "core/device_call.h"

namespace qc {

Status conclude_preparation(CollectiveContext& ctx, bool enqueued, const void* sendbuf,
                            const void* recvbuf, const Status& local) {
  if (enqueued) {
    // Only where the buffers are is checked here, whatever their type.
    QC_RETURN_IF_ERROR(ctx.agree_on_device_buffers(static_cast<const float*>(sendbuf),
                                                   static_cast<const float*>(recvbuf), local));
  }
  return local;
}

}  // namespace qc
