#include "schedule_sim.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace qcsim {
namespace {

using qc::Framing;
using qc::Schedule;
using qc::Span;
using qc::Step;
using qc::StepKind;
using qc::Values;

struct SimFailure {
  std::string message;
};

const char* kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kEncode: return "encode";
    case StepKind::kDecode: return "decode";
    case StepKind::kDecodeAdd: return "decode_add";
    case StepKind::kZero: return "zero";
    case StepKind::kAdd: return "add";
    case StepKind::kCopy: return "copy";
    case StepKind::kSend: return "send";
    case StepKind::kRecv: return "recv";
    case StepKind::kWait: return "wait";
  }
  return "?";
}

const char* where_name(Values where) {
  switch (where) {
    case Values::kInput: return "input";
    case Values::kOutput: return "output";
    case Values::kScratch: return "scratch";
  }
  return "?";
}

std::string span_name(const Span& s) {
  std::ostringstream os;
  os << where_name(s.where) << "[" << s.begin << ", " << s.begin + s.count << ")";
  return os.str();
}

bool overlaps(const Step& st, size_t first, size_t last) {
  return st.slot < last && first < st.slot_end;
}

int lowest_rank(uint64_t mask) { return __builtin_ctzll(mask); }
int highest_rank(uint64_t mask) { return 63 - __builtin_clzll(mask); }

}  // namespace

std::string rank_set(uint64_t mask) {
  std::ostringstream os;
  os << "{";
  const char* sep = "";
  for (int r = 0; r < 64; ++r) {
    if (mask & (uint64_t{1} << r)) {
      os << sep << r;
      sep = ",";
    }
  }
  os << "}";
  return os.str();
}

ScheduleSim::ScheduleSim(std::string label, std::vector<Schedule> schedules, Options options)
    : label_(std::move(label)), options_(options) {
  const int n = static_cast<int>(schedules.size());
  const size_t count = options.count;
  ranks_.resize(schedules.size());
  const size_t all = count * static_cast<size_t>(n);
  for (int r = 0; r < n; ++r) {
    Rank& rank = ranks_[r];
    rank.schedule = std::move(schedules[r]);
    rank.slots.resize(rank.schedule.slot_counts.size());
    // The input holds this rank's values (read only); the output is
    // garbage until the schedule copies or decodes into it.
    size_t in = count, out = count;
    switch (options.collective) {
      case Collective::kAllreduce: break;
      case Collective::kAlltoall: in = out = all; break;  // input block j goes to rank j
      case Collective::kReduceScatter: in = all; break;   // input block j: rank j's sum
      case Collective::kAllgather: out = all; break;      // output block j: rank j's input
      case Collective::kBroadcast: in = r == options.root ? count : 0; break;
    }
    rank.input.resize(in);
    rank.output.resize(out);
    rank.input_encodes.assign(in, 0);
    rank.offset_encodes.assign(in, 0);
    for (size_t j = 0; j < in; ++j) {
      rank.input[j].ranks = uint64_t{1} << r;
      rank.input[j].unencoded = uint64_t{1} << r;
      rank.input[j].position = static_cast<int64_t>(j);
    }
  }
  sends_.resize(static_cast<size_t>(n) * n);
  recvs_.resize(static_cast<size_t>(n) * n);
}

std::string ScheduleSim::run() {
  try {
    bool all_done = false;
    while (!all_done) {
      bool moved = false;
      all_done = true;
      for (int r = 0; r < ranks(); ++r) {
        while (!ranks_[r].done() && advance(r)) moved = true;
        all_done = all_done && ranks_[r].done();
      }
      if (!all_done && !moved) throw SimFailure{deadlock()};
    }
    for (size_t c = 0; c < sends_.size(); ++c) {
      if (!sends_[c].empty() || !recvs_[c].empty()) {
        std::ostringstream os;
        os << label_ << ": a transfer from rank " << c / ranks_.size() << " to rank "
           << c % ranks_.size() << " was never matched";
        throw SimFailure{os.str()};
      }
    }
  } catch (const SimFailure& f) {
    return f.message;
  }
  return "";
}

