#include "schedule_checks.h"

#include <algorithm>

namespace qcsim {

using qc::Schedule;
using qc::ScheduleShape;
using qc::Step;
using qc::StepKind;

std::vector<Schedule> build_all(BuildFn build, int n, size_t count, int group_size,
                                size_t chunk) {
  std::vector<Schedule> schedules(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ScheduleShape shape;
    shape.ranks = n;
    shape.rank = r;
    shape.count = count;
    shape.group_size = group_size;
    shape.chunk = chunk;
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
    const uint64_t skip = e.begin - w.begin;
    const uint64_t length = std::min<uint64_t>(chunk, w.end - e.begin);
    auto wrong = [&](const std::string& what) {
      return at + "encodes " + range_name(e) + " into slot " + std::to_string(e.slot) +
             ", a piece of the block " + range_name(w) + " in slot " + std::to_string(w.slot) +
             ": " + what;
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
    if (e.slot != w.slot * pieces + c) {
      return wrong("piece " + std::to_string(c) + " belongs in slot " +
                   std::to_string(w.slot * pieces + c));
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
