#include "core/executors/device_executor.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/policy.h"

namespace qc {
namespace {

// The payload bytes of a slot of `count` values.
using PayloadSizeOf = std::function<Status(size_t count, size_t* bytes)>;

// Where each slot's payload lies in the device payload memory: slots one
// after the other, each rounded to device_payload_slot.
struct SlotLayout {
  std::vector<size_t> bytes;
  std::vector<size_t> offsets;
  size_t total = 0;
};

Status lay_out(const Schedule& schedule, const PayloadSizeOf& size_of, SlotLayout* layout) {
  layout->bytes.resize(schedule.slot_counts.size());
  layout->offsets.resize(schedule.slot_counts.size());
  layout->total = 0;
  for (size_t i = 0; i < schedule.slot_counts.size(); ++i) {
    QC_RETURN_IF_ERROR(size_of(schedule.slot_counts[i], &layout->bytes[i]));
    layout->offsets[i] = layout->total;
    layout->total += device_payload_slot(layout->bytes[i]);
  }
  return Status::ok();
}

}  // namespace

Status device_payload_bytes(const Schedule& schedule, const Codec& codec, size_t* bytes) {
  SlotLayout layout;
  QC_RETURN_IF_ERROR(lay_out(
      schedule,
      [&codec](size_t count, size_t* payload) {
        WireHeader h;
        if (!codec.header_for(count, &h)) {
          return internal_error(std::string("codec ") + codec_name(codec.id()) +
                                " has no fixed payload size for " + std::to_string(count) +
                                " values, which a stream-ordered call needs");
        }
        *payload = h.payload_bytes;
        return Status::ok();
      },
      &layout));
  *bytes = layout.total;
  return Status::ok();
}

size_t device_payload_bytes(const Schedule& schedule, size_t payload) {
  return schedule.slot_counts.size() * device_payload_slot(payload);
}

Status run_enqueued(CollectiveContext& ctx, const Schedule& schedule, const float* input,
                    float* output, const char* name) {
  SlotLayout layout;
  QC_RETURN_IF_ERROR(lay_out(
      schedule, [&ctx](size_t count, size_t* bytes) { return ctx.payload_bytes(count, bytes); },
      &layout));
  if (layout.total > ctx.device_payload_capacity()) {
    return internal_error(std::string("the stream-ordered ") + name + " needs " +
                          std::to_string(layout.total) + " bytes of device payloads, " +
                          std::to_string(ctx.device_payload_capacity()) + " reserved");
  }
  uint8_t* const base = ctx.device_payloads();
  auto at = [&](size_t slot) { return base + layout.offsets[slot]; };
  float* scratch = nullptr;
  auto read = [&](const Span& s) -> const float* {
    switch (s.where) {
      case Values::kInput: return input + s.begin;
      case Values::kOutput: return output + s.begin;
      case Values::kScratch: return scratch + s.begin;
    }
    return nullptr;
  };
  auto write = [&](const Span& s) {
    return s.where == Values::kScratch ? scratch + s.begin : output + s.begin;
  };
  // The sends and receives posted per transfer group and not yet enqueued:
  // a wait enqueues its group's as one device group (every group's, for a
  // wait on all). Empty payloads (blocks of no values) are left out, by
  // both sides alike.
  std::map<uint32_t, std::vector<DeviceTransfer>> posted;
  std::vector<DeviceTransfer> group;
  for (const Step& st : schedule.steps) {
    switch (st.kind) {
      case StepKind::kEncode:
        QC_RETURN_IF_ERROR(
            ctx.encode_payload(read(st.values), st.values.count, st.element_offset, at(st.slot)));
        break;
      case StepKind::kDecode:
      case StepKind::kDecodeAdd:
        QC_RETURN_IF_ERROR(ctx.decode_payload(at(st.slot), write(st.values), st.values.count,
                                              st.kind == StepKind::kDecodeAdd));
        break;
      case StepKind::kZero:
        QC_RETURN_IF_ERROR(ctx.zeroed_values(st.values.count, &scratch));
        break;
      case StepKind::kAdd:
        QC_RETURN_IF_ERROR(ctx.add_values(write(st.values), read(st.source), st.values.count));
        break;
      case StepKind::kCopy:
        QC_RETURN_IF_ERROR(ctx.copy_values(write(st.values), read(st.source), st.values.count));
        break;
      case StepKind::kSend:
      case StepKind::kRecv:
        for (size_t slot = st.slot; slot < st.slot_end; ++slot) {
          if (layout.bytes[slot] == 0) continue;
          DeviceTransfer t;
          t.send = st.kind == StepKind::kSend;
          t.peer = st.peer;
          t.data = at(slot);
          t.bytes = layout.bytes[slot];
          posted[st.group].push_back(t);
        }
        break;
      case StepKind::kWait: {
        group.clear();
        for (auto& g : posted) {
          if (st.group != kAllGroups && g.first != st.group) continue;
          group.insert(group.end(), g.second.begin(), g.second.end());
          g.second.clear();
        }
        QC_RETURN_IF_ERROR(ctx.enqueue_group(group.data(), group.size()));
        break;
      }
    }
  }
  for (const auto& g : posted) {
    if (!g.second.empty()) return internal_error("a schedule ends with transfers never enqueued");
  }
  return Status::ok();
}

}  // namespace qc
