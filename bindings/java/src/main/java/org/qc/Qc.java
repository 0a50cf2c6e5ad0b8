package org.qc;

import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;

/**
 * Library-wide functions of qc: version, emulation of collectives over virtual
 * ranks, and the codecs on their own. All are thread-safe.
 */
public final class Qc {
  private Qc() {}

  /** QC_VERSION_MAJOR of the qc.h these bindings were generated from. */
  public static final int HEADER_VERSION_MAJOR = QcNativeConstants.VERSION_MAJOR;
  /** QC_VERSION_MINOR of the qc.h these bindings were generated from. */
  public static final int HEADER_VERSION_MINOR = QcNativeConstants.VERSION_MINOR;
  /** QC_VERSION_PATCH of the qc.h these bindings were generated from. */
  public static final int HEADER_VERSION_PATCH = QcNativeConstants.VERSION_PATCH;

  /** "M.m.p" of the libqc that is running. */
  public static String version() {
    return QcNative.qc_version_string();
  }

  /** M*10000 + m*100 + p of the libqc that is running. */
  public static int versionNumber() {
    return QcNative.qc_version_number();
  }

  /** Static name of a status, e.g. "QC_ERROR_TIMEOUT". */
  public static String statusString(Status status) {
    return QcNative.qc_status_string(status);
  }

  // ---- names of enum values: the library's (qc_codec_name, ...) -------------

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(Codec value) {
    return QcNative.qc_codec_name(value);
  }

  /** The Codec named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static Codec codecFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_codec_from_name(Comm.utf8(name, "name"), out);
    return Codec.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(Algorithm value) {
    return QcNative.qc_algorithm_name(value);
  }

  /** The Algorithm named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static Algorithm algorithmFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_algorithm_from_name(Comm.utf8(name, "name"), out);
    return Algorithm.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(Dtype value) {
    return QcNative.qc_dtype_name(value);
  }

  /** The Dtype named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static Dtype dtypeFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_dtype_from_name(Comm.utf8(name, "name"), out);
    return Dtype.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(ReduceOp value) {
    return QcNative.qc_reduce_op_name(value);
  }

  /** The ReduceOp named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static ReduceOp reduceOpFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_reduce_op_from_name(Comm.utf8(name, "name"), out);
    return ReduceOp.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(Rounding value) {
    return QcNative.qc_rounding_name(value);
  }

  /** The Rounding named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static Rounding roundingFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_rounding_from_name(Comm.utf8(name, "name"), out);
    return Rounding.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(Scale value) {
    return QcNative.qc_scale_name(value);
  }

  /** The Scale named {@code name} (spelled exactly); throws {@link QcException}
   *  INVALID_ARGUMENT for a name the library does not know. */
  public static Scale scaleFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_scale_from_name(Comm.utf8(name, "name"), out);
    return Scale.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(Transport value) {
    return QcNative.qc_transport_name(value);
  }

  /** The Transport named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static Transport transportFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_transport_from_name(Comm.utf8(name, "name"), out);
    return Transport.swigToEnum(out[0]);
  }

  /** The library's name of {@code value}, as qc.h, QC_* variables and messages spell it; null if it knows none. */
  public static String name(AdaptMethod value) {
    return QcNative.qc_adapt_method_name(value);
  }

  /** The AdaptMethod named {@code name} (canonical or alias, spelled exactly); throws
   *  {@link QcException} INVALID_ARGUMENT for a name the library does not know. */
  public static AdaptMethod adaptMethodFromName(String name) {
    int[] out = new int[1];
    QcNative.qcj_adapt_method_from_name(Comm.utf8(name, "name"), out);
    return AdaptMethod.swigToEnum(out[0]);
  }

  // ---- emulation ------------------------------------------------------------

  /** The collectives of qcj_emulate: the numbers of enum qcj_collective in qc.i. */
  private static final int ALLREDUCE = 0;
  private static final int ALLTOALL = 1;
  private static final int REDUCE_SCATTER = 2;
  private static final int ALLGATHER = 3;
  private static final int BROADCAST = 4;
  private static final String[] EMULATE_NAMES = {"emulateAllreduce", "emulateAlltoall",
      "emulateReduceScatter", "emulateAllgather", "emulateBroadcast"};

  /** {@link #emulateAllreduce(float[][], ReduceOp, Policy, ErrorBuffer[])}, sum, no error feedback. */
  public static float[][] emulateAllreduce(float[][] sendbufs, Policy policy) {
    return emulateAllreduce(sendbufs, ReduceOp.SUM, policy, null);
  }

