package org.qc;

import java.nio.FloatBuffer;
import java.nio.LongBuffer;

/**
 * The result of a sparse allreduce ({@link Comm#sparseAllreduce(long[], float[], int,
 * ReduceOp, String)}): the union of the ranks' row indices in ascending order, and for
 * each the sum of the ranks' rows of that index, {@link #rowLen()} floats. Row k is
 * {@code values()[k * rowLen() ...]}. Every rank gets the same result, bit for bit.
 *
 * <p>A copy out of the library: no native memory, nothing to close. The arrays are the
 * caller's ({@link #indices()} and {@link #values()} return them, not copies).
 */
public final class SparseRows {
  private final long[] indices;
  private final float[] values;
  private final int rowLen;

  private SparseRows(long[] indices, float[] values, int rowLen) {
    this.indices = indices;
    this.values = values;
    this.rowLen = rowLen;
  }

  /** The row indices, ascending, each once. */
  public long[] indices() {
    return indices;
  }

  /** nnz() x rowLen() floats, row after row, in the order of {@link #indices()}. */
  public float[] values() {
    return values;
  }

  /** The floats of one row. */
  public int rowLen() {
    return rowLen;
  }

  /** The number of rows. */
  public int nnz() {
    return indices.length;
  }

  @Override
  public String toString() {
    return "SparseRows{nnz=" + indices.length + ", rowLen=" + rowLen + "}";
  }

  /**
   * Copies the rows of the qc_sparse_result_t {@code result} (made with row length
   * {@code rowLen}) out of the library; freeing it stays with the caller.
   */
  static SparseRows read(long result, int rowLen) {
    long[] out = new long[1];
    QcNative.qcj_sparse_result_nnz(result, out);
    int nnz = Buffers.checkedInt(out[0], "row count");
    LongBuffer indexBuf = Buffers.directLongs(nnz);
    FloatBuffer valueBuf = Buffers.directFloats((long) nnz * rowLen);
    QcNative.qcj_sparse_result_copy(result, indexBuf, valueBuf, nnz);
    long[] indices = new long[nnz];
    indexBuf.get(indices);
    float[] values = new float[valueBuf.capacity()];
    valueBuf.get(values);
    return new SparseRows(indices, values, rowLen);
  }
}
