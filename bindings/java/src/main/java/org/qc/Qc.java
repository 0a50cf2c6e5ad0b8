package org.qc;

import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.FloatBuffer;

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
    return emulate(false, sendbufs, 1, op, policy, errorBuffers, layer, callIndex);
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
    return emulate(true, sendbufs, sendbufs == null ? 1 : sendbufs.length, ReduceOp.SUM, policy,
        null, layer, callIndex);
  }

  private static float[][] emulate(boolean alltoall, float[][] sendbufs, int blocks, ReduceOp op,
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
    int n = sendbufs[0] == null ? 0 : sendbufs[0].length;
    for (int i = 0; i < nranks; ++i) {
      if (sendbufs[i] == null || sendbufs[i].length != n) {
        throw new IllegalArgumentException("qc: sendbufs[" + i + "] "
            + (sendbufs[i] == null ? "is null" : "has " + sendbufs[i].length + " elements")
            + "; every rank needs " + n);
      }
    }
    if (alltoall && n % nranks != 0) {
      throw new IllegalArgumentException("qc: emulateAlltoall needs a multiple of nranks = "
          + nranks + " elements per rank, got " + n);
    }
    if (ebs != null && ebs.length != nranks) {
      throw new IllegalArgumentException("qc: argument 'errorBuffers' has " + ebs.length
          + " entries for " + nranks + " ranks");
    }
    long total = (long) n * nranks;
    FloatBuffer send = Buffers.directFloats(total);
    FloatBuffer recv = Buffers.directFloats(total);
    for (float[] row : sendbufs) {
      send.put(row);
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
      QcNative.qcj_emulate(alltoall ? 1 : 0, nranks, send, recv, n, n / blocks, Dtype.FLOAT32,
          op, Comm.utf8(layer, "layer"), callIndex, p, handles);
    } finally {
      Reference.reachabilityFence(ebs);
    }
    float[][] out = new float[nranks][n];
    for (float[] row : out) {
      recv.get(row);
    }
    return out;
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
