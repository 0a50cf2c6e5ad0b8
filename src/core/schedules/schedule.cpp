#include "core/schedules/schedule.h"

#include "core/schedules/partition.h"

namespace qc {

size_t ScheduleBuilder::slot(size_t count) {
  s_.slot_counts.push_back(count);
  return s_.slot_counts.size() - 1;
}

void ScheduleBuilder::block_slots(size_t count, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b) slot(block_range(count, blocks, b).count);
  s_.block_slots = blocks;
}

// Every step but the transfers: what it does, on which values and slot.
static Step compute_step(StepKind kind, Span values, size_t slot = 0, Span source = {}) {
  Step st;
  st.kind = kind;
  st.values = values;
  st.slot = slot;
  st.source = source;
  return st;
}

void ScheduleBuilder::encode(Span from, size_t slot) { encode_at(from, from.begin, slot); }

void ScheduleBuilder::encode_at(Span from, uint64_t element_offset, size_t slot) {
  Step st = compute_step(StepKind::kEncode, from, slot);
  st.element_offset = element_offset;
  s_.steps.push_back(st);
}

void ScheduleBuilder::decode(size_t slot, Span to) {
  s_.steps.push_back(compute_step(StepKind::kDecode, to, slot));
}

void ScheduleBuilder::decode_add(size_t slot, Span to) {
  s_.steps.push_back(compute_step(StepKind::kDecodeAdd, to, slot));
}

void ScheduleBuilder::zero_scratch(size_t count) {
  if (count > s_.scratch_count) s_.scratch_count = count;
  s_.steps.push_back(compute_step(StepKind::kZero, scratch(count)));
}

void ScheduleBuilder::add(Span to, Span from) {
  s_.steps.push_back(compute_step(StepKind::kAdd, to, 0, from));
}

void ScheduleBuilder::copy(Span to, Span from) {
  s_.steps.push_back(compute_step(StepKind::kCopy, to, 0, from));
}

void ScheduleBuilder::transfer(StepKind kind, int peer, size_t first, size_t last, uint32_t tag,
                               Framing framing, uint32_t group) {
  Step st;
  st.kind = kind;
  st.peer = peer;
  st.slot = first;
  st.slot_end = last;
  st.tag = tag;
  st.framing = framing;
  st.group = group;
  s_.steps.push_back(st);
}

void ScheduleBuilder::send(int peer, size_t slot, uint32_t tag, uint32_t group) {
  transfer(StepKind::kSend, peer, slot, slot + 1, tag, Framing::kEncoded, group);
}

void ScheduleBuilder::recv(int peer, size_t slot, uint32_t tag, uint32_t group) {
  transfer(StepKind::kRecv, peer, slot, slot + 1, tag, Framing::kEncoded, group);
}

void ScheduleBuilder::send_blocks(int peer, size_t first, size_t last, uint32_t tag,
                                  uint32_t group) {
  transfer(StepKind::kSend, peer, first, last, tag, Framing::kBlocks, group);
}

void ScheduleBuilder::recv_blocks(int peer, size_t first, size_t last, uint32_t tag,
                                  uint32_t group) {
  transfer(StepKind::kRecv, peer, first, last, tag, Framing::kBlocks, group);
}

void ScheduleBuilder::wait() { wait_group(kAllGroups); }

void ScheduleBuilder::wait_group(uint32_t group) {
  Step st;
  st.kind = StepKind::kWait;
  st.group = group;
  s_.steps.push_back(st);
}

}  // namespace qc
