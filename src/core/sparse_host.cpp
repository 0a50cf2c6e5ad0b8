// The sparse allreduce (paper 001): every rank's rows (index, row_len
// values), their union with summed rows as the result, bit-identical on
// every rank. Rows travel as one payload per message: the codec's message
// of the values (one bucket per row: one scale per row) with the row
// indices behind it; receive sizes come from row counts exchanged first
// (Schedule::slot_bytes), and the schedules of the registry carry them.
//  - allgather: each rank's rows go to
//    every rank (the direct allgather schedule), encoded once by their
//    owner; every rank adds them in rank order.
//  - scatter-reduce-allgather (sra): rows go to the rank that owns their
//    index (index mod n; the pairwise alltoall schedule), which adds them
//    in rank order (its own exactly), encodes the union of its rows once,
//    and the owners' rows are allgathered. Each value is quantized at most
//    twice, and a row many ranks share travels to its owner only.
//  - densify (dense output only): the rows scattered into the dense table,
//    which the SRA allreduce sums, one scale per row; no index travels.
// sparse_plan.h chooses among them, every rank alike, from the row counts
// exchanged first.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/byte_order.h"
#include "core/algorithms/algorithm.h"
#include "core/allreduce_host.h"
#include "core/call_stats.h"
#include "core/log.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/executors/host_executor.h"
#include "core/planner.h"
#include "core/policy.h"
#include "core/schedules/registry.h"
#include "core/sparse_plan.h"
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
        sparse_rows_capacity(codec, counts[static_cast<size_t>(b)], row_len);
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
    schedule.slot_bytes[j] = sparse_rows_capacity(codec, counts[r * un + j], row_len);
    schedule.slot_bytes[un + j] = sparse_rows_capacity(codec, counts[j * un + r], row_len);
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

namespace {

// Where a sparse allreduce's result goes: the rows, or a dense table.
struct SparseOutput {
  SparseRows* rows = nullptr;  // the sparse form
  void* dense = nullptr;       // the dense form: nrows x row_len of the call's dtype
  size_t nrows = 0;
};

// The densified schedule: the rows scattered into a float32 table, which
// the SRA allreduce sums (one scale per row, as the sparse schedules). The
// table is padded to a multiple of n rows, so that every rank's block, and
// so every bucket, starts at a row: a bucket across two rows would give an
// all-zero row its neighbour's scale, and the zero would not come back
// exactly zero.
Status run_densified(CollectiveContext& ctx, const SparseRows& mine, size_t row_len,
                     size_t nrows, std::vector<float>* table) {
  const size_t n = static_cast<size_t>(ctx.size());
  table->assign((nrows + n - 1) / n * n * row_len, 0.0f);
  for (size_t k = 0; k < mine.indices.size(); ++k) {
    std::copy(mine.values.begin() + k * row_len, mine.values.begin() + (k + 1) * row_len,
              table->begin() + static_cast<size_t>(mine.indices[k]) * row_len);
  }
  return run_allreduce(ctx, QC_ALGO_SRA, table->data(), table->size(), /*group_size=*/1);
}

void write_dense(const SparseRows& rows, size_t row_len, size_t nrows, qc_dtype_t dtype,
                 void* dense) {
  // Zero bits are +0 in every dtype, and only the union's rows are converted.
  const size_t row_bytes = row_len * dtype_size(dtype);
  std::memset(dense, 0, nrows * row_bytes);
  for (size_t k = 0; k < rows.indices.size(); ++k) {
    cpu::from_float32(rows.values.data() + k * row_len, dtype,
                      static_cast<char*>(dense) + static_cast<size_t>(rows.indices[k]) * row_bytes,
                      row_len);
  }
}

Status run_sparse(Communicator* comm, const int64_t* indices, const void* values, size_t nnz,
                  size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                  const SparseOutput& output) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const int n = comm->transport->size();
  const size_t un = static_cast<size_t>(n);
  const bool dense_output = output.dense != nullptr || output.rows == nullptr;
  const int64_t limit = dense_output ? static_cast<int64_t>(output.nrows) : 0;
  qc_policy_t policy = comm->policies.resolve(layer);
  if (row_len > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("argument 'row_len' is " + std::to_string(row_len) +
                            "; expected at most " + std::to_string(INT32_MAX));
  }
  policy.bucket_size = static_cast<int>(row_len);
  std::vector<float> widened(nnz * row_len);
  cpu::to_float32(values, dtype, widened.data(), widened.size());
  SparseRows mine;
  // A bad index or codec is found here, with the peers already on their
  // way: this rank says so in the count exchange (kRefused), so every rank
  // fails the call (this one with its own status, the peers with MISMATCH)
  // and none waits, and the communicator stays usable.
  Status local = canonical_rows(indices, widened.data(), nnz, row_len, limit, &mine);
  if (local && !row_codec(policy.codec)) {
    local = unsupported(std::string("a sparse allreduce quantizes each row with its own scale; "
                                    "codec '") + codec_name(policy.codec) +
                        "' has no such form (use none, fp16, bf16, minmax, qsgd or onebit)");
  }
  // Rows per owner (index mod n), and one past the largest index: what
  // every rank needs to size the messages and choose the schedule.
  std::vector<uint64_t> my_counts(un + 1, 0);
  if (local) {
    for (int64_t index : mine.indices) my_counts[static_cast<size_t>(index % n)] += 1;
    if (!mine.indices.empty()) my_counts[un] = static_cast<uint64_t>(mine.indices.back()) + 1;
  } else {
    my_counts.assign(my_counts.size(), kRefused);
  }

