// qc-perf: what each collective is to the benchmark: its name, buffer shapes,
// the size a row reports, nccl-tests' bandwidth factors, the MPI call it is
// compared with, the schedule qc runs for it, and the call itself.
#include "perf.h"

namespace qcperf {

const char* op_name(Op op) {
  switch (op) {
    case Op::Allreduce: return "allreduce";
    case Op::Alltoall: return "alltoall";
    case Op::ReduceScatter: return "reduce_scatter";
    case Op::Allgather: return "allgather";
    case Op::Broadcast: return "broadcast";
    case Op::SparseAllreduce: return "sparse_allreduce";
  }
  return "?";
}

bool op_from_name(const std::string& name, Op* op) {
  struct Spelling {
    const char* name;
    Op op;
  };
  // Lower case with '_' (qctool::normalize_name's form).
  static const Spelling kSpellings[] = {
      {"allreduce", Op::Allreduce},      {"all_reduce", Op::Allreduce},
      {"alltoall", Op::Alltoall},        {"all_to_all", Op::Alltoall},
      {"reduce_scatter", Op::ReduceScatter}, {"reducescatter", Op::ReduceScatter},
      {"allgather", Op::Allgather},      {"all_gather", Op::Allgather},
      {"broadcast", Op::Broadcast},      {"bcast", Op::Broadcast},
      {"sparse_allreduce", Op::SparseAllreduce}, {"sparse", Op::SparseAllreduce},
      {"sparseallreduce", Op::SparseAllreduce},
  };
  for (const Spelling& s : kSpellings) {
    if (name == s.name) {
      *op = s.op;
      return true;
    }
  }
  return false;
}

bool op_reduces(Op op) {
  return op == Op::Allreduce || op == Op::ReduceScatter || op == Op::SparseAllreduce;
}

bool op_replicated(Op op) {
  return op == Op::Allreduce || op == Op::Allgather || op == Op::Broadcast ||
         op == Op::SparseAllreduce;
}

bool op_takes_error_buffer(Op op) {
  return op == Op::Allreduce || op == Op::ReduceScatter || op == Op::Allgather;
}

bool op_scheduled(Op op) {
  return op == Op::ReduceScatter || op == Op::Allgather || op == Op::Broadcast;
}

bool sparse_row_codec(qc_codec_t c) {
  return c == QC_CODEC_NONE || c == QC_CODEC_FP16 || c == QC_CODEC_BF16 ||
         c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}

size_t send_elems(Op op, int nranks, size_t count) {
  return op == Op::Alltoall || op == Op::ReduceScatter ? count * size_t(nranks) : count;
}

size_t recv_elems(Op op, int nranks, size_t count) {
  return op == Op::Alltoall || op == Op::Allgather ? count * size_t(nranks) : count;
}

size_t size_elems_per_count(Op op, int nranks) {
  return op == Op::Alltoall || op == Op::ReduceScatter ? size_t(nranks) : 1;
}

double algbw_bytes(Op op, int nranks, double size) {
  return op == Op::Allgather ? size * nranks : size;
}

// nccl-tests' PERFORMANCE.md: the factor that turns algbw into the bandwidth
// of the busiest link of a bandwidth-optimal algorithm. The sparse allreduce
// takes the allreduce's, on its dense table's bytes: its row compares with a
// dense allreduce of the same table.
double busbw_factor(Op op, int n) {
  if (n <= 0) return 0;
  switch (op) {
    case Op::Allreduce:
    case Op::SparseAllreduce: return 2.0 * (n - 1) / n;
    case Op::Broadcast: return 1.0;
    default: return double(n - 1) / n;
  }
}

double optimal_wire_bytes(Op op, int n, double size) {
  if (n <= 0) return 0;
  // A broadcast sends the message n-1 times in all: (n-1)/n per rank on
  // average (its busbw factor 1 is per link, not per rank).
  if (op == Op::Broadcast) return size * (n - 1) / n;
  return algbw_bytes(op, n, size) * busbw_factor(op, n);
}

const char* mpi_baseline_name(Op op) {
  switch (op) {
    case Op::Allreduce:
    case Op::SparseAllreduce: return "MPI_Allreduce";
    case Op::Alltoall: return "MPI_Alltoall";
    case Op::ReduceScatter: return "MPI_Reduce_scatter_block";
    case Op::Allgather: return "MPI_Allgather";
    case Op::Broadcast: return "MPI_Bcast";
  }
  return "?";
}

const char* schedule_name(Op op, qc_algorithm_t a, int nranks, size_t message_bytes) {
  switch (op) {
    case Op::ReduceScatter: return a == QC_ALGO_RING ? "ring" : "direct";
    case Op::Allgather:
      if (a == QC_ALGO_RING) return "ring";
      if (a == QC_ALGO_RECURSIVE_DOUBLING && nranks > 0 && (nranks & (nranks - 1)) == 0)
        return "recursive_doubling";
      return "direct";
    case Op::Broadcast:
      // AUTO: the tree below 64 KiB (the library's small-message limit).
      if (a == QC_ALGO_TREE || (a == QC_ALGO_AUTO && message_bytes < 64 * 1024)) return "tree";
      return "chain";
    default: return "-";
  }
}

qc_policy_t sent_policy(const qc_policy_t& policy, size_t message_bytes) {
  qc_policy_t p = policy;
  if (message_bytes < p.min_compress_bytes && p.codec != QC_CODEC_NONE) {
    p.codec = QC_CODEC_NONE;
    if (p.algorithm == QC_ALGO_NATIVE) p.algorithm = QC_ALGO_AUTO;
  }
  return p;
}

SparseArgs sparse_args(const Options& opt, const RankBuffers& b) {
  SparseArgs a;
  a.indices = b.indices.data();
  a.row_len = opt.row_len;
  a.nrows = b.recv_bytes / (dtype_size(opt.dtype) * opt.row_len);
  return a;
}

qc_status_t call_collective(Op op, qc_comm_t comm, int rank, const void* send, void* recv,
                            size_t count, qc_dtype_t dtype, qc_reduce_op_t redop,
                            qc_error_buffer_t eb, void* stream, const SparseArgs* sparse) {
  switch (op) {
    case Op::Allreduce:
      return qc_allreduce(comm, send, recv, count, dtype, redop, nullptr, eb, stream);
    case Op::Alltoall: return qc_alltoall(comm, send, recv, count, dtype, nullptr, stream);
    case Op::ReduceScatter:
      return qc_reduce_scatter(comm, send, recv, count, dtype, redop, nullptr, eb, stream);
    case Op::Allgather: return qc_allgather(comm, send, recv, count, dtype, nullptr, eb, stream);
    case Op::Broadcast:
      return qc_broadcast(comm, rank == kBroadcastRoot ? send : nullptr, recv, count, dtype,
                          kBroadcastRoot, nullptr, stream);
    case Op::SparseAllreduce:
      if (sparse == nullptr) return QC_ERROR_INVALID_ARGUMENT;
      return qc_sparse_allreduce_dense(comm, count ? sparse->indices : nullptr,
                                       count ? send : nullptr, count, sparse->row_len,
                                       sparse->nrows, recv, dtype, redop, nullptr);
  }
  return QC_ERROR_INVALID_ARGUMENT;
}

}  // namespace qcperf
