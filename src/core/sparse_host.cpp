// The sparse allreduce (paper 001): every rank's rows (index, row_len
// values), their union with summed rows as the result, bit-identical on
// every rank. Rows travel as one payload per message: the codec's message
// of the values (one bucket per row: one scale per row) with the row
// indices behind it; receive sizes come from row counts exchanged first
// (Schedule::slot_bytes), and the schedules of the registry carry them.
//  - allgather (policy.algorithm anything but sra): each rank's rows go to
//    every rank (the direct allgather schedule), encoded once by their
//    owner; every rank adds them in rank order.
//  - scatter-reduce-allgather (sra): rows go to the rank that owns their
//    index (index mod n; the pairwise alltoall schedule), which adds them
//    in rank order (its own exactly), encodes the union of its rows once,
//    and the owners' rows are allgathered. Each value is quantized at most
//    twice, and a row many ranks share travels to its owner only.
// WORK IN PROGRESS (issue 31, item 4): AUTO's choice by density, the
// densified SRA for dense tables, i/emulate forms.
#include <string>
#include <vector>

#include "core/byte_order.h"
#include "core/call_stats.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/executors/host_executor.h"
#include "core/planner.h"
#include "core/policy.h"
#include "core/schedules/registry.h"
#include "core/sparse_rows.h"
#include "cpu/dtype_convert.h"