bool ScheduleSim::advance(int r) {
  Rank& rank = ranks_[r];
  const Step& st = rank.schedule.steps[rank.next];
  switch (st.kind) {
    case StepKind::kEncode: encode(r, st); break;
    case StepKind::kDecode:
    case StepKind::kDecodeAdd: decode(r, st); break;
    case StepKind::kZero: zero(r, st); break;
    case StepKind::kAdd: add(r, st); break;
    case StepKind::kCopy: copy(r, st); break;
    case StepKind::kSend:
    case StepKind::kRecv: post(r, st); break;
    case StepKind::kWait:
      if (!wait(r, st)) return false;
      break;
  }
  if (rank.next + 1 == rank.schedule.steps.size() && !rank.outstanding.empty()) {
    fail(r, "the schedule ends with transfers posted and never awaited");
  }
  ++rank.next;
  return true;
}

void ScheduleSim::encode(int r, const Step& st) {
  Rank& rank = ranks_[r];
  check_slot(r, st.slot);
  check_slots_idle(r, st.slot, st.slot + 1, "encodes into a slot");
  if (st.values.count != rank.schedule.slot_counts[st.slot]) {
    fail(r, "encodes " + std::to_string(st.values.count) + " values into a slot of " +
                std::to_string(rank.schedule.slot_counts[st.slot]));
  }
  const std::vector<Cell>& from = *readable(r, st.values, "encodes");
  SlotContent& slot = rank.slots[st.slot];
  slot.written = true;
  slot.encode_id = (static_cast<uint64_t>(r) + 1) << 32 | ++rank.encodes;
  slot.cells.assign(from.begin() + st.values.begin,
                    from.begin() + st.values.begin + st.values.count);
  for (size_t k = 0; k < slot.cells.size(); ++k) {
    Cell& c = slot.cells[k];
    // The element offset keys the codec's random bits: it must be the
    // values' own position, or two encodes of one element disagree.
    if (c.position >= 0 && static_cast<uint64_t>(c.position) != st.element_offset + k) {
      fail(r, "encodes element " + std::to_string(c.position) + " at element offset " +
                  std::to_string(st.element_offset + k));
    }
    ++c.depth;
    c.decoded_from = 0;
    c.unencoded = 0;
  }
  for (size_t k = 0; k < st.values.count; ++k) {
    const uint64_t offset = st.element_offset + k;
    if (offset >= rank.offset_encodes.size()) {
      fail(r, "encodes at element offset " + std::to_string(offset) + ", outside the input's " +
                  std::to_string(rank.offset_encodes.size()) + " values (one residual each)");
    }
    ++rank.offset_encodes[offset];
  }
  if (st.values.where == Values::kInput) {
    for (size_t k = 0; k < st.values.count; ++k) ++rank.input_encodes[st.values.begin + k];
  }
}

void ScheduleSim::decode(int r, const Step& st) {
  Rank& rank = ranks_[r];
  check_slot(r, st.slot);
  check_slots_idle(r, st.slot, st.slot + 1, "decodes a slot", nullptr, /*reads_only=*/true);
  const SlotContent& slot = rank.slots[st.slot];
  if (!slot.written) fail(r, "decodes a slot that was never written");
  if (st.values.count != slot.cells.size()) {
    fail(r, "decodes a slot of " + std::to_string(slot.cells.size()) + " values into " +
                std::to_string(st.values.count));
  }
  std::vector<Cell>& to = *writable(r, st.values, "decodes into");
  for (size_t k = 0; k < st.values.count; ++k) {
    Cell& dst = to[st.values.begin + k];
    if (st.kind == StepKind::kDecode) {
      dst = slot.cells[k];
      dst.decoded_from = slot.encode_id;
    } else {
      add_cell(r, dst, slot.cells[k], "decode_add");
    }
  }
}

void ScheduleSim::zero(int r, const Step& st) {
  Rank& rank = ranks_[r];
  if (st.values.where != Values::kScratch || st.values.begin != 0) {
    fail(r, "zeroes something other than scratch from 0");
  }
  if (st.values.count > rank.schedule.scratch_count) {
    fail(r, "zeroes " + std::to_string(st.values.count) + " scratch values; scratch_count is " +
                std::to_string(rank.schedule.scratch_count));
  }
  rank.scratch.assign(st.values.count, Cell{});
  rank.scratch_zeroed = true;
}

void ScheduleSim::add(int r, const Step& st) {
  if (st.values.count != st.source.count) fail(r, "adds spans of different sizes");
  // A copy: the source and the destination may be the same values.
  const std::vector<Cell>& source = *readable(r, st.source, "adds from");
  const std::vector<Cell> from(source.begin() + st.source.begin,
                               source.begin() + st.source.begin + st.source.count);
  std::vector<Cell>& to = *writable(r, st.values, "adds into");
  for (size_t k = 0; k < st.values.count; ++k) {
    add_cell(r, to[st.values.begin + k], from[k], "add");
  }
}

