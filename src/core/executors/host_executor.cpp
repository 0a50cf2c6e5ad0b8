#include "core/executors/host_executor.h"

#include <map>
#include <string>
#include <vector>

#include "core/executors/block_list.h"

namespace qc {
namespace {

// The call's values by where they are.
struct ValueBuffers {
  const float* input = nullptr;
  float* output = nullptr;
  float* scratch = nullptr;  // set by the kZero step

  const float* read(const Span& s) const {
    switch (s.where) {
      case Values::kInput: return input + s.begin;
      case Values::kOutput: return output + s.begin;
      case Values::kScratch: return scratch + s.begin;
    }
    return nullptr;
  }
  float* write(const Span& s) const {
    return s.where == Values::kScratch ? scratch + s.begin : output + s.begin;
  }
};

class HostRun {
  // A block list received, to unpack into its slots once awaited.
  struct Unpack {
    Message* frame;
    size_t first, last;
  };
  // The transfers posted in one group and not yet awaited.
  struct Posts {
    size_t capacity = 0;
    std::vector<Request> reqs;
    std::vector<Message*> recv_msgs;
    std::vector<Unpack> unpacks;
    std::vector<Message*> frames;  // block-list messages its transfers use
  };

 public:
  HostRun(CollectiveContext& ctx, const Schedule& schedule, Message* const* slots,
          Message* frames)
      : ctx_(ctx), schedule_(schedule), slots_(slots), frames_(frames) {
    // Requests are posted by address: each group's are reserved up front,
    // so none moves while it is pending (and map nodes never move).
    for (const Step& st : schedule.steps) {
      if (st.kind == StepKind::kSend || st.kind == StepKind::kRecv) ++groups_[st.group].capacity;
    }
    for (auto& g : groups_) g.second.reqs.reserve(g.second.capacity);
  }

  Status run(const ValueBuffers& values, bool transfers_only) {
    values_ = values;
    for (const Step& st : schedule_.steps) {
      const bool transfer = st.kind == StepKind::kSend || st.kind == StepKind::kRecv ||
                            st.kind == StepKind::kWait;
      if (transfers_only && !transfer) continue;
      QC_RETURN_IF_ERROR(run_step(st));
      // While transfers are pending, the transport gets a turn after each
      // step of compute: MPI moves bytes only inside its calls, and this is
      // what lets a pipelined schedule overlap the two.
      if (pending_ > 0 && !transfer) QC_RETURN_IF_ERROR(ctx_.progress());
    }
    if (pending_ > 0) return internal_error("a schedule ends with transfers never awaited");
    return Status::ok();
  }

 private:
  Status run_step(const Step& st) {
    switch (st.kind) {
      case StepKind::kEncode:
        ++writes_;
        return ctx_.encode(values_.read(st.values), st.values.count, st.element_offset,
                           slots_[st.slot]);
      case StepKind::kDecode:
      case StepKind::kDecodeAdd: {
        const Message& m = *slots_[st.slot];
        if (st.kind == StepKind::kDecode && st.values.where == Values::kOutput) {
          return ctx_.decode_result(m.payload(), m.payload_size(), values_.write(st.values),
                                    st.values.count);
        }
        return st.kind == StepKind::kDecode
                   ? ctx_.decode(m.payload(), m.payload_size(), values_.write(st.values),
                                 st.values.count)
                   : ctx_.decode_accumulate(m.payload(), m.payload_size(),
                                            values_.write(st.values), st.values.count);
      }
      case StepKind::kZero:
        return ctx_.zeroed_values(st.values.count, &values_.scratch);
      case StepKind::kAdd:
        return ctx_.add_values(values_.write(st.values), values_.read(st.source),
                               st.values.count);
      case StepKind::kCopy:
        return ctx_.copy_values(values_.write(st.values), values_.read(st.source),
                                st.values.count);
      case StepKind::kSend: return post_send(st);
      case StepKind::kRecv: return post_recv(st);
      case StepKind::kWait:
        // The transfers are in flight: a slice of the call's own work first.
        ctx_.work_while_waiting();
        return wait(st.group);
    }
    return internal_error("unknown schedule step");
  }

  // The receive capacity of slots [first, last) as `framing` carries them,
  // which sender and receiver compute alike from the call's shape.
  size_t frame(const Step& st) const {
    if (st.framing == Framing::kEncoded) return slot_capacity(st.slot);
    size_t total = 0;
    for (size_t b = st.slot; b < st.slot_end; ++b) {
      const size_t entry = block_list_capacity(1, slot_capacity(b));
      total = entry > SIZE_MAX - total ? SIZE_MAX : total + entry;
    }
    return total;
  }

  size_t slot_capacity(size_t slot) const {
    return schedule_.slot_bytes.empty() ? ctx_.max_encoded_size(schedule_.slot_counts[slot])
                                        : schedule_.slot_bytes[slot];
  }

