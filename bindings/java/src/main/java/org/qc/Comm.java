package org.qc;

import java.lang.ref.Reference;
import java.nio.Buffer;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.nio.ShortBuffer;
import java.nio.charset.StandardCharsets;

/**
 * A qc communicator: one rank of a group that runs compressed collectives.
 *
 * <h2>Threads</h2>
 * A communicator is used by <b>one thread at a time</b> (like an NCCL communicator);
 * the ranks of a local group ({@link #createLocal(int)}) are driven from different
 * threads at once. Methods are synchronized, so that closing a communicator while
 * another thread is inside a call cannot free memory under it; two threads that
 * run collectives on the same communicator are still a programming error.
 *
 * <h2>Buffers</h2>
 * The {@link FloatBuffer} (and {@link ShortBuffer}) overloads are <b>zero-copy</b>:
 * C reads and writes the buffer's memory directly, from its position to its limit
 * (the position is not changed). They need a direct buffer in native byte order
 * ({@code ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder()).asFloatBuffer()});
 * a heap buffer gives {@link IllegalArgumentException}. The {@code float[]}
 * overloads <b>copy</b> the array into a native scratch buffer and the result back.
 *
 * <h2>Errors</h2>
 * A failed call throws {@link QcException} (unchecked); after a
 * {@link Status#MISMATCH}, {@link Status#TIMEOUT}, {@link Status#TRANSPORT} or
 * {@link Status#CORRUPT_DATA} the communicator is broken and every later collective
 * fails the same way. Using a closed communicator throws {@link IllegalStateException}.
 *
 * <h2>Non-blocking collectives</h2>
 * {@link #iallreduce}, {@link #iallreduceSegments}, {@link #ialltoall},
 * {@link #ireduceScatter}, {@link #iallgather}, {@link #ibroadcast},
 * {@link #isparseAllreduce} and {@link #isparseAllreduceDense} take the
 * arguments of the blocking calls (direct buffers only), start the call and return a
 * {@link Request} at once. Requests run on the communicator's progress thread, one
 * after another in the order they were started, which must be the same on every rank;
 * each gives the blocking call's result bit for bit. See {@link Request} for who owns
 * the buffers meanwhile.
 */
public final class Comm implements AutoCloseable {
  private final NativeHandle handle;
  private final OrphanedRequests orphans;
  private final int rank;
  private final int size;
  private FloatBuffer scratch; // float[] overloads (guarded by this)

  private Comm(long h, int rank, int size) {
    // A local, not the field: the Cleaner's action must not capture this Comm.
    OrphanedRequests requests = new OrphanedRequests();
    this.orphans = requests;
    this.handle = new NativeHandle(this, h, comm -> {
      QcNative.qc_comm_destroy(comm);
      requests.communicatorDestroyed();
    });
    this.rank = rank;
    this.size = size;
  }

  /**
   * An in-process group of {@code nranks} communicators, ranks 0..nranks-1, with
   * the default timeout (300 s). Drive each from its own thread; a collective blocks
   * until every rank of the group has made the same call.
   */
  public static Comm[] createLocal(int nranks) {
    return createLocal(nranks, 0.0);
  }

  /**
   * As {@link #createLocal(int)} with a timeout: a collective that waits longer than
   * {@code timeoutSeconds} for a peer fails with {@link Status#TIMEOUT}.
   * {@code timeoutSeconds <= 0} means the default.
   */
  public static Comm[] createLocal(int nranks, double timeoutSeconds) {
    long[] handles = new long[Math.max(nranks, 0)];
    QcNative.qcj_comm_create_local(nranks, timeoutSeconds, handles);
    Comm[] comms = new Comm[handles.length];
    boolean ok = false;
    try {
      int[] out = new int[1];
      for (int i = 0; i < handles.length; ++i) {
        QcNative.qc_comm_rank(handles[i], out);
        int rank = out[0];
        QcNative.qc_comm_size(handles[i], out);
        comms[i] = new Comm(handles[i], rank, out[0]);
        handles[i] = 0; // owned by comms[i] now
      }
      ok = true;
    } finally {
      if (!ok) {
        for (Comm c : comms) {
          if (c != null) {
            c.close();
          }
        }
        for (long h : handles) {
          if (h != 0) {
            QcNative.qc_comm_destroy(h);
          }
        }
      }
    }
    return comms;
  }

  /** The handle, or IllegalStateException if closed. */
  long handle() {
    return handle.get("qc: Comm (rank " + rank + " of " + size + ") is closed");
  }

  /** This rank, 0..size()-1. */
  public int rank() {
    handle();
    return rank;
  }

  /** The number of ranks of the group. */
  public int size() {
    handle();
    return size;
  }

  /** Whether {@link #close()} was called. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /**
   * Release the communicator (a local operation; peers still waiting for this rank
   * fail with {@link Status#TRANSPORT}). Calling it again does nothing. If another
   * thread is inside a call on this communicator, waits for that call to return.
   * Requests still outstanding get up to the communicator's timeout to complete;
   * then they are ended ({@link Request#waitFor()} throws {@link Status#TRANSPORT}).
   * Their {@link Request} objects stay valid until closed.
   */
  @Override
  public synchronized void close() {
    handle.close();
    scratch = null;
  }

  /**
   * The failure that broke this communicator's group, or {@code null} while it is
   * healthy (qc_comm_get_async_error). The exception is returned, not thrown: a
   * rank learns that a peer's call failed without making a call itself. Not
   * synchronized, so a watchdog thread may poll while another thread is blocked
   * in a collective on this communicator. A broken group stays broken: close the
   * communicator and create a new one.
   */
  public QcException asyncError() {
    return handle.withHandle("qc: Comm (rank " + rank + " of " + size + ") is closed", h -> {
      try {
        QcNative.qcj_comm_async_error(h);
        return null;
      } catch (QcException e) {
        return e;
      }
    });
  }

  // ---- allreduce ----------------------------------------------------------

  /**
   * Sum {@code sendbuf} over all ranks into {@code recvbuf} (zero-copy), with the
   * policy of layer "*". {@code recvbuf} may be {@code sendbuf} (in place).
   */
  public void allreduce(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    allreduce(sendbuf, recvbuf, ReduceOp.SUM, null, null);
  }

  /** In-place sum of {@code buf} over all ranks (zero-copy). */
  public void allreduce(FloatBuffer buf) {
    allreduce(buf, buf, ReduceOp.SUM, null, null);
  }

  /** Sum with the policy of {@code layer} (null: "*"), zero-copy. */
  public void allreduce(FloatBuffer sendbuf, FloatBuffer recvbuf, String layer) {
    allreduce(sendbuf, recvbuf, ReduceOp.SUM, layer, null);
  }