void ScheduleSim::copy(int r, const Step& st) {
  if (st.values.count != st.source.count) fail(r, "copies spans of different sizes");
  const std::vector<Cell>& source = *readable(r, st.source, "copies from");
  const std::vector<Cell> from(source.begin() + st.source.begin,
                               source.begin() + st.source.begin + st.source.count);
  std::vector<Cell>& to = *writable(r, st.values, "copies into");
  for (size_t k = 0; k < st.values.count; ++k) to[st.values.begin + k] = from[k];
}

void ScheduleSim::add_cell(int r, Cell& dst, const Cell& src, const char* what) {
  if (dst.ranks & src.ranks) {
    fail(r, std::string(what) + " counts ranks " + rank_set(dst.ranks & src.ranks) +
                " twice (the sum has " + rank_set(dst.ranks) + ", the addend " +
                rank_set(src.ranks) + ")");
  }
  if (dst.position >= 0 && src.position >= 0 && dst.position != src.position) {
    fail(r, std::string(what) + " adds element " + std::to_string(src.position) +
                " to element " + std::to_string(dst.position));
  }
  if (options_.rank_ordered_sums && dst.ranks != 0 && src.ranks != 0 &&
      lowest_rank(src.ranks) < highest_rank(dst.ranks)) {
    fail(r, std::string(what) + " adds ranks " + rank_set(src.ranks) + " to a sum of " +
                rank_set(dst.ranks) + ": not in rank order");
  }
  dst.ranks |= src.ranks;
  dst.unencoded |= src.unencoded;
  if (dst.position < 0) dst.position = src.position;
  dst.depth = std::max(dst.depth, src.depth);
  dst.decoded_from = 0;
}

void ScheduleSim::post(int r, const Step& st) {
  Rank& rank = ranks_[r];
  const Schedule& s = rank.schedule;
  const bool send = st.kind == StepKind::kSend;
  if (st.peer < 0 || st.peer >= ranks() || st.peer == r) {
    fail(r, "names peer " + std::to_string(st.peer));
  }
  if (st.slot >= st.slot_end || st.slot_end > s.slot_counts.size()) {
    fail(r, "names slots outside the schedule's " + std::to_string(s.slot_counts.size()));
  }
  if (st.framing == Framing::kEncoded && st.slot_end != st.slot + 1) {
    fail(r, "carries several slots as one encoded message");
  }
  if (st.framing == Framing::kBlocks && st.slot_end > s.block_slots) {
    fail(r, "carries a block list beyond the " + std::to_string(s.block_slots) + " block slots");
  }
  Posted p;
  p.step = rank.next;
  if (send) {
    // A slot may go to several peers at once, in one step (one tag); it
    // must not change, nor be received into, while any of them is in flight.
    check_slots_idle(r, st.slot, st.slot_end, "sends a slot", &st);
    for (size_t b = st.slot; b < st.slot_end; ++b) {
      if (!rank.slots[b].written) fail(r, "sends slot " + std::to_string(b) + ", never written");
      p.contents.push_back(rank.slots[b]);
    }
  } else {
    check_slots_idle(r, st.slot, st.slot_end, "receives into a slot");
  }
  rank.posted.push_back(std::move(p));
  const size_t index = rank.posted.size() - 1;
  rank.outstanding.push_back(index);
  if (options_.visibility == Visibility::kAtPost) {
    show(r, index);
  } else {
    rank.unenqueued[st.group].push_back(index);
  }
}

void ScheduleSim::show(int r, size_t index) {
  Rank& rank = ranks_[r];
  Posted& p = rank.posted[index];
  const Step& st = rank.schedule.steps[p.step];
  const bool send = st.kind == StepKind::kSend;
  p.visible = true;
  const int from = send ? r : st.peer;
  const int to = send ? st.peer : r;
  const size_t channel = static_cast<size_t>(from) * ranks_.size() + static_cast<size_t>(to);
  (send ? sends_ : recvs_)[channel].push_back(index);
  match(from, to);
}

void ScheduleSim::enqueue(int r, uint32_t group) {
  Rank& rank = ranks_[r];
  // std::map: increasing group numbers, as the device executor enqueues them.
  for (auto& g : rank.unenqueued) {
    if (group != qc::kAllGroups && g.first != group) continue;
    for (size_t index : g.second) show(r, index);
    g.second.clear();
  }
}