  // The counts first (they size every message); row_len, dtype, op, layer,
  // policy, the output's form and nrows are every rank's, which the
  // envelopes check.
  std::unique_ptr<Codec> none_codec;
  qc_policy_t none = policy;
  none.codec = QC_CODEC_NONE;
  QC_RETURN_IF_ERROR(make_codec(none, QC_DTYPE_FLOAT32, &none_codec));
  const uint64_t signature = call_signature(CollectiveKind::kSparseAllreduce, row_len, dtype, op,
                                            layer, policy, policy.algorithm) ^
                             (dense_output ? static_cast<uint64_t>(output.nrows) + 1 : 0);
  std::vector<uint64_t> counts;
  QC_RETURN_IF_ERROR(run_collective(comm, *none_codec, signature, 0, {},
                                    [&](CollectiveContext& ctx) {
    return ctx.allgather_u64s(my_counts, &counts);
  }));
  QC_RETURN_IF_ERROR(local);
  SparseShape shape;
  shape.ranks = n;
  shape.row_len = row_len;
  shape.dense_output = dense_output;
  shape.extent = dense_output ? output.nrows : 0;
  shape.counts.resize(un * un);
  size_t total_rows = 0;
  for (size_t r = 0; r < un; ++r) {
    for (size_t j = 0; j <= un; ++j) {
      const uint64_t c = counts[r * (un + 1) + j];
      if (c == kRefused) {
        return mismatch("rank " + std::to_string(r) +
                        " refused its rows (an index out of range or a codec without a per-row "
                        "form); no rank ran the sparse allreduce");
      }
      if (j == un) {
        // A dense table takes no index past its end, whatever a peer says.
        if (dense_output && c > output.nrows) {
          return corrupt_data("rank " + std::to_string(r) + " has rows past the table's " +
                              std::to_string(output.nrows));
        }
        shape.extent = std::max(shape.extent, c);
        continue;
      }
      if (c > SIZE_MAX - total_rows) return corrupt_data("the ranks' row counts overflow");
      total_rows += static_cast<size_t>(c);
      shape.counts[r * un + j] = c;
    }
  }