  /**
   * Reduce {@code sendbuf.remaining()} floats over all ranks, zero-copy.
   *
   * @param sendbuf direct, native-order; read from position to limit
   * @param recvbuf direct, native-order, at least as many elements remaining; may be
   *     {@code sendbuf} (in place) but must not otherwise overlap it
   * @param op {@link ReduceOp#SUM} or {@link ReduceOp#AVG}
   * @param layer name whose policy applies ({@link #setLayerPolicy}); null means "*"
   * @param errorBuffer residuals for error feedback, or null
   * @throws IllegalArgumentException for a heap, read-only (recvbuf) or too small buffer
   * @throws QcException when qc fails (ranks disagree: {@link Status#MISMATCH}, ...)
   */
  public void allreduce(FloatBuffer sendbuf, FloatBuffer recvbuf, ReduceOp op, String layer,
      ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = checkPair(sendbuf, recvbuf);
    allreduceRaw(sr[0], sr[1], sr[0].remaining(), Dtype.FLOAT32, op, layer, errorBuffer);
  }

  /**
   * 16-bit variant, zero-copy: {@code dtype} is {@link Dtype#FLOAT16} or
   * {@link Dtype#BFLOAT16}; the shorts hold the raw bits. Sums accumulate in float32.
   */
  public void allreduce(ShortBuffer sendbuf, ShortBuffer recvbuf, Dtype dtype, ReduceOp op,
      String layer, ErrorBuffer errorBuffer) {
    ShortBuffer[] sr = checkPair(sendbuf, recvbuf, dtype);
    allreduceRaw(sr[0], sr[1], sr[0].remaining(), dtype, op, layer, errorBuffer);
  }

  /** In-place sum of {@code data} over all ranks; <b>copies</b> (see the class comment). */
  public void allreduce(float[] data) {
    allreduce(data, data, ReduceOp.SUM, null, null);
  }

  /** Sum of {@code sendbuf} into {@code recvbuf}; <b>copies</b>. */
  public void allreduce(float[] sendbuf, float[] recvbuf) {
    allreduce(sendbuf, recvbuf, ReduceOp.SUM, null, null);
  }

  /**
   * As the FloatBuffer overload, for arrays: {@code sendbuf} is <b>copied</b> into a
   * native scratch buffer kept by this communicator, and the result copied back into
   * {@code recvbuf} (which may be {@code sendbuf}). Prefer direct buffers for large,
   * reused tensors.
   */
  public synchronized void allreduce(float[] sendbuf, float[] recvbuf, ReduceOp op, String layer,
      ErrorBuffer errorBuffer) {
    requireArrays(sendbuf, recvbuf);
    checkRecv(sendbuf.length, recvbuf.length);
    handle();
    int n = sendbuf.length;
    FloatBuffer buf = scratch(n);
    buf.put(sendbuf, 0, n);
    buf.clear();
    FloatBuffer view = buf.duplicate();
    view.limit(n);
    allreduceRaw(view, view, n, Dtype.FLOAT32, op, layer, errorBuffer);
    buf.get(recvbuf, 0, n);
  }

  private void allreduceRaw(Buffer s, Buffer r, long count, Dtype dtype, ReduceOp op,
      String layer, ErrorBuffer eb) {
    requireOp(op);
    byte[] name = utf8(layer, "layer");
    call(eb, (h, ebh) -> QcNative.qcj_allreduce(h, s, r, count, dtype, op, name, ebh));
  }

  // ---- fused segments -------------------------------------------------------

  /**
   * One allreduce over a buffer made of several layers (a fused "bucket", as in
   * DDP), zero-copy: segment i is {@code counts[i]} floats of layer
   * {@code layers[i]}, back to back; each keeps its own policy, and the call
   * costs fewer messages than one allreduce per layer (qc_allreduce_segments).
   *
   * @param sendbuf direct, native-order; its remaining elements must be the sum of
   *     {@code counts}
   * @param recvbuf as in {@link #allreduce(FloatBuffer, FloatBuffer, ReduceOp, String,
   *     ErrorBuffer)}; may be {@code sendbuf}
   * @param counts elements per segment, each >= 0
   * @param layers one name per segment (entries may be null for "*"), or null
   * @param errorBuffer null, or residuals for the whole buffer (sum of counts)
   */
  public void allreduceSegments(FloatBuffer sendbuf, FloatBuffer recvbuf, long[] counts,
      String[] layers, ReduceOp op, ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = checkPair(sendbuf, recvbuf);
    FloatBuffer s = sr[0];
    FloatBuffer r = sr[1];
    long[] segments = segmentCounts(counts, op, s.remaining());
    byte[][] names = segmentNames(layers, segments.length);
    call(errorBuffer, (h, ebh) ->
        QcNative.qcj_allreduce_segments(h, s, r, segments, names, Dtype.FLOAT32, op, ebh));
  }

  // ---- alltoall -----------------------------------------------------------

  /**
   * Every rank sends block j of {@code sendbuf} (remaining / size() floats) to rank
   * j and receives rank i's block at block i of {@code recvbuf}; zero-copy. The
   * remaining element count must be a multiple of {@link #size()}.
   */
  public void alltoall(FloatBuffer sendbuf, FloatBuffer recvbuf, String layer) {
    FloatBuffer[] sr = checkPair(sendbuf, recvbuf);
    FloatBuffer s = sr[0];
    FloatBuffer r = sr[1];
    synchronized (this) {
      long h = handle();
      QcNative.qcj_alltoall(h, s, r, blockCount(s.remaining(), "alltoall"), Dtype.FLOAT32,
          utf8(layer, "layer"));
      Reference.reachabilityFence(this);
    }
  }

  /** Alltoall of arrays ({@code sendbuf.length} a multiple of size()); <b>copies</b>. */
  public synchronized void alltoall(float[] sendbuf, float[] recvbuf, String layer) {
    requireArrays(sendbuf, recvbuf);
    checkRecv(sendbuf.length, recvbuf.length);
    long h = handle();
    int n = sendbuf.length;
    long block = blockCount(n, "alltoall");
    FloatBuffer[] sr = scratchPair(sendbuf, n);
    QcNative.qcj_alltoall(h, sr[0], sr[1], block, Dtype.FLOAT32, utf8(layer, "layer"));
    sr[1].get(recvbuf, 0, n);
    Reference.reachabilityFence(this);
  }

  // ---- reduce-scatter -----------------------------------------------------

  /**
   * {@link #reduceScatter(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}: sum
   * with the policy of layer "*".
   */
  public void reduceScatter(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    reduceScatter(sendbuf, recvbuf, ReduceOp.SUM, null, null);
  }

