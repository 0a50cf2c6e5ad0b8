// A collective algorithm as data: the steps one rank takes, over numbered
// payload slots, in the order that fixes the result's bits. A schedule is a
// pure function of the call's shape (ranks, rank, count, group size); it
// knows nothing of codecs, transports or where the values live. Executors
// (core/executors/) run any schedule: on the host over a transport, or
// enqueued on a device stream, and the same schedule gives the same bits
// on every executor.
//
// Slots hold encoded payloads: one block of values each, encoded on this
// rank or received from a peer. Block slots (the final result's blocks)
// come first, numbered like the blocks on every rank, so a list of blocks
// that travels (an allgather phase, Framing::kBlocks) names them by slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qc {

// Where a step's values are.
enum class Values : uint8_t {
  kInput,    // the call's input, read only (an allreduce's contribution, alltoall's send buffer)
  kOutput,   // the call's output (the result; ring, tree and recursive doubling reduce in it)
  kScratch,  // floats of the executor's, zeroed by a kZero step (SRA's sum)
};

struct Span {
  Values where = Values::kOutput;
  size_t begin = 0;
  size_t count = 0;
};

enum class StepKind : uint8_t {
  kEncode,     // values -> slot; element_offset keys the random bits and residuals
  kDecode,     // slot -> values, overwriting them
  kDecodeAdd,  // slot -> values, added to them
  kZero,       // scratch values [0, count) = 0
  kAdd,        // values += source values, element by element
  kCopy,       // values = source values (nothing when they are the same memory)
  kSend,       // slots [slot, slot_end) -> peer, posted (not awaited)
  kRecv,       // peer -> slots [slot, slot_end), posted (not awaited)
  kWait,       // the sends and receives posted in `group` complete (kAllGroups: all posted)
};

// Transfers are posted in groups; a wait names the group it completes, so
// a pipelined schedule computes on one chunk while another's transfers
// are on the wire. Unpipelined schedules use one group and plain waits.
constexpr uint32_t kAllGroups = 0xffffffffu;

// How a send or receive carries its slots.
enum class Framing : uint8_t {
  kEncoded,  // one slot's encoded message as it is (a partial sum, a block)
  kBlocks,   // slots [slot, slot_end) as a block list that names each by its
             // slot (the allgather phases: bytes forwarded, never re-encoded)
};

struct Step {
  StepKind kind = StepKind::kWait;
  Span values;            // kEncode's source; kDecode/kDecodeAdd/kZero/kAdd's destination
  Span source;            // kAdd's and kCopy's source
  uint64_t element_offset = 0;  // kEncode: the values' position in the tensor
  size_t slot = 0;        // kEncode/kDecode*: the slot; kSend/kRecv: the first
  size_t slot_end = 0;    // kSend/kRecv: one past the last slot
  int peer = -1;          // kSend/kRecv
  uint32_t tag = 0;       // kSend/kRecv: the step's name on the wire; both sides use it
  Framing framing = Framing::kEncoded;
  uint32_t group = 0;     // kSend/kRecv: the group posted in; kWait: the group completed
};

// The call's shape, all a schedule depends on.
struct ScheduleShape {
  int ranks = 1;
  int rank = 0;
  size_t count = 0;    // allreduce: elements; alltoall: elements per rank
  int group_size = 1;  // recursive doubling's group (paper 000 Alg. 5)
  // Pipelining (SRA, ring, alltoall): blocks travel in pieces of `chunk`
  // values (the last piece shorter), each piece's encode, transfer and
  // decode overlapping the others'. 0: whole blocks. A chunk must be a
  // multiple of the codec's bucket, so that every value is encoded with the
  // bits it has unpipelined (planner: CollectiveContext::pipeline_chunk).
  size_t chunk = 0;
  int root = 0;  // broadcast: the rank whose input everyone gets
  // The whole-block ring: partial sums in one scratch block instead of the
  // output, which is then written once (for host values; on device values
  // it would cost a device copy per step).
  bool partials_in_scratch = false;
};

struct Schedule {
  std::vector<size_t> slot_counts;  // values encoded in each slot
  std::vector<Step> steps;
  size_t scratch_count = 0;         // the most scratch values a kZero asks for
  size_t block_slots = 0;           // slots [0, block_slots) are the result's blocks
  // Payloads encoded elsewhere (run_transfers_on_host) whose size is not
  // the codec's for slot_counts: when set, slot i's receive capacity in
  // bytes (a sparse allreduce's rows: their indices ride behind the values).
  std::vector<size_t> slot_bytes;

  // Empty again, keeping the vectors' memory: a 128-rank ring's steps are
  // ~120 KiB per rank, which a call would otherwise allocate and fault in.
  void clear() {
    slot_counts.clear();
    steps.clear();
    scratch_count = 0;
    block_slots = 0;
    slot_bytes.clear();
  }
};

// Appends steps to a schedule; what the algorithm files write with.
class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(Schedule* schedule) : s_(*schedule) { s_.clear(); }

  // A slot for the payload of `count` values; returns its index.
  size_t slot(size_t count);
  // `blocks` block slots of block_range(count, blocks, b) values each; only
  // as the schedule's first slots.
  void block_slots(size_t count, size_t blocks);
  // Declares the slots made so far the result's blocks (pieces of blocks,
  // when pipelined), numbered alike on every rank.
  void mark_block_slots() { s_.block_slots = s_.slot_counts.size(); }

  void encode(Span from, size_t slot);  // element_offset: from.begin
  void encode_at(Span from, uint64_t element_offset, size_t slot);
  void decode(size_t slot, Span to);
  void decode_add(size_t slot, Span to);
  void zero_scratch(size_t count);
  void add(Span to, Span from);
  void copy(Span to, Span from);
  // Transfers go into group 0 unless a group is named.
  void send(int peer, size_t slot, uint32_t tag, uint32_t group = 0);
  void recv(int peer, size_t slot, uint32_t tag, uint32_t group = 0);
  void send_blocks(int peer, size_t first, size_t last, uint32_t tag, uint32_t group = 0);
  void recv_blocks(int peer, size_t first, size_t last, uint32_t tag, uint32_t group = 0);
  // Completes every transfer posted so far.
  void wait();
  // Completes the transfers posted in `group`.
  void wait_group(uint32_t group);

 private:
  void transfer(StepKind kind, int peer, size_t first, size_t last, uint32_t tag,
                Framing framing, uint32_t group);
  Schedule& s_;
};

inline Span output(size_t begin, size_t count) { return Span{Values::kOutput, begin, count}; }
inline Span input(size_t begin, size_t count) { return Span{Values::kInput, begin, count}; }
inline Span scratch(size_t count) { return Span{Values::kScratch, 0, count}; }

}  // namespace qc