  /**
   * {@link #emulateAllreduce(float[][], ReduceOp, Policy, ErrorBuffer[], String, long)} as
   * the first call of layer "*".
   */
  public static float[][] emulateAllreduce(float[][] sendbufs, ReduceOp op, Policy policy,
      ErrorBuffer[] errorBuffers) {
    return emulateAllreduce(sendbufs, op, policy, errorBuffers, null, 0);
  }

  /**
   * Run an allreduce over {@code sendbufs.length} virtual ranks, one thread each,
   * with {@code policy} for every rank; rank i's input is {@code sendbufs[i]} (all
   * of one length). The result is bit-identical to call {@code callIndex} (0: the
   * first) of {@code layer} (null: "*") in a real run of the same inputs, policy
   * and residuals: stochastic rounding draws that call's bits. Copies the inputs
   * and outputs.
   *
   * @param errorBuffers null, or one per rank (entries may be null)
   * @param callIndex the layer's call to reproduce, {@code >= 0}
   * @return the outputs, one array per rank
   */
  public static float[][] emulateAllreduce(float[][] sendbufs, ReduceOp op, Policy policy,
      ErrorBuffer[] errorBuffers, String layer, long callIndex) {
    return emulate(ALLREDUCE, sendbufs, op, 0, policy, errorBuffers, layer, callIndex);
  }

  /**
   * Run an alltoall over {@code sendbufs.length} virtual ranks: each
   * {@code sendbufs[i]} holds nranks blocks (its length a multiple of nranks); the
   * outputs are laid out like {@link Comm#alltoall}. Copies.
   */
  public static float[][] emulateAlltoall(float[][] sendbufs, Policy policy) {
    return emulateAlltoall(sendbufs, policy, null, 0);
  }

  /** As {@link #emulateAlltoall(float[][], Policy)}, as call {@code callIndex} of {@code layer}. */
  public static float[][] emulateAlltoall(float[][] sendbufs, Policy policy, String layer,
      long callIndex) {
    return emulate(ALLTOALL, sendbufs, ReduceOp.SUM, 0, policy, null, layer, callIndex);
  }

  /**
   * {@link #emulateReduceScatter(float[][], ReduceOp, Policy, ErrorBuffer[], String, long)}:
   * sum, no error feedback, the first call of layer "*".
   */
  public static float[][] emulateReduceScatter(float[][] sendbufs, Policy policy) {
    return emulateReduceScatter(sendbufs, ReduceOp.SUM, policy, null, null, 0);
  }

  /**
   * Run a reduce-scatter over {@code sendbufs.length} virtual ranks
   * (qc_emulate_reduce_scatter), as call {@code callIndex} of {@code layer} (see
   * {@link #emulateAllreduce(float[][], ReduceOp, Policy, ErrorBuffer[], String, long)}):
   * each {@code sendbufs[i]} holds nranks blocks of recvcount floats (its length
   * nranks * recvcount, the same for every rank); output i is rank i's recvcount floats,
   * as {@link Comm#reduceScatter(FloatBuffer, FloatBuffer, ReduceOp, String, ErrorBuffer)}
   * gives them. Copies.
   *
   * @param errorBuffers null, or one per rank (entries may be null), each of nranks *
   *     recvcount residuals
   */
  public static float[][] emulateReduceScatter(float[][] sendbufs, ReduceOp op, Policy policy,
      ErrorBuffer[] errorBuffers, String layer, long callIndex) {
    return emulate(REDUCE_SCATTER, sendbufs, op, 0, policy, errorBuffers, layer, callIndex);
  }

  /**
   * {@link #emulateAllgather(float[][], Policy, ErrorBuffer[], String, long)}: no error
   * feedback, the first call of layer "*".
   */
  public static float[][] emulateAllgather(float[][] sendbufs, Policy policy) {
    return emulateAllgather(sendbufs, policy, null, null, 0);
  }

  /**
   * Run an allgather over {@code sendbufs.length} virtual ranks (qc_emulate_allgather),
   * as call {@code callIndex} of {@code layer}: rank i's input is {@code sendbufs[i]}
   * (sendcount floats, the same for every rank); every output holds nranks * sendcount
   * floats, block i rank i's, as {@link Comm#allgather(FloatBuffer, FloatBuffer, String,
   * ErrorBuffer)} gives them. Copies.
   *
   * @param errorBuffers null, or one per rank (entries may be null), each of sendcount
   *     residuals
   */
  public static float[][] emulateAllgather(float[][] sendbufs, Policy policy,
      ErrorBuffer[] errorBuffers, String layer, long callIndex) {
    return emulate(ALLGATHER, sendbufs, ReduceOp.SUM, 0, policy, errorBuffers, layer,
        callIndex);
  }

