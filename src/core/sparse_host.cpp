// The sparse allreduce (paper 001): every rank's rows (index, row_len
// values), their union with summed rows as the result, bit-identical on
// every rank. First schedule: the allgather of the ranks' canonical rows,
// each rank's values encoded once by it with one scale per row (bucket =
// row_len), its indices behind them, forwarded as bytes by the allgather
// schedule and merged by every rank in rank order.
// WORK IN PROGRESS (issue 31, item 4): no density-based choice yet (the
// sparse reduce-scatter and the densified SRA are next), no error feedback.
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

// The codecs whose buckets can be a row: one scale per row.
bool row_codec(qc_codec_t c) {
  return c == QC_CODEC_NONE || c == QC_CODEC_FP16 || c == QC_CODEC_BF16 ||
         c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}

}  // namespace

Status comm_sparse_allreduce(Communicator* comm, const int64_t* indices, const void* values,
                             size_t nnz, size_t row_len, int64_t nrows, qc_dtype_t dtype,
                             qc_reduce_op_t op, const char* layer, SparseRows* result) {
  QC_RETURN_IF_ERROR(check_healthy(comm));
  const int n = comm->transport->size();
  const int rank = comm->transport->rank();
  qc_policy_t policy = comm->policies.resolve(layer);
  if (row_len > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("argument 'row_len' is " + std::to_string(row_len) +
                            "; expected at most " + std::to_string(INT32_MAX));
  }
  policy.bucket_size = static_cast<int>(row_len > 0 ? row_len : 1);
  std::vector<float> widened(nnz * row_len);
  cpu::to_float32(values, dtype, widened.data(), widened.size());
  SparseRows mine;
  // An index out of range is found here, with the peers already on their
  // way: this rank says so in the count exchange (kRefused), so every rank
  // fails the call (this one with its own status, the peers with MISMATCH)
  // and none waits, and the communicator stays usable.
  constexpr uint64_t kRefused = UINT64_MAX;
  Status local = canonical_rows(indices, widened.data(), nnz, row_len, nrows, &mine);
  if (local && !row_codec(policy.codec)) {
    local = unsupported(std::string("a sparse allreduce quantizes each row with its own scale; "
                                    "codec '") + codec_name(policy.codec) +
                        "' has no such form (use none, fp16, bf16, minmax, qsgd or onebit)");
  }
  const size_t rows = mine.indices.size();

  // The row counts first (they size every message); row_len, dtype, op,
  // layer and policy are every rank's, which the envelopes check.
  std::unique_ptr<Codec> none_codec;
  qc_policy_t none = policy;
  none.codec = QC_CODEC_NONE;
  QC_RETURN_IF_ERROR(make_codec(none, QC_DTYPE_FLOAT32, &none_codec));
  const uint64_t signature = call_signature(CollectiveKind::kSparseAllreduce, row_len, dtype, op,
                                            layer, policy, QC_ALGO_AUTO) ^
                             static_cast<uint64_t>(nrows);
  std::vector<uint64_t> counts;
  QC_RETURN_IF_ERROR(run_collective(comm, *none_codec, signature, 0, {},
                                    [&](CollectiveContext& ctx) {
    return ctx.allgather_u64(local ? rows : kRefused, &counts);
  }));
  QC_RETURN_IF_ERROR(local);
  size_t total_rows = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] == kRefused) {
      return mismatch("rank " + std::to_string(b) + " refused its rows (an index out of range "
                      "or a codec without a per-row form); no rank ran the sparse allreduce");
    }
    total_rows += static_cast<size_t>(counts[b]);
  }

  // The values' codec: min_compress_bytes judges all ranks' rows together
  // (every rank computes the same, from the same counts).
  const qc_policy_t effective = effective_policy(policy, total_rows * row_len * dtype_size(dtype));
  std::unique_ptr<Codec> codec;
  QC_RETURN_IF_ERROR(make_codec(effective, QC_DTYPE_FLOAT32, &codec));
  const auto layers = one_layer(layer, rows * row_len, rows * row_len * dtype_size(dtype),
                                squared_norm(mine.values.data(), mine.values.size()));
  std::vector<Message> slots(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> idx(static_cast<size_t>(n));
  std::vector<std::vector<float>> val(static_cast<size_t>(n));
  Schedule schedule;
  build_allgather_direct(ScheduleShape{n, rank, 1, 1, 0, 0}, &schedule);
  schedule.slot_bytes.resize(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) {
    const size_t c = static_cast<size_t>(counts[static_cast<size_t>(b)]);
    schedule.slot_bytes[static_cast<size_t>(b)] = codec->max_encoded_size(c * row_len) + 8 * c;
  }
  QC_RETURN_IF_ERROR(run_collective(comm, *codec, signature ^ 0x5ba75e5ull,
                                    rows * row_len * dtype_size(dtype), layers,
                                    [&](CollectiveContext& ctx) -> Status {
    ctx.set_seed(effective.seed);
    Message& own = slots[static_cast<size_t>(rank)];
    QC_RETURN_IF_ERROR(ctx.encode(mine.values.data(), mine.values.size(), 0, &own));
    const size_t encoded = own.payload_size();
    own.reserve_payload(encoded + 8 * rows);
    for (size_t k = 0; k < rows; ++k) {
      store_le64(own.payload() + encoded + 8 * k, static_cast<uint64_t>(mine.indices[k]));
    }
    own.set_payload_size(encoded + 8 * rows);
    std::vector<Message*> slot_ptrs(static_cast<size_t>(n));
    for (int b = 0; b < n; ++b) slot_ptrs[static_cast<size_t>(b)] = &slots[static_cast<size_t>(b)];
    QC_RETURN_IF_ERROR(run_transfers_on_host(ctx, schedule, slot_ptrs.data()));
    // Every rank's rows, decoded (the own ones too: the same bytes everywhere).
    for (int b = 0; b < n; ++b) {
      const size_t c = static_cast<size_t>(counts[static_cast<size_t>(b)]);
      const Message& m = slots[static_cast<size_t>(b)];
      if (m.payload_size() < 8 * c) {
        return corrupt_data("rank " + std::to_string(b) + "'s rows are " +
                            std::to_string(m.payload_size()) + " bytes, too few for " +
                            std::to_string(c) + " indices");
      }
      const size_t encoded = m.payload_size() - 8 * c;
      std::vector<int64_t>& got = idx[static_cast<size_t>(b)];
      got.resize(c);
      for (size_t k = 0; k < c; ++k) {
        const uint64_t v = load_le64(m.payload() + encoded + 8 * k);
        const bool ascending = k == 0 || static_cast<int64_t>(v) > got[k - 1];
        if (v > static_cast<uint64_t>(INT64_MAX) || !ascending ||
            (nrows > 0 && static_cast<int64_t>(v) >= nrows)) {
          return corrupt_data("rank " + std::to_string(b) +
                              "'s row indices are not ascending indices in range");
        }
        got[k] = static_cast<int64_t>(v);
      }
      val[static_cast<size_t>(b)].resize(c * row_len);
      QC_RETURN_IF_ERROR(
          ctx.decode(m.payload(), encoded, val[static_cast<size_t>(b)].data(), c * row_len));
    }
    return Status::ok();
  }));

  std::vector<const int64_t*> lists;
  for (const auto& l : idx) lists.push_back(l.data());
  std::vector<std::vector<size_t>> positions;
  merge_row_indices(lists, std::vector<size_t>(counts.begin(), counts.end()), &result->indices,
                    &positions);
  result->values.assign(result->indices.size() * row_len, 0.0f);
  for (int b = 0; b < n; ++b) {  // rank order: the same sums on every rank
    const auto& pos = positions[static_cast<size_t>(b)];
    for (size_t k = 0; k < pos.size(); ++k) {
      float* dst = result->values.data() + pos[k] * row_len;
      const float* src = val[static_cast<size_t>(b)].data() + k * row_len;
      for (size_t j = 0; j < row_len; ++j) dst[j] += src[j];
    }
  }
  if (op == QC_OP_AVG) {
    const float scale = 1.0f / static_cast<float>(n);
    for (float& v : result->values) v *= scale;
  }
  return Status::ok();
}

}  // namespace qc