void ScheduleSim::match(int from, int to) {
  const size_t channel = static_cast<size_t>(from) * ranks_.size() + static_cast<size_t>(to);
  Queue& sends = sends_[channel];
  Queue& recvs = recvs_[channel];
  Rank& sender = ranks_[from];
  Rank& receiver = ranks_[to];
  while (!sends.empty() && !recvs.empty()) {
    Posted& sp = sender.posted[sends.front()];
    Posted& rp = receiver.posted[recvs.front()];
    const Step& ss = sender.schedule.steps[sp.step];
    const Step& rs = receiver.schedule.steps[rp.step];
    // Written only when a check fails: matches are many.
    auto mismatch = [&](const std::string& what) {
      std::ostringstream os;
      os << label_ << ": rank " << from << " step " << sp.step << " (" << describe(ss)
         << ") meets rank " << to << " step " << rp.step << " (" << describe(rs) << "): " << what;
      throw SimFailure{os.str()};
    };
    if (ss.tag != rs.tag) mismatch("the tags differ");
    if (ss.framing != rs.framing) mismatch("the framings differ");
    if (ss.slot_end - ss.slot != rs.slot_end - rs.slot ||
        (ss.framing == Framing::kBlocks && ss.slot != rs.slot)) {
      mismatch("the slots differ");
    }
    for (size_t k = 0; k < ss.slot_end - ss.slot; ++k) {
      const size_t sent = sender.schedule.slot_counts[ss.slot + k];
      const size_t room = receiver.schedule.slot_counts[rs.slot + k];
      if (sent != room) {
        mismatch("a slot of " + std::to_string(sent) + " values meets one of " +
                 std::to_string(room) + " (the frames differ)");
      }
      // Delivered now; the receiver may look only after its wait.
      receiver.slots[rs.slot + k] = sp.contents[k];
    }
    sp.complete = true;
    rp.complete = true;
    sends.pop();
    recvs.pop();
  }
}

bool ScheduleSim::wait(int r, const Step& st) {
  Rank& rank = ranks_[r];
  // Enqueues at the first try; a retry finds nothing left to enqueue.
  if (options_.visibility == Visibility::kAtWait) enqueue(r, st.group);
  auto awaited = [&](size_t index) {
    return st.group == qc::kAllGroups ||
           rank.schedule.steps[rank.posted[index].step].group == st.group;
  };
  for (size_t index : rank.outstanding) {
    if (awaited(index) && !rank.posted[index].complete) return false;
  }
  rank.outstanding.erase(
      std::remove_if(rank.outstanding.begin(), rank.outstanding.end(), awaited),
      rank.outstanding.end());
  return true;
}

void ScheduleSim::check_slot(int r, size_t slot) const {
  if (slot >= ranks_[r].schedule.slot_counts.size()) {
    fail(r, "names slot " + std::to_string(slot) + " of " +
                std::to_string(ranks_[r].schedule.slot_counts.size()));
  }
}

void ScheduleSim::check_slots_idle(int r, size_t first, size_t last, const char* what,
                                   const Step* send, bool reads_only) const {
  const Rank& rank = ranks_[r];
  for (size_t index : rank.outstanding) {
    const Posted& p = rank.posted[index];
    const Step& other = rank.schedule.steps[p.step];
    if (!overlaps(other, first, last)) continue;
    const bool same_send_elsewhere = send != nullptr && other.kind == StepKind::kSend &&
                                     other.tag == send->tag && other.peer != send->peer;
    if (same_send_elsewhere || (reads_only && other.kind == StepKind::kSend)) continue;
    fail(r, std::string(what) + " while step " + std::to_string(p.step) + " (" +
                describe(other) + ") on it is outstanding");
  }
}

std::vector<Cell>& ScheduleSim::values(int r, Values where) {
  Rank& rank = ranks_[r];
  switch (where) {
    case Values::kInput: return rank.input;
    case Values::kOutput: return rank.output;
    case Values::kScratch: return rank.scratch;
  }
  return rank.output;
}