  /**
   * Reduce-scatter (qc_reduce_scatter), zero-copy: {@code sendbuf} holds size() blocks
   * of recvcount = {@code sendbuf.remaining() / size()} floats, block j for rank j;
   * {@code recvbuf} gets recvcount floats, the sum ({@code op}) over all ranks of their
   * block {@link #rank()}. What a sharded optimizer (FSDP, ZeRO) does with gradients.
   * Only what crosses to another rank is encoded with the layer's codec: a rank's own
   * block enters its sum exactly. The policy's algorithm picks the schedule
   * ({@link Algorithm#RING}: a ring of partial sums; any other: direct, each value
   * quantized once).
   *
   * @param sendbuf direct, native-order; size() * recvcount floats from position to limit
   *     (a multiple of size())
   * @param recvbuf direct, native-order, at least recvcount floats remaining; it may be
   *     this rank's block of {@code sendbuf} (in place, as in NCCL: a slice starting at
   *     element rank() * recvcount of it), but must not otherwise overlap it
   * @param op {@link ReduceOp#SUM} or {@link ReduceOp#AVG}
   * @param layer name whose policy applies ({@link #setLayerPolicy}); null means "*"
   * @param errorBuffer null, or residuals for error feedback, one per element of
   *     {@code sendbuf} (size() * recvcount): each block this rank encodes sends value
   *     + residual and keeps the new error
   * @throws IllegalArgumentException for a heap, read-only (recvbuf) or too small buffer,
   *     or a {@code sendbuf} whose element count is not a multiple of size()
   * @throws QcException when qc fails (ranks disagree on recvcount: {@link Status#MISMATCH};
   *     an error buffer of another count: {@link Status#MISMATCH}, ...)
   */
  public void reduceScatter(FloatBuffer sendbuf, FloatBuffer recvbuf, ReduceOp op,
      String layer, ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = reduceScatterPair(sendbuf, recvbuf);
    long recvcount = sr[0].remaining() / size;
    requireOp(op);
    byte[] name = utf8(layer, "layer");
    call(errorBuffer, (h, ebh) -> QcNative.qcj_reduce_scatter(h, sr[0], sr[1], recvcount,
        Dtype.FLOAT32, op, name, ebh));
  }

  /** Reduce-scatter (sum) of arrays; <b>copies</b>. */
  public void reduceScatter(float[] sendbuf, float[] recvbuf) {
    reduceScatter(sendbuf, recvbuf, ReduceOp.SUM, null, null);
  }

  /**
   * As the FloatBuffer overload, for arrays ({@code sendbuf.length} a multiple of
   * size(); {@code recvbuf} at least {@code sendbuf.length / size()} long): <b>copies</b>
   * through a native scratch buffer kept by this communicator.
   */
  public synchronized void reduceScatter(float[] sendbuf, float[] recvbuf, ReduceOp op,
      String layer, ErrorBuffer errorBuffer) {
    requireArrays(sendbuf, recvbuf);
    handle();
    int recvcount = (int) blockCount(sendbuf.length, "reduceScatter");
    checkRecv(recvcount, recvbuf.length, "reduceScatter writes");
    FloatBuffer[] sr = scratchPair(sendbuf, recvcount);
    reduceScatter(sr[0], sr[1], op, layer, errorBuffer);
    sr[1].get(recvbuf, 0, recvcount);
  }

  // ---- allgather ----------------------------------------------------------

  /**
   * {@link #allgather(FloatBuffer, FloatBuffer, String, ErrorBuffer)} with the policy of
   * layer "*", no error feedback.
   */
  public void allgather(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    allgather(sendbuf, recvbuf, null, null);
  }

  /**
   * Allgather (qc_allgather), zero-copy: this rank's {@code sendbuf} (sendcount =
   * {@code sendbuf.remaining()} floats) becomes block rank() of every rank's
   * {@code recvbuf} (size() * sendcount floats). What a sharded model does with
   * parameters before a layer runs. Each block is encoded once, by its owner, and
   * every rank decodes the same bytes (the owner its own block too): every rank's
   * result is the same, bit for bit. The policy's algorithm picks the schedule
   * ({@link Algorithm#RING}, {@link Algorithm#RECURSIVE_DOUBLING}; any other: direct).
   *
   * @param sendbuf direct, native-order; sendcount floats from position to limit, the
   *     same count on every rank
   * @param recvbuf direct, native-order, at least size() * sendcount floats remaining;
   *     {@code sendbuf} may be this rank's block of it (in place, as in NCCL: a slice
   *     starting at element rank() * sendcount), but must not otherwise overlap it
   * @param layer name whose policy applies; null means "*"
   * @param errorBuffer null, or sendcount residuals: error feedback on this rank's encode
   * @throws IllegalArgumentException for a heap, read-only (recvbuf) or too small buffer
   * @throws QcException when qc fails (ranks disagree on sendcount: {@link Status#MISMATCH},
   *     ...)
   */
  public void allgather(FloatBuffer sendbuf, FloatBuffer recvbuf, String layer,
      ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = allgatherPair(sendbuf, recvbuf);
    long sendcount = sr[0].remaining();
    byte[] name = utf8(layer, "layer");
    call(errorBuffer, (h, ebh) ->
        QcNative.qcj_allgather(h, sr[0], sr[1], sendcount, Dtype.FLOAT32, name, ebh));
  }

  /** Allgather of arrays; <b>copies</b>. */
  public void allgather(float[] sendbuf, float[] recvbuf) {
    allgather(sendbuf, recvbuf, null, null);
  }

  /**
   * As the FloatBuffer overload, for arrays ({@code recvbuf} at least size() *
   * {@code sendbuf.length} long): <b>copies</b> through a native scratch buffer.
   */
  public synchronized void allgather(float[] sendbuf, float[] recvbuf, String layer,
      ErrorBuffer errorBuffer) {
    requireArrays(sendbuf, recvbuf);
    handle();
    long total = (long) size * sendbuf.length;
    checkRecv(total, recvbuf.length, "allgather writes");
    FloatBuffer[] sr = scratchPair(sendbuf, total);
    allgather(sr[0], sr[1], layer, errorBuffer);
    sr[1].get(recvbuf, 0, (int) total);
  }

  // ---- broadcast ----------------------------------------------------------

  /** In-place broadcast of {@code buf} from {@code root} (zero-copy), layer "*". */
  public void broadcast(FloatBuffer buf, int root) {
    broadcast(buf, buf, root, null);
  }

  /**
   * Broadcast (qc_broadcast), zero-copy: the root's {@code sendbuf} becomes every
   * rank's {@code recvbuf} (count = {@code recvbuf.remaining()} floats). Encoded once at
   * the root; every rank decodes the same bytes, the root too, so every rank's result
   * is the same, bit for bit (with a lossy codec the root's result differs from its
   * input). The policy's algorithm picks the schedule ({@link Algorithm#TREE}: a
   * binomial tree; {@link Algorithm#RING} and the others: a pipelined chain;
   * {@link Algorithm#AUTO}: the tree below 64 KiB). No error feedback (a broadcast value
   * is not summed again).
   *
   * @param sendbuf read on the root only: direct, native-order, count floats (in place:
   *     {@code recvbuf} itself); ignored, and may be null, on the other ranks
   * @param recvbuf direct, native-order, writable: count floats on every rank
   * @param root the rank whose {@code sendbuf} is sent, 0..size()-1, the same on every
   *     rank (qc checks it)
   * @param layer name whose policy applies; null means "*"
   * @throws IllegalArgumentException for a heap or read-only buffer, or a root's
   *     {@code sendbuf} whose element count is not recvbuf's
   * @throws QcException when qc fails ({@link Status#INVALID_ARGUMENT} for a root out of
   *     range; ranks disagree on count or root: {@link Status#MISMATCH}, ...)
   */
  public void broadcast(FloatBuffer sendbuf, FloatBuffer recvbuf, int root, String layer) {
    FloatBuffer[] sr = broadcastPair(sendbuf, recvbuf, root);
    long count = sr[1].remaining();
    byte[] name = utf8(layer, "layer");
    call(null, (h, ebh) ->
        QcNative.qcj_broadcast(h, sr[0], sr[1], count, Dtype.FLOAT32, root, name));
  }