  /**
   * {@link #emulateBroadcast(float[][], int, Policy, String, long)} as the first call of
   * layer "*".
   */
  public static float[][] emulateBroadcast(float[][] sendbufs, int root, Policy policy) {
    return emulateBroadcast(sendbufs, root, policy, null, 0);
  }

  /**
   * Run a broadcast from {@code root} over {@code sendbufs.length} virtual ranks
   * (qc_emulate_broadcast), as call {@code callIndex} of {@code layer}. Only
   * {@code sendbufs[root]} (count floats) is read; the other entries may be null (an
   * array there must have count elements). Every output holds count floats, as
   * {@link Comm#broadcast(FloatBuffer, FloatBuffer, int, String)} gives them. Copies.
   *
   * @param root 0..nranks-1 (qc checks it: {@link QcException}
   *     {@link Status#INVALID_ARGUMENT} otherwise)
   */
  public static float[][] emulateBroadcast(float[][] sendbufs, int root, Policy policy,
      String layer, long callIndex) {
    return emulate(BROADCAST, sendbufs, ReduceOp.SUM, root, policy, null, layer, callIndex);
  }

  private static float[][] emulate(int collective, float[][] sendbufs, ReduceOp op, int root,
      Policy policy, ErrorBuffer[] ebs, String layer, long callIndex) {
    if (callIndex < 0) {
      throw new IllegalArgumentException("qc: argument 'callIndex' is negative (" + callIndex
          + ")");
    }
    if (sendbufs == null) {
      throw new NullPointerException("qc: argument 'sendbufs' is null");
    }
    if (policy == null || op == null) {
      throw new NullPointerException("qc: argument '" + (op == null ? "op" : "policy") + "' is null");
    }
    int nranks = sendbufs.length;
    if (nranks == 0) {
      throw new IllegalArgumentException("qc: argument 'sendbufs' is empty (no ranks)");
    }
    int n = rowLength(sendbufs, collective == BROADCAST, root);
    boolean blocks = collective == ALLTOALL || collective == REDUCE_SCATTER;
    if (blocks && n % nranks != 0) {
      throw new IllegalArgumentException("qc: " + EMULATE_NAMES[collective]
          + " needs a multiple of nranks = " + nranks + " elements per rank, got " + n);
    }
    if (ebs != null && ebs.length != nranks) {
      throw new IllegalArgumentException("qc: argument 'errorBuffers' has " + ebs.length
          + " entries for " + nranks + " ranks");
    }
    // The C call's count and each rank's output length.
    long count = blocks ? n / nranks : n;
    long recvLength = collective == REDUCE_SCATTER ? count
        : collective == ALLGATHER ? (long) n * nranks : n;
    int outLength = Buffers.checkedInt(recvLength, "output length");
    FloatBuffer send = Buffers.directFloats((long) n * nranks);
    FloatBuffer recv = Buffers.directFloats(recvLength * nranks);
    for (int i = 0; i < nranks; ++i) {
      if (sendbufs[i] != null) {
        send.position(i * n);
        send.put(sendbufs[i]);
      }
    }
    send.clear();
    long[] handles = null;
    if (ebs != null) {
      handles = new long[nranks];
      for (int i = 0; i < nranks; ++i) {
        handles[i] = ebs[i] == null ? 0 : ebs[i].handle();
      }
    }
    try (PolicyStruct p = policy.toStruct()) {
      QcNative.qcj_emulate(collective, nranks, send, recv, n, recvLength, count, Dtype.FLOAT32,
          op, root, Comm.utf8(layer, "layer"), callIndex, p, handles);
    } finally {
      Reference.reachabilityFence(ebs);
    }
    float[][] out = new float[nranks][outLength];
    for (float[] row : out) {
      recv.get(row);
    }
    return out;
  }