  // A block-list message for a transfer of `group`: one whose transfers
  // are done (the same few serve every round, so the call touches little
  // memory), else a fresh one.
  Message* next_frame(Posts& group) {
    if (frames_ == nullptr) return nullptr;
    Message* m = nullptr;
    if (!free_frames_.empty()) {
      m = free_frames_.back();
      free_frames_.pop_back();
    } else {
      m = &frames_[used_frames_++];
    }
    group.frames.push_back(m);
    return m;
  }

  Status post_send(const Step& st) {
    Message* msg = slots_[st.slot];
    if (st.framing == Framing::kBlocks) {
      // One block list may go to several peers: packed once while its
      // blocks and its step are unchanged (a repost writes nothing).
      const bool same = packed_ != nullptr && packed_first_ == st.slot &&
                        packed_last_ == st.slot_end && packed_tag_ == st.tag &&
                        packed_group_ == st.group && packed_writes_ == writes_;
      if (!same) {
        packed_ = next_frame(groups_[st.group]);
        if (packed_ == nullptr) return internal_error("a block list without a frame message");
        pack_block_list(slots_, st.slot, st.slot_end, packed_);
        packed_first_ = st.slot;
        packed_last_ = st.slot_end;
        packed_tag_ = st.tag;
        packed_group_ = st.group;
        packed_writes_ = writes_;
      }
      msg = packed_;
    }
    Posts& g = groups_[st.group];
    g.reqs.emplace_back();
    ++pending_;
    return ctx_.post_send(st.peer, st.tag, msg, frame(st), &g.reqs.back());
  }

  Status post_recv(const Step& st) {
    ++writes_;
    Message* msg =
        st.framing == Framing::kBlocks ? next_frame(groups_[st.group]) : slots_[st.slot];
    if (msg == nullptr) return internal_error("a block list without a frame message");
    msg->reserve_payload(frame(st));
    Posts& g = groups_[st.group];
    g.reqs.emplace_back();
    ++pending_;
    QC_RETURN_IF_ERROR(ctx_.post_recv(st.peer, st.tag, msg, &g.reqs.back()));
    g.recv_msgs.push_back(msg);
    if (st.framing == Framing::kBlocks) g.unpacks.push_back({msg, st.slot, st.slot_end});
    return Status::ok();
  }

  Status wait(uint32_t group) {
    if (group != kAllGroups) return wait_posts(groups_[group]);
    for (auto& g : groups_) QC_RETURN_IF_ERROR(wait_posts(g.second));
    return Status::ok();
  }

  Status wait_posts(Posts& g) {
    Status s = g.reqs.empty() ? Status::ok()
                              : ctx_.wait(g.reqs.data(), g.reqs.size(), g.recv_msgs.data(),
                                          g.recv_msgs.size());
    pending_ -= g.reqs.size();
    g.reqs.clear();
    g.recv_msgs.clear();
    for (const Unpack& u : g.unpacks) {
      if (s) s = unpack_block_list(*u.frame, slots_, u.first, u.last);
    }
    g.unpacks.clear();
    // Its transfers are done: their block-list messages serve again.
    for (Message* m : g.frames) {
      if (m == packed_) packed_ = nullptr;
      free_frames_.push_back(m);
    }
    g.frames.clear();
    return s;
  }


  CollectiveContext& ctx_;
  const Schedule& schedule_;
  Message* const* slots_;
  Message* frames_;
  size_t used_frames_ = 0;
  ValueBuffers values_;
  std::map<uint32_t, Posts> groups_;
  size_t pending_ = 0;  // posted, not yet awaited
  // Bumped by every step that writes a slot: a packed list is reused only
  // while none of its blocks can have changed.
  uint64_t writes_ = 0;
  std::vector<Message*> free_frames_;
  Message* packed_ = nullptr;
  size_t packed_first_ = 0, packed_last_ = 0;
  uint32_t packed_tag_ = 0;
  uint32_t packed_group_ = 0;
  uint64_t packed_writes_ = 0;
};

size_t block_list_transfers(const Schedule& schedule) {
  size_t n = 0;
  for (const Step& st : schedule.steps) {
    if ((st.kind == StepKind::kSend || st.kind == StepKind::kRecv) &&
        st.framing == Framing::kBlocks) {
      ++n;
    }
  }
  return n;
}

}  // namespace

Status run_on_host(CollectiveContext& ctx, const Schedule& schedule, const float* input,
                   float* output) {
  const size_t nslots = schedule.slot_counts.size();
  Message* msgs = ctx.messages(nslots + block_list_transfers(schedule));
  std::vector<Message*> slots(nslots);
  for (size_t i = 0; i < nslots; ++i) slots[i] = &msgs[i];
  HostRun run(ctx, schedule, slots.data(), msgs + nslots);
  ValueBuffers values;
  values.input = input;
  values.output = output;
  return run.run(values, /*transfers_only=*/false);
}

Status run_transfers_on_host(CollectiveContext& ctx, const Schedule& schedule,
                             Message* const* slots) {
  std::vector<Message> frames(block_list_transfers(schedule));
  HostRun run(ctx, schedule, slots, frames.data());
  return run.run(ValueBuffers{}, /*transfers_only=*/true);
}

}  // namespace qc