  /** In-place broadcast of {@code data} from {@code root}, layer "*"; <b>copies</b>. */
  public void broadcast(float[] data, int root) {
    broadcast(data, data, root, null);
  }

  /**
   * As the FloatBuffer overload, for arrays: count = {@code recvbuf.length};
   * {@code sendbuf} is read on the root only (count elements; null elsewhere is fine).
   * <b>Copies</b> through a native scratch buffer.
   */
  public synchronized void broadcast(float[] sendbuf, float[] recvbuf, int root,
      String layer) {
    if (recvbuf == null) {
      throw new NullPointerException("qc: argument 'recvbuf' is null");
    }
    handle();
    int n = recvbuf.length;
    FloatBuffer buf = scratch(n);
    if (root == rank) {
      if (sendbuf == null) {
        throw new NullPointerException("qc: argument 'sendbuf' is null on the root");
      }
      checkRootCount(sendbuf.length, n);
      buf.put(sendbuf, 0, n);
      buf.clear();
    }
    FloatBuffer view = buf.duplicate();
    view.limit(n);
    broadcast(view, view, root, layer); // in place on the root; recvbuf elsewhere
    buf.get(recvbuf, 0, n);
  }

  // ---- sparse allreduce -------------------------------------------------------

  /** {@link #sparseAllreduce(long[], float[], int, ReduceOp, String)}: sum, layer "*". */
  public SparseRows sparseAllreduce(long[] indices, float[] values, int rowLen) {
    return sparseAllreduce(indices, values, rowLen, ReduceOp.SUM, null);
  }

  /**
   * Sparse allreduce of row-sparse data such as embedding gradients
   * (qc_sparse_allreduce): this rank's rows, row k being index {@code indices[k]} with
   * the {@code rowLen} floats at {@code values[k * rowLen]}, are summed with every
   * rank's rows of the same index. The result is the union of all ranks' indices,
   * ascending, each with its summed row: the same bits on every rank. Each rank's rows
   * are encoded once with one scale per row (the layer's codec: none, fp16, bf16,
   * minmax, qsgd or onebit; others fail with {@link Status#UNSUPPORTED}) and decoded by
   * every rank. No error feedback. <b>Copies</b> the arrays into native memory.
   *
   * @param indices nnz row indices {@code >= 0}, in any order (a repeated index adds its
   *     rows); nnz may differ between ranks
   * @param values nnz * rowLen floats, row after row
   * @param rowLen floats per row, {@code >= 1}, the same on every rank
   * @param op {@link ReduceOp#SUM} or {@link ReduceOp#AVG}, the same on every rank
   * @param layer name whose policy applies, the same on every rank; null means "*"
   * @throws IllegalArgumentException for rowLen {@code < 1} or values of another length
   * @throws QcException when qc fails: a negative index gives
   *     {@link Status#INVALID_ARGUMENT} on this rank and {@link Status#MISMATCH} on the
   *     others (the communicator stays usable); ranks that disagree on rowLen, op or
   *     layer get {@link Status#MISMATCH}
   */
  public SparseRows sparseAllreduce(long[] indices, float[] values, int rowLen, ReduceOp op,
      String layer) {
    requireRows(indices, values);
    return sparseAllreduce(directCopy(indices), directCopy(values), rowLen, op, layer);
  }

  /**
   * As {@link #sparseAllreduce(long[], float[], int, ReduceOp, String)}, zero-copy in:
   * nnz = {@code indices.remaining()}, {@code values} nnz * rowLen floats (both direct,
   * native order, read from position to limit). The result is copied out.
   */
  public SparseRows sparseAllreduce(LongBuffer indices, FloatBuffer values, int rowLen,
      ReduceOp op, String layer) {
    SparseArgs a = new SparseArgs(indices, values, rowLen, op, layer);
    long[] result = new long[1]; // the qc_sparse_result_t, 0 until the call has made one
    try {
      call(null, (h, ebh) -> QcNative.qcj_sparse_allreduce(h, a.indices, a.values, a.nnz,
          rowLen, Dtype.FLOAT32, op, a.layer, result));
      return SparseRows.read(result[0], rowLen);
    } finally {
      QcNative.qc_sparse_result_destroy(result[0]);
    }
  }

  /**
   * {@link #sparseAllreduceDense(long[], float[], int, long, float[], ReduceOp, String)}:
   * sum, layer "*".
   */
  public void sparseAllreduceDense(long[] indices, float[] values, int rowLen, long nrows,
      float[] dense) {
    sparseAllreduceDense(indices, values, rowLen, nrows, dense, ReduceOp.SUM, null);
  }

  /**
   * A sparse allreduce scattered into a dense table (qc_sparse_allreduce_dense): the
   * first nrows * rowLen floats of {@code dense} get every summed row at its index (row i
   * at {@code dense[i * rowLen]}) and zeros elsewhere, the same on every rank. Otherwise
   * as {@link #sparseAllreduce(long[], float[], int, ReduceOp, String)}. <b>Copies</b>.
   *
   * @param nrows rows of the table, the same on every rank; every index must be
   *     {@code < nrows} (else {@link QcException} {@link Status#INVALID_ARGUMENT} here,
   *     {@link Status#MISMATCH} on the other ranks)
   * @param dense at least nrows * rowLen floats
   */
  public void sparseAllreduceDense(long[] indices, float[] values, int rowLen, long nrows,
      float[] dense, ReduceOp op, String layer) {
    requireRows(indices, values);
    if (dense == null) {
      throw new NullPointerException("qc: argument 'dense' is null");
    }
    long cells = denseCells(nrows, rowLen, dense.length);
    FloatBuffer table = Buffers.directFloats(cells);
    sparseAllreduceDense(directCopy(indices), directCopy(values), rowLen, nrows, table, op,
        layer);
    table.get(dense, 0, (int) cells);
  }