  /**
   * The element count of every rank's input, checked: all of one length. A broadcast
   * reads the root's only: the others may be null, and when the root is out of range
   * (which qc reports) the first one given sets the length.
   */
  private static int rowLength(float[][] sendbufs, boolean broadcast, int root) {
    float[] model = sendbufs[0];
    if (broadcast) {
      boolean rootInRange = root >= 0 && root < sendbufs.length;
      if (rootInRange && sendbufs[root] == null) {
        throw new IllegalArgumentException("qc: sendbufs[" + root + "] is null: the root's"
            + " array is the one broadcast");
      }
      model = rootInRange ? sendbufs[root] : null;
      for (int i = 0; model == null && i < sendbufs.length; ++i) {
        model = sendbufs[i];
      }
      if (model == null) {
        throw new IllegalArgumentException("qc: every entry of 'sendbufs' is null; the root's"
            + " array is the one broadcast");
      }
    }
    int n = model == null ? 0 : model.length;
    for (int i = 0; i < sendbufs.length; ++i) {
      float[] row = sendbufs[i];
      if (row == null && broadcast) {
        continue; // not read
      }
      if (row == null || row.length != n) {
        throw new IllegalArgumentException("qc: sendbufs[" + i + "] "
            + (row == null ? "is null" : "has " + row.length + " elements")
            + "; every rank needs " + n);
      }
    }
    return n;
  }

  // ---- sparse allreduce emulation -------------------------------------------------

  /**
   * {@link #emulateSparseAllreduce(long[][], float[][], int, ReduceOp, Policy, String, long)}:
   * sum, the first call of layer "*".
   */
  public static SparseRows emulateSparseAllreduce(long[][] indices, float[][] values, int rowLen,
      Policy policy) {
    return emulateSparseAllreduce(indices, values, rowLen, ReduceOp.SUM, policy, null, 0);
  }

  /**
   * Run a sparse allreduce over {@code indices.length} virtual ranks
   * (qc_emulate_sparse_allreduce), as call {@code callIndex} of {@code layer} (see
   * {@link #emulateAllreduce(float[][], ReduceOp, Policy, ErrorBuffer[], String, long)}):
   * rank r's rows are {@code indices[r]} and {@code values[r]} ({@code indices[r].length *
   * rowLen} floats), as {@link Comm#sparseAllreduce(long[], float[], int, ReduceOp, String)}
   * takes them. Every rank's result is the same bits, so one comes back: a real run's.
   * Copies.
   */
  public static SparseRows emulateSparseAllreduce(long[][] indices, float[][] values, int rowLen,
      ReduceOp op, Policy policy, String layer, long callIndex) {
    SparseInputs in = new SparseInputs(indices, values, rowLen, op, policy, callIndex);
    long[] result = new long[1]; // the qc_sparse_result_t, 0 until the call has made one
    try {
      try (PolicyStruct p = policy.toStruct()) {
        QcNative.qcj_emulate_sparse(in.nranks, in.indices, in.values, in.counts, rowLen, 0, 0,
            null, Dtype.FLOAT32, op, Comm.utf8(layer, "layer"), callIndex, p, result);
      }
      return SparseRows.read(result[0], rowLen);
    } finally {
      QcNative.qc_sparse_result_destroy(result[0]);
    }
  }

  /**
   * Run a sparse allreduce into dense tables over {@code indices.length} virtual ranks
   * (qc_emulate_sparse_allreduce_dense): as {@link #emulateSparseAllreduce(long[][],
   * float[][], int, ReduceOp, Policy, String, long)}, each rank's output a table of
   * {@code nrows * rowLen} floats, as {@link Comm#sparseAllreduceDense(long[], float[], int,
   * long, float[], ReduceOp, String)} writes it. Copies.
   */
  public static float[][] emulateSparseAllreduceDense(long[][] indices, float[][] values,
      int rowLen, long nrows, ReduceOp op, Policy policy, String layer, long callIndex) {
    SparseInputs in = new SparseInputs(indices, values, rowLen, op, policy, callIndex);
    if (nrows < 0) {
      throw new IllegalArgumentException("qc: argument 'nrows' is negative (" + nrows + ")");
    }
    int cells = Buffers.checkedInt(nrows > Integer.MAX_VALUE ? nrows : nrows * rowLen,
        "table size nrows * rowLen");
    FloatBuffer tables = Buffers.directFloats((long) cells * in.nranks);
    try (PolicyStruct p = policy.toStruct()) {
      QcNative.qcj_emulate_sparse(in.nranks, in.indices, in.values, in.counts, rowLen, 1, nrows,
          tables, Dtype.FLOAT32, op, Comm.utf8(layer, "layer"), callIndex, p, new long[1]);
    }
    float[][] out = new float[in.nranks][cells];
    for (float[] table : out) {
      tables.get(table);
    }
    return out;
  }

  /** The virtual ranks' rows, checked and laid out rank after rank for qcj_emulate_sparse. */
  private static final class SparseInputs {
    final int nranks;
    final long[] counts; // rows per rank
    final LongBuffer indices;
    final FloatBuffer values;