namespace qc {
namespace {

constexpr uint64_t kRefused = UINT64_MAX;  // a row count that says "this rank failed"

// The codecs whose buckets can be a row: one scale per row.
bool row_codec(qc_codec_t c) {
  return c == QC_CODEC_NONE || c == QC_CODEC_FP16 || c == QC_CODEC_BF16 ||
         c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}

// The most bytes a payload of `rows` rows takes (saturating: a peer's
// count is not trusted to be small).
size_t rows_capacity(const Codec& codec, uint64_t rows, size_t row_len) {
  if (rows > SIZE_MAX / 16 / (row_len + 1)) return SIZE_MAX;
  const size_t values = codec.max_encoded_size(static_cast<size_t>(rows) * row_len);
  return values > SIZE_MAX - 8 * rows ? SIZE_MAX : values + 8 * static_cast<size_t>(rows);
}

Status encode_rows(CollectiveContext& ctx, const int64_t* indices, const float* values,
                   size_t rows, size_t row_len, Message* m) {
  QC_RETURN_IF_ERROR(ctx.encode(values, rows * row_len, 0, m));
  const size_t encoded = m->payload_size();
  m->reserve_payload(encoded + 8 * rows);
  for (size_t k = 0; k < rows; ++k) {
    store_le64(m->payload() + encoded + 8 * k, static_cast<uint64_t>(indices[k]));
  }
  m->set_payload_size(encoded + 8 * rows);
  return Status::ok();
}

// Rank `from`'s `rows` rows from m; the indices must ascend and lie in
// [0, limit) (limit <= 0: no bound), else CORRUPT_DATA (a damaged or
// hostile message).
Status decode_rows(CollectiveContext& ctx, const Message& m, size_t rows, size_t row_len,
                   int64_t limit, int from, SparseRows* out) {
  if (m.payload_size() < 8 * rows) {
    return corrupt_data("rank " + std::to_string(from) + "'s rows are " +
                        std::to_string(m.payload_size()) + " bytes, too few for " +
                        std::to_string(rows) + " indices");
  }
  const size_t encoded = m.payload_size() - 8 * rows;
  out->indices.resize(rows);
  for (size_t k = 0; k < rows; ++k) {
    const uint64_t v = load_le64(m.payload() + encoded + 8 * k);
    const bool ascending = k == 0 || static_cast<int64_t>(v) > out->indices[k - 1];
    if (v > static_cast<uint64_t>(INT64_MAX) || !ascending ||
        (limit > 0 && static_cast<int64_t>(v) >= limit)) {
      return corrupt_data("rank " + std::to_string(from) +
                          "'s row indices are not ascending indices in range");
    }
    out->indices[k] = static_cast<int64_t>(v);
  }
  out->values.resize(rows * row_len);
  return ctx.decode(m.payload(), encoded, out->values.data(), rows * row_len);
}

// The union of `parts` (each canonical) with rows added in part order.
void add_rows_in_order(const std::vector<SparseRows>& parts, size_t row_len, SparseRows* sum) {
  std::vector<const int64_t*> lists;
  std::vector<size_t> counts;
  for (const SparseRows& p : parts) {
    lists.push_back(p.indices.data());
    counts.push_back(p.indices.size());
  }
  std::vector<std::vector<size_t>> positions;
  merge_row_indices(lists, counts, &sum->indices, &positions);
  sum->values.assign(sum->indices.size() * row_len, 0.0f);
  for (size_t b = 0; b < parts.size(); ++b) {
    for (size_t k = 0; k < positions[b].size(); ++k) {
      float* dst = sum->values.data() + positions[b][k] * row_len;
      const float* src = parts[b].values.data() + k * row_len;
      for (size_t j = 0; j < row_len; ++j) dst[j] += src[j];
    }
  }
}

// Every rank's `mine`, through the direct allgather schedule; out[b] gets
// rank b's rows as decoded (the own ones too: the same bytes everywhere).
Status allgather_rows(CollectiveContext& ctx, const Codec& codec, const SparseRows& mine,
                      const std::vector<uint64_t>& counts, size_t row_len, int64_t limit,
                      std::vector<SparseRows>* out) {
  const int n = ctx.size();
  const int rank = ctx.rank();
  Schedule schedule;
  build_allgather_direct(ScheduleShape{n, rank, 1, 1, 0, 0}, &schedule);
  schedule.slot_bytes.resize(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) {
    schedule.slot_bytes[static_cast<size_t>(b)] =
        rows_capacity(codec, counts[static_cast<size_t>(b)], row_len);
  }
  std::vector<Message> slots(static_cast<size_t>(n));
  std::vector<Message*> slot_ptrs;
  for (Message& m : slots) slot_ptrs.push_back(&m);
  QC_RETURN_IF_ERROR(encode_rows(ctx, mine.indices.data(), mine.values.data(),
                                 mine.indices.size(), row_len, &slots[static_cast<size_t>(rank)]));
  QC_RETURN_IF_ERROR(run_transfers_on_host(ctx, schedule, slot_ptrs.data()));
  out->assign(static_cast<size_t>(n), SparseRows{});
  for (int b = 0; b < n; ++b) {
    QC_RETURN_IF_ERROR(decode_rows(ctx, slots[static_cast<size_t>(b)],
                                   static_cast<size_t>(counts[static_cast<size_t>(b)]), row_len,
                                   limit, b, &(*out)[static_cast<size_t>(b)]));
  }
  return Status::ok();
}

// Scatter-reduce: this rank's rows of owner j (index mod n) go to rank j;
// *owned gets the sum of every rank's rows this rank owns, added in rank
// order, its own rows exactly (never encoded). counts[r * n + j]: rank r's
// rows for owner j.
Status scatter_reduce_rows(CollectiveContext& ctx, const Codec& codec,
                           const std::vector<SparseRows>& by_owner,
                           const std::vector<uint64_t>& counts, size_t row_len, int64_t limit,
                           SparseRows* owned) {
  const int n = ctx.size();
  const size_t r = static_cast<size_t>(ctx.rank());
  const size_t un = static_cast<size_t>(n);
  Schedule schedule;
  build_alltoall_pairwise(ScheduleShape{n, ctx.rank(), 1, 1, 0, 0}, &schedule);
  // The pairwise schedule's slots: j for the rows to rank j, n + i for
  // those from rank i.
  schedule.slot_bytes.assign(2 * un, 0);
  for (size_t j = 0; j < un; ++j) {
    schedule.slot_bytes[j] = rows_capacity(codec, counts[r * un + j], row_len);
    schedule.slot_bytes[un + j] = rows_capacity(codec, counts[j * un + r], row_len);
  }
  std::vector<Message> slots(2 * un);
  std::vector<Message*> slot_ptrs;
  for (Message& m : slots) slot_ptrs.push_back(&m);
  for (size_t j = 0; j < un; ++j) {
    if (j == r) continue;
    const SparseRows& part = by_owner[j];
    QC_RETURN_IF_ERROR(encode_rows(ctx, part.indices.data(), part.values.data(),
                                   part.indices.size(), row_len, &slots[j]));
  }
  QC_RETURN_IF_ERROR(run_transfers_on_host(ctx, schedule, slot_ptrs.data()));
  std::vector<SparseRows> parts(un);
  for (size_t i = 0; i < un; ++i) {
    if (i == r) {
      parts[i] = by_owner[r];
      continue;
    }
    QC_RETURN_IF_ERROR(decode_rows(ctx, slots[un + i], static_cast<size_t>(counts[i * un + r]),
                                   row_len, limit, static_cast<int>(i), &parts[i]));
    for (int64_t index : parts[i].indices) {
      if (static_cast<size_t>(index % n) != r) {
        return corrupt_data("rank " + std::to_string(i) + " sent row " + std::to_string(index) +
                            ", which rank " + std::to_string(r) + " does not own");
      }
    }
  }
  add_rows_in_order(parts, row_len, owned);
  return Status::ok();
}

}  // namespace

Status comm_sparse_allreduce(Communicator* comm, const int64_t* indices, const void* values,
                             size_t nnz, size_t row_len, int64_t nrows, qc_dtype_t dtype,
                             qc_reduce_op_t op, const char* layer, SparseRows* result) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const int n = comm->transport->size();
  const size_t un = static_cast<size_t>(n);
  qc_policy_t policy = comm->policies.resolve(layer);
  if (row_len > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("argument 'row_len' is " + std::to_string(row_len) +
                            "; expected at most " + std::to_string(INT32_MAX));
  }
  policy.bucket_size = static_cast<int>(row_len > 0 ? row_len : 1);
  const bool scatter = policy.algorithm == QC_ALGO_SRA && n > 1;
  std::vector<float> widened(nnz * row_len);
  cpu::to_float32(values, dtype, widened.data(), widened.size());
  SparseRows mine;
  // A bad index or codec is found here, with the peers already on their
  // way: this rank says so in the count exchange (kRefused), so every rank
  // fails the call (this one with its own status, the peers with MISMATCH)
  // and none waits, and the communicator stays usable.
  Status local = canonical_rows(indices, widened.data(), nnz, row_len, nrows, &mine);
  if (local && !row_codec(policy.codec)) {
    local = unsupported(std::string("a sparse allreduce quantizes each row with its own scale; "
                                    "codec '") + codec_name(policy.codec) +
                        "' has no such form (use none, fp16, bf16, minmax, qsgd or onebit)");
  }
  // Rows per owner (index mod n) for the scatter; all of them for the allgather.
  std::vector<SparseRows> by_owner(scatter ? un : 1);
  std::vector<uint64_t> my_counts(scatter ? un : 1, 0);
  if (local) {
    for (size_t k = 0; k < mine.indices.size(); ++k) {
      const size_t j = scatter ? static_cast<size_t>(mine.indices[k] % n) : 0;
      by_owner[j].indices.push_back(mine.indices[k]);
      by_owner[j].values.insert(by_owner[j].values.end(), mine.values.begin() + k * row_len,
                                mine.values.begin() + (k + 1) * row_len);
      my_counts[j] += 1;
    }
  } else {
    my_counts.assign(my_counts.size(), kRefused);
  }