  /**
   * As {@link #sparseAllreduceDense(long[], float[], int, long, float[], ReduceOp, String)},
   * zero-copy: nnz = {@code indices.remaining()}; {@code dense} direct, native order,
   * writable, at least nrows * rowLen floats remaining (written from its position).
   */
  public void sparseAllreduceDense(LongBuffer indices, FloatBuffer values, int rowLen,
      long nrows, FloatBuffer dense, ReduceOp op, String layer) {
    SparseArgs a = new SparseArgs(indices, values, rowLen, op, layer);
    FloatBuffer table = a.table(dense, nrows, rowLen);
    call(null, (h, ebh) -> QcNative.qcj_sparse_allreduce_dense(h, a.indices, a.values, a.nnz,
        rowLen, nrows, table, Dtype.FLOAT32, op, a.layer));
  }

  // ---- non-blocking collectives ---------------------------------------------

  /** {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}: in-place sum. */
  public Request iallreduce(FloatBuffer buf) {
    return iallreduce(buf, buf, ReduceOp.SUM, null, null);
  }

  /** {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}: sum. */
  public Request iallreduce(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    return iallreduce(sendbuf, recvbuf, ReduceOp.SUM, null, null);
  }

  /** {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}: sum with the policy of {@code layer}. */
  public Request iallreduce(FloatBuffer sendbuf, FloatBuffer recvbuf, String layer) {
    return iallreduce(sendbuf, recvbuf, ReduceOp.SUM, layer, null);
  }

  /**
   * Start {@link #allreduce(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}
   * and return at once (qc_iallreduce). The arguments are checked as there, before
   * anything starts; {@link Request#waitFor()} then gives the blocking call's result in
   * {@code recvbuf}, bit for bit, or throws its failure.
   *
   * <p>Until the request has completed, {@code sendbuf}, {@code recvbuf} and
   * {@code errorBuffer} belong to it: do not write the buffers nor read
   * {@code recvbuf}; each outstanding request needs its own error buffer (a second
   * one naming it throws {@link QcException} {@link Status#INVALID_ARGUMENT}, "in
   * use"). The request keeps them reachable meanwhile (see {@link Request}).
   *
   * @throws IllegalArgumentException for a heap, read-only (recvbuf) or too small buffer
   * @throws QcException when qc refuses the start (nothing started)
   */
  public Request iallreduce(FloatBuffer sendbuf, FloatBuffer recvbuf, ReduceOp op, String layer,
      ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = checkPair(sendbuf, recvbuf);
    return iallreduceRaw(sr[0], sr[1], Dtype.FLOAT32, op, layer, errorBuffer);
  }

  /**
   * 16-bit variant of {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String,
   * ErrorBuffer)}: {@code dtype} is {@link Dtype#FLOAT16} or {@link Dtype#BFLOAT16}.
   */
  public Request iallreduce(ShortBuffer sendbuf, ShortBuffer recvbuf, Dtype dtype, ReduceOp op,
      String layer, ErrorBuffer errorBuffer) {
    ShortBuffer[] sr = checkPair(sendbuf, recvbuf, dtype);
    return iallreduceRaw(sr[0], sr[1], dtype, op, layer, errorBuffer);
  }

  private Request iallreduceRaw(Buffer s, Buffer r, Dtype dtype, ReduceOp op, String layer,
      ErrorBuffer eb) {
    if (op == null) {
      throw new NullPointerException("qc: argument 'op' is null");
    }
    byte[] name = utf8(layer, "layer");
    long count = s.remaining();
    return start(eb, (h, ebh, out) ->
        QcNative.qcj_iallreduce(h, s, r, count, dtype, op, name, ebh, out), s, r);
  }

  /**
   * Start {@link #allreduceSegments} and return at once (qc_iallreduce_segments); the
   * arguments and their checks are those of the blocking call, the buffers' ownership
   * that of {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String,
   * ErrorBuffer)}. {@code counts} and {@code layers} are copied at the start.
   */
  public Request iallreduceSegments(FloatBuffer sendbuf, FloatBuffer recvbuf, long[] counts,
      String[] layers, ReduceOp op, ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = checkPair(sendbuf, recvbuf);
    FloatBuffer s = sr[0];
    FloatBuffer r = sr[1];
    long[] segments = segmentCounts(counts, op, s.remaining());
    byte[][] names = segmentNames(layers, segments.length);
    return start(errorBuffer, (h, ebh, out) ->
        QcNative.qcj_iallreduce_segments(h, s, r, segments, names, Dtype.FLOAT32, op, ebh, out),
        s, r);
  }

  /**
   * Start {@link #alltoall(FloatBuffer, FloatBuffer, String)} and return at once
   * (qc_ialltoall); the buffers belong to the request until it has completed, as for
   * {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}.
   */
  public Request ialltoall(FloatBuffer sendbuf, FloatBuffer recvbuf, String layer) {
    FloatBuffer[] sr = checkPair(sendbuf, recvbuf);
    FloatBuffer s = sr[0];
    FloatBuffer r = sr[1];
    long block = blockCount(s.remaining(), "alltoall");
    byte[] name = utf8(layer, "layer");
    return start(null, (h, ebh, out) ->
        QcNative.qcj_ialltoall(h, s, r, block, Dtype.FLOAT32, name, out), s, r);
  }

  /**
   * {@link #ireduceScatter(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}: sum
   * with the policy of layer "*".
   */
  public Request ireduceScatter(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    return ireduceScatter(sendbuf, recvbuf, ReduceOp.SUM, null, null);
  }

  /**
   * Start {@link #reduceScatter(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}
   * and return at once (qc_ireduce_scatter): sendbuf size() * recvcount floats, recvbuf
   * recvcount. The arguments are checked as there; the buffers and the error buffer
   * belong to the request until it has completed, as for {@link #iallreduce(FloatBuffer,
   * FloatBuffer, ReduceOp, String, ErrorBuffer)}.
   */
  public Request ireduceScatter(FloatBuffer sendbuf, FloatBuffer recvbuf, ReduceOp op,
      String layer, ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = reduceScatterPair(sendbuf, recvbuf);
    long recvcount = sr[0].remaining() / size;
    requireOp(op);
    byte[] name = utf8(layer, "layer");
    return start(errorBuffer, (h, ebh, out) -> QcNative.qcj_ireduce_scatter(h, sr[0], sr[1],
        recvcount, Dtype.FLOAT32, op, name, ebh, out), sr[0], sr[1]);
  }

  /** {@link #iallgather(FloatBuffer, FloatBuffer, String, ErrorBuffer)}: layer "*". */
  public Request iallgather(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    return iallgather(sendbuf, recvbuf, null, null);
  }