  if (dense_output && output.nrows == 0 && total_rows > 0) {
    return corrupt_data("a peer sent rows for an empty table");
  }
  // The values' codec: min_compress_bytes judges all ranks' rows together
  // (every rank computes the same, from the same counts).
  const qc_policy_t effective = effective_policy(policy, total_rows * row_len * dtype_size(dtype));
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(effective, QC_DTYPE_FLOAT32, &codec));
  const SparsePlan plan = plan_sparse(shape, *codec, policy.algorithm,
                                      static_cast<SparseSchedule>(comm->sparse_schedule));
  if (log_enabled(LogLevel::kDebug)) {
    log_debug("sparse_allreduce of " + std::to_string(total_rows) + " rows x " +
              std::to_string(row_len) + ", layer '" + (layer != nullptr ? layer : "*") +
              "': schedule " + sparse_schedule_name(plan.schedule) + ": " + plan.why);
  }
  const size_t logical = mine.indices.size() * row_len * dtype_size(dtype);
  const auto layers = one_layer(layer, mine.indices.size() * row_len, logical,
                                input_norm_for_stats(*comm, mine.values.data(), mine.values.size()));
  const uint64_t call = signature ^ (0x5ba75e5ull + static_cast<uint64_t>(plan.schedule));
  SparseRows summed;
  std::vector<float> table;
  std::vector<SparseRows> gathered;
  const Status ran = run_collective(comm, *codec, call, logical, layers,
                                   [&](CollectiveContext& ctx) -> Status {
    ctx.set_seed(effective.seed);
    switch (plan.schedule) {
      case SparseSchedule::kDensify:
        return run_densified(ctx, mine, row_len, output.nrows, &table);
      case SparseSchedule::kScatterReduce: {
        // The rows split by owner: only this schedule needs the copy.
        std::vector<SparseRows> by_owner(un);
        for (size_t k = 0; k < mine.indices.size(); ++k) {
          SparseRows& part = by_owner[static_cast<size_t>(mine.indices[k] % n)];
          part.indices.push_back(mine.indices[k]);
          part.values.insert(part.values.end(), mine.values.begin() + k * row_len,
                             mine.values.begin() + (k + 1) * row_len);
        }
        SparseRows owned;
        std::vector<uint64_t> owned_counts;
        QC_RETURN_IF_ERROR(scatter_reduce_rows(ctx, *codec, by_owner, shape.counts, row_len,
                                               limit, &owned));
        // The owners' unions have sizes only they know: one more count round.
        QC_RETURN_IF_ERROR(ctx.allgather_u64(owned.indices.size(), &owned_counts));
        return allgather_rows(ctx, *codec, owned, owned_counts, row_len, limit, &gathered);
      }
      default: {
        std::vector<uint64_t> rank_rows(un, 0);
        for (size_t r = 0; r < un; ++r) {
          for (size_t j = 0; j < un; ++j) rank_rows[r] += shape.counts[r * un + j];
        }
        return allgather_rows(ctx, *codec, mine, rank_rows, row_len, limit, &gathered);
      }
    }
  });
  QC_RETURN_IF_ERROR(ran);
  if (plan.schedule == SparseSchedule::kDensify) {
    finish_allreduce(table.data(), output.nrows * row_len, dtype, op, n, output.dense);
    return Status::ok();
  }
  // Rank order: the same sums on every rank (the owners' rows are disjoint).
  SparseRows& result = output.rows != nullptr ? *output.rows : summed;
  add_rows_in_order(gathered, row_len, &result);
  if (op == QC_OP_AVG) {
    const float scale = 1.0f / static_cast<float>(n);
    for (float& v : result.values) v *= scale;
  }
  if (output.dense != nullptr) write_dense(result, row_len, output.nrows, dtype, output.dense);
  return Status::ok();
}

}  // namespace

Status comm_sparse_allreduce(Communicator* comm, const int64_t* indices, const void* values,
                             size_t nnz, size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op,
                             const char* layer, SparseRows* result) {
  SparseOutput output;
  output.rows = result;
  return run_sparse(comm, indices, values, nnz, row_len, dtype, op, layer, output);
}

Status comm_sparse_allreduce_dense(Communicator* comm, const int64_t* indices, const void* values,
                                   size_t nnz, size_t row_len, size_t nrows, void* dense,
                                   qc_dtype_t dtype, qc_reduce_op_t op, const char* layer) {
  SparseOutput output;
  output.dense = dense;
  output.nrows = nrows;
  return run_sparse(comm, indices, values, nnz, row_len, dtype, op, layer, output);
}

}  // namespace qc