  // The row counts first (they size every message); row_len, dtype, op,
  // layer, policy and nrows are every rank's, which the envelopes check.
  std::unique_ptr<Codec> none_codec;
  qc_policy_t none = policy;
  none.codec = QC_CODEC_NONE;
  QC_RETURN_IF_ERROR(make_codec(none, QC_DTYPE_FLOAT32, &none_codec));
  const uint64_t signature = call_signature(CollectiveKind::kSparseAllreduce, row_len, dtype, op,
                                            layer, policy, policy.algorithm) ^
                             static_cast<uint64_t>(nrows);
  std::vector<uint64_t> counts;
  QC_RETURN_IF_ERROR(run_collective(comm, *none_codec, signature, 0, {},
                                    [&](CollectiveContext& ctx) {
    return ctx.allgather_u64s(my_counts, &counts);
  }));
  QC_RETURN_IF_ERROR(local);
  size_t total_rows = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == kRefused) {
      return mismatch("rank " + std::to_string(e / my_counts.size()) +
                      " refused its rows (an index out of range or a codec without a per-row "
                      "form); no rank ran the sparse allreduce");
    }
    if (counts[e] > SIZE_MAX - total_rows) return corrupt_data("the ranks' row counts overflow");
    total_rows += static_cast<size_t>(counts[e]);
  }

  // The values' codec: min_compress_bytes judges all ranks' rows together
  // (every rank computes the same, from the same counts).
  const qc_policy_t effective = effective_policy(policy, total_rows * row_len * dtype_size(dtype));
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(effective, QC_DTYPE_FLOAT32, &codec));
  const size_t logical = mine.indices.size() * row_len * dtype_size(dtype);
  const auto layers = one_layer(layer, mine.indices.size() * row_len, logical,
                                squared_norm(mine.values.data(), mine.values.size()));
  std::vector<SparseRows> gathered;
  if (!scatter) {
    QC_RETURN_IF_ERROR(run_collective(comm, *codec, signature ^ 0x5ba75e5ull, logical, layers,
                                      [&](CollectiveContext& ctx) {
      ctx.set_seed(effective.seed);
      return allgather_rows(ctx, *codec, mine, counts, row_len, nrows, &gathered);
    }));
  } else {
    SparseRows owned;
    std::vector<uint64_t> owned_counts;
    QC_RETURN_IF_ERROR(run_collective(comm, *codec, signature ^ 0x5ca77e4ull, logical, layers,
                                      [&](CollectiveContext& ctx) -> Status {
      ctx.set_seed(effective.seed);
      QC_RETURN_IF_ERROR(scatter_reduce_rows(ctx, *codec, by_owner, counts, row_len, nrows, &owned));
      // The owners' unions have sizes only they know: one more count round.
      QC_RETURN_IF_ERROR(ctx.allgather_u64(owned.indices.size(), &owned_counts));
      return allgather_rows(ctx, *codec, owned, owned_counts, row_len, nrows, &gathered);
    }));
  }
  // Rank order: the same sums on every rank (the owners' rows are disjoint).
  add_rows_in_order(gathered, row_len, result);
  if (op == QC_OP_AVG) {
    const float scale = 1.0f / static_cast<float>(n);
    for (float& v : result->values) v *= scale;
  }
  return Status::ok();
}

}  // namespace qc