const std::vector<Cell>* ScheduleSim::readable(int r, const Span& span, const char* what) {
  Rank& rank = ranks_[r];
  if (span.where == Values::kScratch && !rank.scratch_zeroed) {
    fail(r, std::string(what) + " scratch before any zero");
  }
  const std::vector<Cell>& v = values(r, span.where);
  if (span.begin > v.size() || span.count > v.size() - span.begin) {
    fail(r, std::string(what) + " " + span_name(span) + ", outside its " +
                std::to_string(v.size()) + " values");
  }
  if (options_.in_place && span.where == Values::kInput) {
    for (size_t j = span.begin; j < span.begin + span.count; ++j) {
      const int64_t o = aliased_output(r, j);
      if (o >= 0 && static_cast<size_t>(o) < rank.output_written_at.size() &&
          rank.output_written_at[static_cast<size_t>(o)] != 0) {
        fail(r, std::string(what) + " input element " + std::to_string(j) + " after step " +
                    std::to_string(rank.output_written_at[static_cast<size_t>(o)] - 1) +
                    " wrote output element " + std::to_string(o) +
                    " (in place, the same memory)");
      }
    }
  }
  return &v;
}

std::vector<Cell>* ScheduleSim::writable(int r, const Span& span, const char* what) {
  if (span.where == Values::kInput) fail(r, std::string(what) + " the input");
  readable(r, span, what);
  Rank& rank = ranks_[r];
  if (options_.in_place && span.where == Values::kOutput) {
    // Called after the step's reads of its source: a step may read an
    // input element and write the same output element (a copy in place).
    rank.output_written_at.resize(rank.output.size(), 0);
    for (size_t j = span.begin; j < span.begin + span.count; ++j) {
      if (rank.output_written_at[j] == 0) rank.output_written_at[j] = rank.next + 1;
    }
  }
  return &values(r, span.where);
}

int64_t ScheduleSim::aliased_output(int r, size_t j) const {
  const size_t own = static_cast<size_t>(r) * options_.count;
  switch (options_.collective) {
    case Collective::kReduceScatter:  // recvbuf == sendbuf + rank * count
      return j >= own && j - own < options_.count ? static_cast<int64_t>(j - own) : -1;
    case Collective::kAllgather:  // sendbuf == recvbuf + rank * count
      return static_cast<int64_t>(own + j);
    default:  // sendbuf == recvbuf
      return static_cast<int64_t>(j);
  }
}

void ScheduleSim::fail(int r, const std::string& what) const {
  std::ostringstream os;
  os << label_ << ": rank " << r;
  if (r >= 0 && r < ranks() && !ranks_[r].schedule.steps.empty()) {
    const Rank& rank = ranks_[r];
    const size_t i = std::min(rank.next, rank.schedule.steps.size() - 1);
    os << " step " << i << " (" << describe(rank.schedule.steps[i]) << ")";
  }
  os << ": " << what;
  throw SimFailure{os.str()};
}

std::string ScheduleSim::describe(const Step& st) const {
  std::ostringstream os;
  os << kind_name(st.kind);
  switch (st.kind) {
    case StepKind::kEncode: os << " " << span_name(st.values) << " -> slot " << st.slot; break;
    case StepKind::kDecode:
    case StepKind::kDecodeAdd: os << " slot " << st.slot << " -> " << span_name(st.values); break;
    case StepKind::kZero: os << " " << span_name(st.values); break;
    case StepKind::kAdd:
    case StepKind::kCopy: os << " " << span_name(st.source) << " -> " << span_name(st.values); break;
    case StepKind::kSend:
    case StepKind::kRecv:
      os << (st.kind == StepKind::kSend ? " to " : " from ") << st.peer << " slots [" << st.slot
         << ", " << st.slot_end << ") tag 0x" << std::hex << st.tag << std::dec
         << (st.framing == Framing::kBlocks ? " blocks" : " encoded") << " group "
         << st.group;
      break;
    case StepKind::kWait:
      if (st.group == qc::kAllGroups) {
        os << " all groups";
      } else {
        os << " group " << st.group;
      }
      break;
  }
  return os.str();
}

std::string ScheduleSim::deadlock() const {
  std::ostringstream os;
  os << label_ << ": deadlock;";
  int shown = 0;
  for (int r = 0; r < ranks() && shown < 4; ++r) {
    const Rank& rank = ranks_[r];
    if (rank.done()) continue;
    ++shown;
    os << " rank " << r << " waits at step " << rank.next << " ("
       << describe(rank.schedule.steps[rank.next]) << ") with";
    for (size_t index : rank.outstanding) {
      const Posted& p = rank.posted[index];
      if (p.complete) continue;
      os << " [step " << p.step << ": " << describe(rank.schedule.steps[p.step])
         << (p.visible ? "" : ", not enqueued") << "]";
    }
    os << ";";
  }
  return os.str();
}

}  // namespace qcsim
