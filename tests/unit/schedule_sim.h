// A symbolic simulator of schedules (src/core/schedules/): it plays every
// rank's schedule together, with no transport and no codec, and fails on
// the first thing a schedule gets wrong.
//
// Transfers meet by rendezvous: a send completes when its receiver matches
// it, and the k-th send from A to B matches B's k-th receive from A (same
// tag, framing and slot sizes, or it fails). A wait completes the transfers
// its rank posted in the wait's group (qc::kAllGroups: all of them). Ranks
// advance in turn until all finish; a turn in which none moves is a deadlock.
//
// When a peer sees a transfer is the executor's business, so it is an
// option: the host executor posts each one at once (Visibility::kAtPost);
// the device executor enqueues a group's transfers at the wait on it, as one
// NCCL group whose completion the rank's stream then waits for, every group
// in increasing number for a wait on all (Visibility::kAtWait). A schedule
// must progress under both.
//
// In place (Options::in_place): the input and the output share memory as
// NCCL's in-place forms have it — allreduce, alltoall and broadcast
// sendbuf == recvbuf; reduce-scatter recvbuf == sendbuf + rank * count (the
// output is the own input block); allgather sendbuf == recvbuf + rank *
// count (the input is the own output block) — so no step may read an input
// element once a step wrote the output element in its memory (it would
// read the result, not the contribution). The two stay apart in the
// simulator; the first such read fails.
//
// The buffers per collective (count: Options::count): allreduce in = out =
// count; alltoall in = out = ranks * count; reduce-scatter in = ranks *
// count, out = count; allgather in = count, out = ranks * count; broadcast
// out = count, in = count on the root and none elsewhere (the driver
// passes the others no input), so a non-root's read of it fails.
//
// Values are not numbers but what made them: the ranks whose contributions
// a value sums (a mask), which element it is, how many encodes it went
// through, and which encode gave it its last decode. The tests read these
// off the ranks' outputs once the run is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/schedules/schedule.h"

namespace qcsim {

struct Cell {
  uint64_t ranks = 0;         // bit r: rank r's contribution is in the value
  int64_t position = -1;      // its element index on the contributing ranks; -1: none yet
  int depth = 0;              // encodes on its way here
  uint64_t decoded_from = 0;  // the encode a kDecode last wrote it from; 0: none
  uint64_t unencoded = 0;     // bit r: rank r's contribution is in it as given, never encoded
};

// A slot's encoded payload, as its encode made it.
struct SlotContent {
  bool written = false;
  uint64_t encode_id = 0;  // who encoded it: (rank + 1) << 32 | that rank's encode number
  std::vector<Cell> cells;
};

enum class Collective { kAllreduce, kAlltoall, kReduceScatter, kAllgather, kBroadcast };

// When a posted transfer becomes visible to its peer (see above).
enum class Visibility {
  kAtPost,  // the host executor: posted is visible
  kAtWait,  // the device executor: visible once its group is enqueued, at a wait on it
};

class ScheduleSim {
 public:
  struct Options {
    Collective collective = Collective::kAllreduce;
    size_t count = 0;  // allreduce, broadcast: elements; the others: elements per block
    int root = 0;      // broadcast: the rank that has an input
    // SRA: every sum adds ranks in increasing order (its bits do not depend
    // on which message arrives first).
    bool rank_ordered_sums = false;
    Visibility visibility = Visibility::kAtPost;
    // The input shares the output's memory (see above): reads of the
    // input after writes of the output elements in their memory fail.
    bool in_place = false;
  };

  // schedules[r]: rank r's. `label` starts every failure message.
  ScheduleSim(std::string label, std::vector<qc::Schedule> schedules, Options options);

  // Plays all ranks to the end; "" or the first failure.
  std::string run();