    SparseInputs(long[][] indices, float[][] values, int rowLen, ReduceOp op, Policy policy,
        long callIndex) {
      if (callIndex < 0) {
        throw new IllegalArgumentException("qc: argument 'callIndex' is negative (" + callIndex
            + ")");
      }
      if (indices == null || values == null || op == null || policy == null) {
        throw new NullPointerException("qc: argument '" + (indices == null ? "indices"
            : values == null ? "values" : op == null ? "op" : "policy") + "' is null");
      }
      if (rowLen < 1) {
        throw new IllegalArgumentException("qc: argument 'rowLen' is " + rowLen
            + "; expected >= 1");
      }
      nranks = indices.length;
      if (nranks == 0 || values.length != nranks) {
        throw new IllegalArgumentException("qc: " + nranks + " ranks of indices and "
            + values.length + " of values; expected the same number, at least 1");
      }
      counts = new long[nranks];
      long rows = 0;
      for (int r = 0; r < nranks; ++r) {
        if (indices[r] == null || values[r] == null) {
          throw new NullPointerException("qc: " + (indices[r] == null ? "indices" : "values")
              + "[" + r + "] is null (a rank without rows passes empty arrays)");
        }
        if (values[r].length != (long) indices[r].length * rowLen) {
          throw new IllegalArgumentException("qc: values[" + r + "] has " + values[r].length
              + " elements; " + indices[r].length + " indices of rowLen " + rowLen + " need "
              + (long) indices[r].length * rowLen);
        }
        counts[r] = indices[r].length;
        rows += counts[r];
      }
      this.indices = Buffers.directLongs(rows);
      this.values = Buffers.directFloats(rows * rowLen);
      for (int r = 0; r < nranks; ++r) {
        this.indices.put(indices[r]);
        this.values.put(values[r]);
      }
      this.indices.clear();
      this.values.clear();
    }
  }

  // ---- codecs on their own --------------------------------------------------

  /** Upper bound on the bytes {@link #encode} writes for {@code count} elements. */
  public static long encodedSize(Policy policy, long count) {
    long[] out = new long[1];
    try (PolicyStruct p = policy.toStruct()) {
      QcNative.qcj_encoded_size(p, count, out);
    }
    return out[0];
  }

  /** Encode {@code src} with the policy's codec into a self-describing message. Copies. */
  public static byte[] encode(Policy policy, float[] src) {
    FloatBuffer s = Buffers.directFloats(src.length);
    s.put(src);
    s.clear();
    ByteBuffer dst = ByteBuffer.allocateDirect(
        Buffers.checkedInt(encodedSize(policy, src.length), "encoded size"));
    encode(policy, s, dst);
    dst.flip();
    byte[] out = new byte[dst.remaining()];
    dst.get(out);
    return out;
  }

  /**
   * Encode the remaining floats of {@code src} into {@code dst} at its position,
   * zero-copy (both direct); advances {@code dst}'s position.
   *
   * @return the bytes written
   */
  public static int encode(Policy policy, FloatBuffer src, ByteBuffer dst) {
    FloatBuffer s = Buffers.check(src, "src", false);
    ByteBuffer d = Buffers.check(dst, "dst", true);
    long[] out = new long[1];
    try (PolicyStruct p = policy.toStruct()) {
      QcNative.qcj_encode(p, s, s.remaining(), Dtype.FLOAT32, d, d.remaining(), out);
    }
    int n = (int) out[0];
    dst.position(dst.position() + n);
    return n;
  }

  /**
   * Decode a message from {@link #encode} holding {@code count} elements. Copies.
   *
   * @throws QcException {@link Status#CORRUPT_DATA} for a damaged message,
   *     {@link Status#MISMATCH} when it holds another count
   */
  public static float[] decode(byte[] message, int count) {
    ByteBuffer s = ByteBuffer.allocateDirect(message.length);
    s.put(message);
    s.flip();
    FloatBuffer d = Buffers.directFloats(count);
    decode(s, d);
    float[] out = new float[count];
    d.get(out);
    return out;
  }

  /**
   * Decode the remaining bytes of {@code src} into the remaining floats of
   * {@code dst} (their count must be the message's), zero-copy.
   */
  public static void decode(ByteBuffer src, FloatBuffer dst) {
    ByteBuffer s = Buffers.check(src, "src", false);
    FloatBuffer d = Buffers.check(dst, "dst", true);
    QcNative.qc_codec_decode(s, s.remaining(), d, d.remaining(), Dtype.FLOAT32);
  }
}
