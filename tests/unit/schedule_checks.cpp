#include "schedule_checks.h"

#include <algorithm>

namespace qcsim {

using qc::Schedule;
using qc::ScheduleShape;
using qc::Step;
using qc::StepKind;

std::vector<Schedule> build_all(BuildFn build, int n, size_t count, int group_size,
                                size_t chunk, int root) {
  std::vector<Schedule> schedules(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ScheduleShape shape;
    shape.ranks = n;
    shape.rank = r;
    shape.count = count;
    shape.group_size = group_size;
    shape.chunk = chunk;
    shape.root = root;
    build(shape, &schedules[static_cast<size_t>(r)]);
  }
  return schedules;
}

std::string case_label(const char* name, int n, size_t count, int group_size) {
  std::string label = std::string(name) + " n=" + std::to_string(n) +
                      " count=" + std::to_string(count);
  if (group_size != 1) label += " group=" + std::to_string(group_size);
  return label;
}

namespace {

bool same_steps(const Step& a, const Step& b) {
  return a.kind == b.kind && a.values.where == b.values.where &&
         a.values.begin == b.values.begin && a.values.count == b.values.count &&
         a.source.where == b.source.where && a.source.begin == b.source.begin &&
         a.source.count == b.source.count && a.element_offset == b.element_offset &&
         a.slot == b.slot && a.slot_end == b.slot_end && a.peer == b.peer && a.tag == b.tag &&
         a.framing == b.framing && a.group == b.group;
}

}  // namespace

// A call that is not cut (one rank, or blocks that fit one piece) builds
// the whole-block schedule, step for step.
std::string check_uncut(const std::string& label, const std::vector<Schedule>& piped,
                        const std::vector<Schedule>& whole) {
  for (size_t r = 0; r < piped.size(); ++r) {
    const Schedule& p = piped[r];
    const Schedule& w = whole[r];
    bool same = p.slot_counts == w.slot_counts && p.steps.size() == w.steps.size() &&
                p.scratch_count == w.scratch_count && p.block_slots == w.block_slots;
    for (size_t i = 0; same && i < p.steps.size(); ++i) same = same_steps(p.steps[i], w.steps[i]);
    if (!same) return label + ": rank " + std::to_string(r) + " is not the whole-block schedule";
  }
  return "";
}

uint64_t all_ranks(int n) { return n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

std::string check_allreduce_result(const std::string& label, const ScheduleSim& sim,
                                   int max_depth) {
  const int n = sim.ranks();
  for (int r = 0; r < n; ++r) {
    const std::vector<Cell>& out = sim.output(r);
    for (size_t j = 0; j < out.size(); ++j) {
      const Cell& c = out[j];
      auto where = [&] {
        return label + ": rank " + std::to_string(r) + " output element " + std::to_string(j);
      };
      if (c.ranks != all_ranks(n)) {
        return where() + " sums ranks " + qcsim::rank_set(c.ranks) + ", not all " +
               std::to_string(n);
      }
      if (c.position != static_cast<int64_t>(j)) {
        return where() + " holds element " + std::to_string(c.position);
      }
      if (c.decoded_from == 0) return where() + " was not last written by a decode";
      if (c.decoded_from != sim.output(0)[j].decoded_from) {
        return where() + " was decoded from another encode than rank 0's";
      }
      if (max_depth > 0 && c.depth > max_depth) {
        return where() + " went through " + std::to_string(c.depth) + " encodes, more than " +
               std::to_string(max_depth);
      }
    }
  }
  return "";
}

std::string check_alltoall_result(const std::string& label, const ScheduleSim& sim,
                                  size_t count) {
  const int n = sim.ranks();
  for (int r = 0; r < n; ++r) {
    const std::vector<Cell>& out = sim.output(r);
    for (size_t j = 0; j < out.size(); ++j) {
      const int from = static_cast<int>(j / count);
      const int64_t element = static_cast<int64_t>(static_cast<size_t>(r) * count + j % count);
      const Cell& c = out[j];
      auto where = [&] {
        return label + ": rank " + std::to_string(r) + " output element " + std::to_string(j);
      };
      if (c.ranks != uint64_t{1} << from || c.position != element || c.decoded_from == 0) {
        return where() + " holds element " + std::to_string(c.position) + " of ranks " +
               qcsim::rank_set(c.ranks) + ", not a decode of element " + std::to_string(element) +
               " of rank " + std::to_string(from);
      }
    }
    const std::vector<int>& encodes = sim.input_encodes(r);
    for (size_t j = 0; j < encodes.size(); ++j) {
      if (encodes[j] != 1) {
        return label + ": rank " + std::to_string(r) + " input element " + std::to_string(j) +
               " was encoded " + std::to_string(encodes[j]) + " times";
      }
    }
  }
  return "";
}

namespace {

// The rank that made encode `id` (schedule_sim.h: SlotContent::encode_id).
int encoder(uint64_t id) { return static_cast<int>(id >> 32) - 1; }

std::string element_at(const std::string& label, int r, size_t j) {
  return label + ": rank " + std::to_string(r) + " output element " + std::to_string(j);
}

// "" when rank r encoded at each element offset j `expected(j)` times.
template <typename Expected>
std::string check_offset_encodes(const std::string& label, const ScheduleSim& sim, int r,
                                 Expected expected) {
  const std::vector<int>& encodes = sim.offset_encodes(r);
  for (size_t j = 0; j < encodes.size(); ++j) {
    if (encodes[j] != expected(j)) {
      return label + ": rank " + std::to_string(r) + " encoded at element offset " +
             std::to_string(j) + " " + std::to_string(encodes[j]) + " times, not " +
             std::to_string(expected(j));
    }
  }
  return "";
}

// "" when `c`, rank r's output element j, is owner's input element
// `element` as decoded from the encode `from` that the owner made, once.
std::string check_replica(const std::string& label, int r, size_t j, const Cell& c, int owner,
                          int64_t element, uint64_t from) {
  if (c.ranks != uint64_t{1} << owner || c.position != element) {
    return element_at(label, r, j) + " holds element " + std::to_string(c.position) +
           " of ranks " + rank_set(c.ranks) + ", not element " + std::to_string(element) +
           " of rank " + std::to_string(owner);
  }
  if (c.decoded_from == 0 || encoder(c.decoded_from) != owner) {
    return element_at(label, r, j) + " was not decoded from an encode of rank " +
           std::to_string(owner);
  }
  if (c.decoded_from != from) {
    return element_at(label, r, j) + " was decoded from another encode than rank " +
           std::to_string(owner) + "'s own replica";
  }
  if (c.depth != 1) {
    return element_at(label, r, j) + " went through " + std::to_string(c.depth) +
           " encodes, not 1";
  }
  return "";
}

}  // namespace

std::string check_reduce_scatter_result(const std::string& label, const ScheduleSim& sim,
                                        size_t count, int depth) {
  const int n = sim.ranks();
  for (int r = 0; r < n; ++r) {
    const std::vector<Cell>& out = sim.output(r);
    const size_t own = static_cast<size_t>(r) * count;
    for (size_t j = 0; j < out.size(); ++j) {
      const Cell& c = out[j];
      if (c.ranks != all_ranks(n)) {
        return element_at(label, r, j) + " sums ranks " + rank_set(c.ranks) + ", not all " +
               std::to_string(n);
      }
      if (c.position != static_cast<int64_t>(own + j)) {
        return element_at(label, r, j) + " holds element " + std::to_string(c.position) +
               ", not " + std::to_string(own + j);
      }
      if (c.unencoded != uint64_t{1} << r) {
        return element_at(label, r, j) + " holds ranks " + rank_set(c.unencoded) +
               " unencoded, not its own alone";
      }
      if (c.depth != depth) {
        return element_at(label, r, j) + " went through " + std::to_string(c.depth) +
               " encodes on its longest way, not " + std::to_string(depth);
      }
    }
    const std::string failure = check_offset_encodes(label, sim, r, [&](size_t j) {
      return j >= own && j - own < count ? 0 : 1;
    });
    if (!failure.empty()) return failure;
  }
  return "";
}

std::string check_allgather_result(const std::string& label, const ScheduleSim& sim,
                                   size_t count) {
  const int n = sim.ranks();
  for (int r = 0; r < n; ++r) {
    const std::vector<Cell>& out = sim.output(r);
    for (size_t j = 0; j < out.size(); ++j) {
      const int owner = static_cast<int>(j / count);
      const uint64_t from = sim.output(owner)[j].decoded_from;
      const std::string failure = check_replica(label, r, j, out[j], owner,
                                                static_cast<int64_t>(j % count), from);
      if (!failure.empty()) return failure;
    }
    const std::string failure = check_offset_encodes(label, sim, r, [](size_t) { return 1; });
    if (!failure.empty()) return failure;
  }
  return "";
}

std::string check_broadcast_result(const std::string& label, const ScheduleSim& sim, int root) {
  const int n = sim.ranks();
  for (int r = 0; r < n; ++r) {
    const std::vector<Cell>& out = sim.output(r);
    for (size_t j = 0; j < out.size(); ++j) {
      const uint64_t from = sim.output(root)[j].decoded_from;
      const std::string failure =
          check_replica(label, r, j, out[j], root, static_cast<int64_t>(j), from);
      if (!failure.empty()) return failure;
    }
  }
  // The others have no input (the simulator fails any read of it).
  return check_offset_encodes(label, sim, root, [](size_t) { return 1; });
}

namespace {

// An encode's elements: [begin, end), and the slot they went into.
struct Encoded {
  uint64_t begin = 0, end = 0;
  size_t slot = 0;
};

// The schedule's encodes of at least one value, by element offset.
std::vector<Encoded> encodes_of(const Schedule& s) {
  std::vector<Encoded> all;
  for (const Step& st : s.steps) {
    if (st.kind != StepKind::kEncode || st.values.count == 0) continue;
    all.push_back({st.element_offset, st.element_offset + st.values.count, st.slot});
  }
  std::sort(all.begin(), all.end(),
            [](const Encoded& a, const Encoded& b) { return a.begin < b.begin; });
  return all;
}

// "" when the encodes cover each of [0, elements) exactly once.
std::string covered_once(const std::vector<Encoded>& encodes, size_t elements) {
  std::vector<int> times(elements, 0);
  for (const Encoded& e : encodes) {
    if (e.end > elements) return "encodes element " + std::to_string(e.end - 1) + " of " +
                                 std::to_string(elements);
    for (uint64_t j = e.begin; j < e.end; ++j) ++times[j];
  }
  for (size_t j = 0; j < elements; ++j) {
    if (times[j] != 1) {
      return "encodes element " + std::to_string(j) + " " + std::to_string(times[j]) + " times";
    }
  }
  return "";
}

std::string range_name(const Encoded& e) {
  return "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
}

}  // namespace

std::string check_pieces(const std::string& label, int rank, const Schedule& piped,
                         const Schedule& whole, size_t chunk, size_t pieces, size_t elements) {
  const std::string at = label + ": rank " + std::to_string(rank) + " ";
  const std::vector<Encoded> blocks = encodes_of(whole);
  const std::vector<Encoded> cut = encodes_of(piped);
  std::string failure = covered_once(blocks, elements);
  if (!failure.empty()) return at + "unpipelined " + failure;
  failure = covered_once(cut, elements);
  if (!failure.empty()) return at + "pipelined " + failure;
  for (const Encoded& e : cut) {
    // The whole encode that holds e's first element (there is one: the
    // whole encodes cover every element).
    auto after = std::upper_bound(blocks.begin(), blocks.end(), e.begin,
                                  [](uint64_t x, const Encoded& b) { return x < b.begin; });
    const Encoded& w = *(after - 1);
    // Its block: W's slot where that is a block slot, else (the ring's
    // reused slots) W's place among the whole encodes, which cover every
    // block once (covered_once), none empty where blocks are cut.
    const size_t block = w.slot < whole.block_slots
                             ? w.slot
                             : static_cast<size_t>((after - 1) - blocks.begin());
    const uint64_t skip = e.begin - w.begin;
    const uint64_t length = std::min<uint64_t>(chunk, w.end - e.begin);
    auto wrong = [&](const std::string& what) {
      return at + "encodes " + range_name(e) + " into slot " + std::to_string(e.slot) +
             ", a piece of block " + std::to_string(block) + " " + range_name(w) + ": " + what;
    };
    if (skip % chunk != 0) {
      return wrong("it starts " + std::to_string(skip) + " values in, not a multiple of " +
                   std::to_string(chunk));
    }
    if (e.end - e.begin != length) {
      return wrong("it holds " + std::to_string(e.end - e.begin) + " values, not " +
                   std::to_string(length));
    }
    const size_t c = static_cast<size_t>(skip / chunk);
    if (e.slot != block * pieces + c) {
      return wrong("piece " + std::to_string(c) + " belongs in slot " +
                   std::to_string(block * pieces + c));
    }
  }
  return "";
}

namespace {

// A step on an output element: its kind, and for a decode the peer whose
// bytes the slot held (-1: encoded on this rank); -2 for a read as the
// source of an add or copy.
struct ValueStep {
  StepKind kind;
  int from;
  bool operator==(const ValueStep& o) const { return kind == o.kind && from == o.from; }
};

std::vector<std::vector<ValueStep>> value_steps(const Schedule& s, size_t elements) {
  std::vector<std::vector<ValueStep>> steps(elements);
  std::vector<int> filled_by(s.slot_counts.size(), -1);
  auto note = [&](const qc::Span& span, ValueStep v) {
    if (span.where != qc::Values::kOutput) return;
    for (size_t j = span.begin; j < span.begin + span.count && j < elements; ++j) {
      steps[j].push_back(v);
    }
  };
  for (const Step& st : s.steps) {
    switch (st.kind) {
      case StepKind::kRecv:
        for (size_t b = st.slot; b < st.slot_end; ++b) filled_by[b] = st.peer;
        break;
      case StepKind::kEncode:
        filled_by[st.slot] = -1;
        note(st.values, {st.kind, -1});
        break;
      case StepKind::kDecode:
      case StepKind::kDecodeAdd: note(st.values, {st.kind, filled_by[st.slot]}); break;
      case StepKind::kAdd:
      case StepKind::kCopy:
        note(st.source, {st.kind, -2});
        note(st.values, {st.kind, -1});
        break;
      default: break;
    }
  }
  return steps;
}

}  // namespace

std::string check_same_value_steps(const std::string& label, int rank, const Schedule& piped,
                                   const Schedule& whole, size_t elements) {
  const std::vector<std::vector<ValueStep>> cut = value_steps(piped, elements);
  const std::vector<std::vector<ValueStep>> blocks = value_steps(whole, elements);
  for (size_t j = 0; j < elements; ++j) {
    if (cut[j] == blocks[j]) continue;
    size_t k = 0;
    while (k < cut[j].size() && k < blocks[j].size() && cut[j][k] == blocks[j][k]) ++k;
    return label + ": rank " + std::to_string(rank) + " output element " + std::to_string(j) +
           " goes through " + std::to_string(cut[j].size()) + " steps pipelined, " +
           std::to_string(blocks[j].size()) + " whole; they differ from step " +
           std::to_string(k);
  }
  return "";
}

}  // namespace qcsim