  /**
   * Start {@link #allgather(FloatBuffer, FloatBuffer, String, ErrorBuffer)} and return at
   * once (qc_iallgather): sendbuf sendcount floats, recvbuf size() * sendcount. The
   * arguments are checked as there; the buffers and the error buffer belong to the
   * request until it has completed, as for {@link #iallreduce(FloatBuffer, FloatBuffer,
   * ReduceOp, String, ErrorBuffer)}.
   */
  public Request iallgather(FloatBuffer sendbuf, FloatBuffer recvbuf, String layer,
      ErrorBuffer errorBuffer) {
    FloatBuffer[] sr = allgatherPair(sendbuf, recvbuf);
    long sendcount = sr[0].remaining();
    byte[] name = utf8(layer, "layer");
    return start(errorBuffer, (h, ebh, out) -> QcNative.qcj_iallgather(h, sr[0], sr[1],
        sendcount, Dtype.FLOAT32, name, ebh, out), sr[0], sr[1]);
  }

  /** {@link #ibroadcast(FloatBuffer, FloatBuffer, int, String)} in place, layer "*". */
  public Request ibroadcast(FloatBuffer buf, int root) {
    return ibroadcast(buf, buf, root, null);
  }

  /**
   * Start {@link #broadcast(FloatBuffer, FloatBuffer, int, String)} and return at once
   * (qc_ibroadcast): count = recvbuf's remaining floats, sendbuf read on the root only.
   * The arguments are checked as there (a root out of range throws here: nothing
   * starts); the buffers belong to the request until it has completed, as for
   * {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}.
   */
  public Request ibroadcast(FloatBuffer sendbuf, FloatBuffer recvbuf, int root, String layer) {
    FloatBuffer[] sr = broadcastPair(sendbuf, recvbuf, root);
    long count = sr[1].remaining();
    byte[] name = utf8(layer, "layer");
    return start(null, (h, ebh, out) ->
        QcNative.qcj_ibroadcast(h, sr[0], sr[1], count, Dtype.FLOAT32, root, name, out),
        sr[0], sr[1]);
  }

  /**
   * Start {@link #sparseAllreduce(LongBuffer, FloatBuffer, int, ReduceOp, String)} and
   * return at once (qc_isparse_allreduce). The arguments are checked as there; the buffers
   * belong to the request until it has completed, as for {@link #iallreduce(FloatBuffer,
   * FloatBuffer, ReduceOp, String, ErrorBuffer)}. The request owns the result:
   * {@link Request#sparseRows()} waits for it and copies the rows out, and
   * {@link Request#close()} frees them.
   */
  public Request isparseAllreduce(LongBuffer indices, FloatBuffer values, int rowLen,
      ReduceOp op, String layer) {
    SparseArgs a = new SparseArgs(indices, values, rowLen, op, layer);
    return start(null, (h, ebh, out) -> QcNative.qcj_isparse_allreduce(h, a.indices, a.values,
        a.nnz, rowLen, Dtype.FLOAT32, op, a.layer, out), rowLen,
        new Buffer[] {a.indices, a.values});
  }

  /**
   * Start {@link #sparseAllreduceDense(LongBuffer, FloatBuffer, int, long, FloatBuffer,
   * ReduceOp, String)} and return at once (qc_isparse_allreduce_dense). The arguments are
   * checked as there; the buffers, {@code dense} too, belong to the request until it has
   * completed, as for {@link #iallreduce(FloatBuffer, FloatBuffer, ReduceOp, String,
   * ErrorBuffer)}.
   */
  public Request isparseAllreduceDense(LongBuffer indices, FloatBuffer values, int rowLen,
      long nrows, FloatBuffer dense, ReduceOp op, String layer) {
    SparseArgs a = new SparseArgs(indices, values, rowLen, op, layer);
    FloatBuffer table = a.table(dense, nrows, rowLen);
    return start(null, (h, ebh, out) -> QcNative.qcj_isparse_allreduce_dense(h, a.indices,
        a.values, a.nnz, rowLen, nrows, table, Dtype.FLOAT32, op, a.layer, out), a.indices,
        a.values, table);
  }

  /**
   * One of the qcj_i* starts: comm and error buffer handles in, request handle out[0]
   * (and a sparse allreduce's result handle out[1]).
   */
  private interface Start {
    void run(long comm, long errorBuffer, long[] out);
  }

  /** One of the blocking qcj_* calls: comm and error buffer (0: none) handles in. */
  private interface Call {
    void run(long comm, long errorBuffer);
  }