  int ranks() const { return static_cast<int>(ranks_.size()); }
  const std::vector<Cell>& output(int rank) const { return ranks_[rank].output; }
  // How often each element of the rank's input was encoded.
  const std::vector<int>& input_encodes(int rank) const { return ranks_[rank].input_encodes; }
  // How often the rank encoded at each element offset, from any values: the
  // offsets key one residual each (error feedback's grid is the input's
  // elements), so an offset outside the input fails the run.
  const std::vector<int>& offset_encodes(int rank) const { return ranks_[rank].offset_encodes; }

 private:
  // A send or receive the rank posted.
  struct Posted {
    size_t step = 0;
    bool complete = false;
    bool visible = false;  // in its channel's queue (Visibility::kAtWait: enqueued)
    std::vector<SlotContent> contents;  // a send's slots as they were when posted
  };

  struct Rank {
    qc::Schedule schedule;
    size_t next = 0;  // the step it takes next
    std::vector<Cell> input, output, scratch;
    bool scratch_zeroed = false;
    std::vector<SlotContent> slots;
    std::vector<Posted> posted;             // every transfer, in post order
    std::vector<size_t> outstanding;        // indices into `posted`: not yet awaited
    std::map<uint32_t, std::vector<size_t>> unenqueued;  // kAtWait: per group, not yet visible
    std::vector<int> input_encodes;
    std::vector<int> offset_encodes;
    // in_place: per output element, 1 + the step that first wrote it; 0: none.
    std::vector<size_t> output_written_at;
    uint64_t encodes = 0;
    bool done() const { return next == schedule.steps.size(); }
  };

  // Takes rank r's next step; false when it waits on a transfer.
  bool advance(int r);
  void encode(int r, const qc::Step& st);
  void decode(int r, const qc::Step& st);
  void zero(int r, const qc::Step& st);
  void add(int r, const qc::Step& st);
  void copy(int r, const qc::Step& st);
  void post(int r, const qc::Step& st);
  bool wait(int r, const qc::Step& st);
  // Makes posted transfer `index` of rank r visible to its peer and matches.
  void show(int r, size_t index);
  // Visibility::kAtWait: the transfers of `group` (kAllGroups: every group,
  // in increasing number) not yet enqueued, in post order.
  void enqueue(int r, uint32_t group);
  void match(int from, int to);
  // Adds src into dst: the sum of two sets of ranks that must not overlap.
  void add_cell(int r, Cell& dst, const Cell& src, const char* what);

  void check_slot(int r, size_t slot) const;
  // Fails when a transfer posted on rank r and not yet awaited covers one of
  // slots [first, last), but for a `send`: the same slots may go to other
  // peers with its tag (one step's broadcast); and with `reads_only` (a
  // decode), sends on them may be in flight: both only read the bytes.
  void check_slots_idle(int r, size_t first, size_t last, const char* what,
                        const qc::Step* send = nullptr, bool reads_only = false) const;
  // In place: the output element in the memory of rank r's input element j;
  // -1 when none.
  int64_t aliased_output(int r, size_t j) const;
  std::vector<Cell>& values(int r, qc::Values where);
  const std::vector<Cell>* readable(int r, const qc::Span& span, const char* what);
  std::vector<Cell>* writable(int r, const qc::Span& span, const char* what);

  [[noreturn]] void fail(int r, const std::string& what) const;
  std::string describe(const qc::Step& st) const;
  std::string deadlock() const;

  std::string label_;
  Options options_;
  std::vector<Rank> ranks_;
  // Indices into a rank's `posted`, in post order, first unmatched at head.
  struct Queue {
    std::vector<size_t> items;
    size_t head = 0;
    bool empty() const { return head == items.size(); }
    size_t front() const { return items[head]; }
    void pop() { ++head; }
    void push_back(size_t i) { items.push_back(i); }
  };
  // Visible, unmatched transfers per (sender, receiver): the sender's sends
  // and the receiver's receives.
  std::vector<Queue> sends_, recvs_;
};

std::string rank_set(uint64_t mask);

}  // namespace qcsim