  /**
   * Runs {@code call} under this communicator's lock, and the error buffer's when there
   * is one (a close() from another thread waits for the call).
   */
  private synchronized void call(ErrorBuffer eb, Call call) {
    long h = handle();
    try {
      if (eb == null) {
        call.run(h, 0);
      } else {
        synchronized (eb) {
          call.run(h, eb.handle());
        }
      }
    } finally {
      Reference.reachabilityFence(eb);
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Runs {@code start} under this communicator's lock (and the error buffer's, as the
   * blocking calls do) and wraps the request, which keeps {@code buffers} and the
   * error buffer reachable until it completes.
   */
  private Request start(ErrorBuffer eb, Start start, Buffer... buffers) {
    return start(eb, start, 0, buffers);
  }

  /**
   * As {@link #start(ErrorBuffer, Start, Buffer...)}; {@code rowLen > 0} for a sparse
   * allreduce, whose result handle (out[1]) the Request then owns. A start that fails
   * frees any result handle it made.
   */
  private synchronized Request start(ErrorBuffer eb, Start start, int rowLen,
      Buffer[] buffers) {
    long h = handle();
    orphans.reap();
    long[] out = new long[2];
    boolean started = false;
    try {
      if (eb == null) {
        start.run(h, 0, out);
      } else {
        synchronized (eb) {
          start.run(h, eb.handle(), out);
        }
      }
      started = true;
    } finally {
      if (!started) {
        QcNative.qc_sparse_result_destroy(out[1]);
      }
      Reference.reachabilityFence(eb);
      Reference.reachabilityFence(this);
    }
    Object[] uses = java.util.Arrays.copyOf(buffers, buffers.length + 1, Object[].class);
    uses[buffers.length] = eb;
    return new Request(out[0], out[1], rowLen, this, orphans, uses);
  }

  // ---- policies -----------------------------------------------------------

  /**
   * Set the policy of the layers whose name matches {@code pattern} (an exact name,
   * or a glob with * and ?; "*" is the default). Every rank must set the same
   * policies. Applies from the next collective on.
   */
  public synchronized void setLayerPolicy(String pattern, Policy policy) {
    long h = handle();
    if (policy == null) {
      throw new NullPointerException("qc: argument 'policy' is null");
    }
    try (PolicyStruct s = policy.toStruct()) {
      QcNative.qc_comm_set_layer_policy(h, utf8(pattern, "pattern"), s);
    }
    Reference.reachabilityFence(this);
  }

  /** The policy layer {@code layer} resolves to (null: "*"). */
  public synchronized Policy getLayerPolicy(String layer) {
    long h = handle();
    try (PolicyStruct s = new PolicyStruct()) {
      QcNative.qc_comm_get_layer_policy(h, utf8(layer, "layer"), s);
      return Policy.fromStruct(s);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Set a named group of layer policies (qc_comm_apply_preset), e.g. "cgx": biases and
   * normalisations uncompressed, everything else {@code base} (null: the policy now set for the pattern "*").
   */
  public synchronized void policyPreset(String name, Policy base) {
    long h = handle();
    if (name == null) {
      throw new NullPointerException("qc: argument 'name' is null");
    }
    PolicyStruct s = base == null ? null : base.toStruct();
    try {
      QcNative.qc_comm_apply_preset(h, utf8(name, "name"), s);
    } finally {
      if (s != null) {
        s.close();
      }
      Reference.reachabilityFence(this);
    }
  }

  // ---- statistics ---------------------------------------------------------

  /** This rank's counters since creation. */
  public synchronized Stats stats() {
    long h = handle();
    try (StatsStruct s = new StatsStruct()) {
      QcNative.qc_comm_get_stats(h, s);
      return new Stats(s);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** This rank's counters of layer {@code layer} (null: "*"). */
  public synchronized LayerStats layerStats(String layer) {
    long h = handle();
    try (LayerStatsStruct s = new LayerStatsStruct()) {
      QcNative.qc_comm_get_layer_stats(h, utf8(layer, "layer"), s);
      return new LayerStats(s);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The layer names seen so far, in byte order of their UTF-8 names. */
  public synchronized java.util.List<String> layerNames() {
    long h = handle();
    try {
      long[] out = new long[1];
      QcNative.qcj_comm_layer_count(h, out);
      int n = Buffers.checkedInt(out[0], "layer count");
      java.util.List<String> names = new java.util.ArrayList<>(n);
      for (int i = 0; i < n; ++i) {
        QcNative.qcj_comm_layer_name(h, i, null, 0, out);
        java.nio.ByteBuffer buf =
            java.nio.ByteBuffer.allocateDirect(Buffers.checkedInt(out[0] + 1, "name length"));
        QcNative.qcj_comm_layer_name(h, i, buf, buf.capacity(), out);
        byte[] bytes = new byte[(int) out[0]];
        buf.get(bytes);
        names.add(new String(bytes, StandardCharsets.UTF_8));
      }
      return java.util.Collections.unmodifiableList(names);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  // ---- adaptive bit widths ------------------------------------------------

  /**
   * Adaptive bit widths with the defaults of QC_ADAPT_CONFIG_INIT (k-means,
   * alpha 2, widths {2, 3, 4, 8}). Collective: every rank calls it after the
   * same collectives. See {@link #adaptPolicies(AdaptMethod, double, int...)}.
   */
  public synchronized AdaptReport adaptPolicies() {
    return adapt(true, AdaptMethod.KMEANS, 0.0, null);
  }

  /**
   * Give each layer whose policy uses codec minmax or qsgd a width from
   * {@code allowedBits} (1 to 8 entries, each 1..8) such that the predicted wire
   * bytes fall while the predicted error stays below {@code alpha} (>= 1) times the
   * error at 4 bits (qc_comm_adapt_policies). The new widths are set as exact-name layer
   * policies; read them with {@link #getLayerPolicy}. Collective: every rank must
   * call it after the same collectives ({@link Status#MISMATCH} otherwise).
   */
  public synchronized AdaptReport adaptPolicies(AdaptMethod method, double alpha,
      int... allowedBits) {
    if (method == null) {
      throw new NullPointerException("qc: argument 'method' is null");
    }
    if (allowedBits == null) {
      throw new NullPointerException("qc: argument 'allowedBits' is null");
    }
    return adapt(false, method, alpha, allowedBits);
  }

  private AdaptReport adapt(boolean defaults, AdaptMethod method, double alpha, int[] bits) {
    long h = handle();
    try (AdaptReportStruct r = new AdaptReportStruct()) {
      QcNative.qcj_adapt_policies(h, defaults ? 1 : 0, method, alpha, bits, r);
      return new AdaptReport(r);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  @Override
  public String toString() {
    return "Comm{rank=" + rank + ", size=" + size + (isClosed() ? ", closed" : "") + "}";
  }

  // ---- helpers ------------------------------------------------------------

  /** The block of {@code call} (alltoall, reduceScatter) over n elements: n / size(). */
  private long blockCount(long n, String call) {
    if (n % size != 0) {
      throw new IllegalArgumentException("qc: " + call + " needs a multiple of size() = " + size
          + " elements, got " + n);
    }
    return n / size;
  }

  /** sendbuf and recvbuf of a reduce-scatter, checked for C as slices. */
  private FloatBuffer[] reduceScatterPair(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    FloatBuffer s = Buffers.check(sendbuf, "sendbuf", false);
    FloatBuffer r = Buffers.check(recvbuf, "recvbuf", true);
    checkRecv(blockCount(s.remaining(), "reduceScatter"), r.remaining(), "reduceScatter writes");
    return new FloatBuffer[] {s, r};
  }

  /** sendbuf and recvbuf of an allgather, checked for C as slices. */
  private FloatBuffer[] allgatherPair(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    FloatBuffer s = Buffers.check(sendbuf, "sendbuf", false);
    FloatBuffer r = Buffers.check(recvbuf, "recvbuf", true);
    checkRecv((long) size * s.remaining(), r.remaining(), "allgather writes");
    return new FloatBuffer[] {s, r};
  }

  /**
   * sendbuf and recvbuf of a broadcast as C reads them: sendbuf checked on the root
   * (recvbuf itself in place), null on the other ranks, which do not read it.
   */
  private FloatBuffer[] broadcastPair(FloatBuffer sendbuf, FloatBuffer recvbuf, int root) {
    FloatBuffer r = Buffers.check(recvbuf, "recvbuf", true);
    FloatBuffer s = null;
    if (root == rank) {
      s = sendbuf == recvbuf ? r : Buffers.check(sendbuf, "sendbuf", false);
      checkRootCount(s.remaining(), r.remaining());
    }
    return new FloatBuffer[] {s, r};
  }

  private static void checkRootCount(long sendCount, long count) {
    if (sendCount != count) {
      throw new IllegalArgumentException("qc: argument 'sendbuf' has " + sendCount
          + " elements on the root but recvbuf " + count + "; a broadcast sends what it"
          + " receives");
    }
  }

  private static void requireRows(long[] indices, float[] values) {
    if (indices == null) {
      throw new NullPointerException("qc: argument 'indices' is null");
    }
    if (values == null) {
      throw new NullPointerException("qc: argument 'values' is null");
    }
  }

  private static LongBuffer directCopy(long[] a) {
    LongBuffer b = Buffers.directLongs(a.length);
    b.put(a).clear();
    return b;
  }

  private static FloatBuffer directCopy(float[] a) {
    FloatBuffer b = Buffers.directFloats(a.length);
    b.put(a).clear();
    return b;
  }

  /** A sparse allreduce's arguments, checked for C: slices from position to limit. */
  private static final class SparseArgs {
    final LongBuffer indices;
    final FloatBuffer values; // nnz * rowLen
    final long nnz;
    final byte[] layer;       // UTF-8, or null for "*"

    SparseArgs(LongBuffer indices, FloatBuffer values, int rowLen, ReduceOp op, String layer) {
      if (rowLen < 1) {
        throw new IllegalArgumentException("qc: argument 'rowLen' is " + rowLen
            + "; expected >= 1");
      }
      this.indices = Buffers.check(indices, "indices", false);
      this.values = Buffers.check(values, "values", false);
      this.nnz = this.indices.remaining();
      long expected = nnz * rowLen;
      if (this.values.remaining() != expected) {
        throw new IllegalArgumentException("qc: argument 'values' has "
            + this.values.remaining() + " elements; " + nnz + " indices of rowLen " + rowLen
            + " need " + expected);
      }
      requireOp(op);
      this.layer = utf8(layer, "layer");
    }

    /** The dense forms' table, checked: room for nrows * rowLen floats, writable. */
    FloatBuffer table(FloatBuffer dense, long nrows, int rowLen) {
      FloatBuffer t = Buffers.check(dense, "dense", true);
      denseCells(nrows, rowLen, t.remaining());
      return t;
    }
  }

  /** nrows * rowLen, checked against the {@code room} elements of the dense table. */
  private static long denseCells(long nrows, int rowLen, long room) {
    if (nrows < 0) {
      throw new IllegalArgumentException("qc: argument 'nrows' is negative (" + nrows + ")");
    }
    long cells = nrows > Long.MAX_VALUE / Math.max(rowLen, 1) ? Long.MAX_VALUE
        : nrows * Math.max(rowLen, 1);
    if (room < cells) {
      throw new IllegalArgumentException("qc: argument 'dense' has room for " + room
          + " elements, nrows * rowLen is " + (cells == Long.MAX_VALUE ? "larger" : cells));
    }
    return cells;
  }

  private static void requireOp(ReduceOp op) {
    if (op == null) {
      throw new NullPointerException("qc: argument 'op' is null");
    }
  }

  /**
   * The scratch buffer as two slices: {@code sendbuf} copied into the first, room for
   * {@code recvCount} elements after it.
   */
  private FloatBuffer[] scratchPair(float[] sendbuf, long recvCount) {
    int n = sendbuf.length;
    FloatBuffer buf = scratch(n + recvCount);
    buf.put(sendbuf, 0, n);
    buf.clear();
    FloatBuffer s = buf.duplicate();
    s.limit(n);
    FloatBuffer r = buf.duplicate();
    r.position(n);
    r.limit(Buffers.checkedInt(n + recvCount, "element count"));
    return new FloatBuffer[] {s.slice(), r.slice()};
  }

  private FloatBuffer scratch(long n) {
    if (scratch == null || scratch.capacity() < n) {
      scratch = Buffers.directFloats(n);
    }
    scratch.clear();
    return scratch;
  }

  private static void requireArrays(float[] sendbuf, float[] recvbuf) {
    if (sendbuf == null) {
      throw new NullPointerException("qc: argument 'sendbuf' is null");
    }
    if (recvbuf == null) {
      throw new NullPointerException("qc: argument 'recvbuf' is null");
    }
  }

  /**
   * sendbuf and recvbuf checked for C, as slices from position to limit; recvbuf
   * may be sendbuf (in place), which must then be writable.
   */
  private static FloatBuffer[] checkPair(FloatBuffer sendbuf, FloatBuffer recvbuf) {
    FloatBuffer s = Buffers.check(sendbuf, "sendbuf", false);
    FloatBuffer r = sendbuf == recvbuf ? s : Buffers.check(recvbuf, "recvbuf", true);
    checkInPlaceWritable(sendbuf == recvbuf, s);
    checkRecv(s.remaining(), r.remaining());
    return new FloatBuffer[] {s, r};
  }

  private static ShortBuffer[] checkPair(ShortBuffer sendbuf, ShortBuffer recvbuf, Dtype dtype) {
    if (dtype != Dtype.FLOAT16 && dtype != Dtype.BFLOAT16) {
      throw new IllegalArgumentException("qc: a ShortBuffer holds FLOAT16 or BFLOAT16, not " + dtype);
    }
    ShortBuffer s = Buffers.check(sendbuf, "sendbuf", false);
    ShortBuffer r = sendbuf == recvbuf ? s : Buffers.check(recvbuf, "recvbuf", true);
    checkInPlaceWritable(sendbuf == recvbuf, s);
    checkRecv(s.remaining(), r.remaining());
    return new ShortBuffer[] {s, r};
  }

  private static void checkInPlaceWritable(boolean inPlace, Buffer b) {
    if (inPlace && b.isReadOnly()) {
      throw new IllegalArgumentException("qc: argument 'recvbuf' is read-only but qc writes into it");
    }
  }

  /**
   * The segment counts of a fused call over {@code elements} elements, checked and
   * copied (another thread's later change to the array cannot reach C unchecked).
   */
  private static long[] segmentCounts(long[] counts, ReduceOp op, long elements) {
    if (counts == null) {
      throw new NullPointerException("qc: argument 'counts' is null");
    }
    if (op == null) {
      throw new NullPointerException("qc: argument 'op' is null");
    }
    counts = counts.clone();
    long total = 0;
    for (int i = 0; i < counts.length; ++i) {
      if (counts[i] < 0) {
        throw new IllegalArgumentException("qc: counts[" + i + "] is negative: " + counts[i]);
      }
      total += counts[i];
    }
    if (total != elements) {
      throw new IllegalArgumentException("qc: the counts add up to " + total
          + " elements but sendbuf has " + elements);
    }
    return counts;
  }

  /** The layer names of {@code nsegments} segments as UTF-8 (null: every segment "*"). */
  private static byte[][] segmentNames(String[] layers, int nsegments) {
    if (layers == null) {
      return null;
    }
    if (layers.length != nsegments) {
      throw new IllegalArgumentException("qc: " + layers.length + " layers for "
          + nsegments + " counts");
    }
    byte[][] names = new byte[layers.length][];
    for (int i = 0; i < layers.length; ++i) {
      names[i] = utf8(layers[i], "layers[" + i + "]");
    }
    return names;
  }

  private static void checkRecv(long count, long recvRemaining) {
    checkRecv(count, recvRemaining, "sendbuf has");
  }

  /** recvbuf must have room for {@code count} elements ({@code what} says why). */
  private static void checkRecv(long count, long recvRemaining, String what) {
    if (recvRemaining < count) {
      throw new IllegalArgumentException("qc: argument 'recvbuf' has room for " + recvRemaining
          + " elements, " + what + " " + count);
    }
  }

  /** UTF-8 bytes of a name for C (null stays null); NUL is not allowed in it. */
  static byte[] utf8(String s, String what) {
    if (s == null) {
      return null;
    }
    if (s.indexOf('\0') >= 0) {
      throw new IllegalArgumentException("qc: argument '" + what + "' contains a NUL character");
    }
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
