package org.qc;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import org.junit.After;
import org.junit.Test;

/**
 * Sparse allreduce: Comm.sparseAllreduce / sparseAllreduceDense over local groups whose
 * ranks run on threads, against a reference summed in double.
 */
public class SparseTest {
  private static final int[] GROUP_SIZES = {1, 2, 3, 5};
  private static final int[] ROW_LENS = {1, 64};
  private static final int PAD = 3; // elements before a buffer's position: slices must be used

  private Comm[] comms;

  @After
  public void tearDown() {
    Ranks.closeAll(comms);
  }

  /** One rank's rows. */
  static final class Rows {
    final long[] indices;
    final float[] values;

    Rows(long[] indices, float[] values) {
      this.indices = indices;
      this.values = values;
    }
  }

  /** Which indices rank r of n sends. */
  interface Shape {
    long[] indices(int rank, int nranks, Random rnd);
  }

  /** Distinct indices of 0..23, shuffled, a rank-dependent number of them. */
  static final Shape OVERLAPPING = (r, n, rnd) -> {
    List<Long> all = new ArrayList<>();
    for (long i = 0; i < 24; ++i) {
      all.add(i);
    }
    Collections.shuffle(all, rnd);
    return toLongs(all.subList(0, 4 + (3 * r) % 9));
  };

  /** No index in common; descending; far beyond 32 bits. */
  static final Shape DISJOINT = (r, n, rnd) -> {
    long[] x = new long[2 + r];
    for (int k = 0; k < x.length; ++k) {
      x[k] = (1L << 40) + 1000L * r + 7L * (x.length - k);
    }
    return x;
  };

  /** Even ranks send nothing (with one rank: no rows at all). */
  static final Shape SOME_EMPTY = (r, n, rnd) ->
      r % 2 == 0 ? new long[0] : new long[] {r, 11, 2L * r + 1};

  static final Shape ALL_EMPTY = (r, n, rnd) -> new long[0];

  /** Repeated indices within a rank, summed before anything travels. */
  static final Shape DUPLICATES = (r, n, rnd) -> new long[] {5, 2, 5, 9, r, 5, 2};

  private static long[] toLongs(List<Long> xs) {
    long[] out = new long[xs.size()];
    for (int i = 0; i < out.length; ++i) {
      out[i] = xs.get(i);
    }
    return out;
  }

  /** Rank r's rows of {@code shape}: small integers, so every float sum is exact. */
  static Rows rows(Shape shape, int rank, int nranks, int rowLen, int seed) {
    Random rnd = new Random(seed * 1000L + rank);
    long[] idx = shape.indices(rank, nranks, rnd);
    float[] val = new float[idx.length * rowLen];
    for (int i = 0; i < val.length; ++i) {
      val[i] = rnd.nextInt(101) - 50;
    }
    return new Rows(idx, val);
  }

  /** Every rank's rows summed in double, by index. */
  static TreeMap<Long, double[]> reference(Rows[] all, int rowLen) {
    TreeMap<Long, double[]> sum = new TreeMap<>();
    for (Rows rows : all) {
      for (int k = 0; k < rows.indices.length; ++k) {
        double[] row = sum.computeIfAbsent(rows.indices[k], i -> new double[rowLen]);
        for (int j = 0; j < rowLen; ++j) {
          row[j] += rows.values[k * rowLen + j];
        }
      }
    }
    return sum;
  }

  static void assertEqualsReference(String what, TreeMap<Long, double[]> expected, int rowLen,
      SparseRows got) {
    assertEquals(what + ": rowLen", rowLen, got.rowLen());
    assertEquals(what + ": nnz", expected.size(), got.nnz());
    assertEquals(what + ": values length", expected.size() * rowLen, got.values().length);
    int k = 0;
    for (Map.Entry<Long, double[]> e : expected.entrySet()) {
      assertEquals(what + ": index of row " + k, (long) e.getKey(), got.indices()[k]);
      for (int j = 0; j < rowLen; ++j) {
        assertEquals(what + ": row " + k + "[" + j + "]", (float) e.getValue()[j],
            got.values()[k * rowLen + j], 0f);
      }
      ++k;
    }
  }

  /** The rows scattered into a table of nrows rows, zeros elsewhere. */
  static float[] scatter(SparseRows rows, long nrows) {
    int rowLen = rows.rowLen();
    float[] table = new float[(int) nrows * rowLen];
    for (int k = 0; k < rows.nnz(); ++k) {
      System.arraycopy(rows.values(), k * rowLen, table, (int) rows.indices()[k] * rowLen, rowLen);
    }
    return table;
  }

  /** x behind PAD junk elements, positioned at x: the call must read from the position. */
  static LongBuffer paddedLongs(long[] x) {
    LongBuffer b = ByteBuffer.allocateDirect(8 * (x.length + PAD)).order(ByteOrder.nativeOrder())
        .asLongBuffer();
    b.position(PAD);
    b.put(x);
    b.position(PAD);
    return b;
  }

  static FloatBuffer paddedFloats(float[] x) {
    FloatBuffer b = ByteBuffer.allocateDirect(4 * (x.length + PAD))
        .order(ByteOrder.nativeOrder()).asFloatBuffer();
    b.position(PAD);
    b.put(x);
    b.position(PAD);
    return b;
  }

  static long[] bitsOf(SparseRows rows) {
    long[] out = Arrays.copyOf(rows.indices(), rows.nnz() + rows.values().length);
    for (int i = 0; i < rows.values().length; ++i) {
      out[rows.nnz() + i] = Float.floatToRawIntBits(rows.values()[i]);
    }
    return out;
  }

  /** Sparse allreduce: even ranks the array overload, odd ranks direct buffers. */
  static SparseRows sparseOf(Comm c, Rows mine, int rowLen) {
    if (c.rank() % 2 == 0) {
      return c.sparseAllreduce(mine.indices, mine.values, rowLen);
    }
    LongBuffer idx = paddedLongs(mine.indices);
    FloatBuffer val = paddedFloats(mine.values);
    SparseRows out = c.sparseAllreduce(idx, val, rowLen, ReduceOp.SUM, null);
    assertEquals("position unchanged", PAD, idx.position());
    assertEquals("position unchanged", PAD, val.position());
    return out;
  }

  /** Dense form: even ranks arrays (a tail past the table stays), odd ranks buffers. */
  static float[] denseOf(Comm c, Rows mine, int rowLen, long nrows) {
    int cells = (int) nrows * rowLen;
    if (c.rank() % 2 == 0) {
      float[] table = new float[cells + 2];
      Arrays.fill(table, -7f); // everything is written: zeros where no rank has a row
      c.sparseAllreduceDense(mine.indices, mine.values, rowLen, nrows, table);
      assertEquals("tail past nrows * rowLen", -7f, table[cells], 0f);
      assertEquals("tail past nrows * rowLen", -7f, table[cells + 1], 0f);
      return Arrays.copyOf(table, cells);
    }
    FloatBuffer table = paddedFloats(new float[cells]);
    c.sparseAllreduceDense(paddedLongs(mine.indices), paddedFloats(mine.values), rowLen, nrows,
        table, ReduceOp.SUM, null);
    assertEquals("position unchanged", PAD, table.position());
    return CommTest.toArray(table);
  }

  /**
   * Codec none over 1, 2, 3 and 5 ranks and rows of 1 and 64: each rank's result is the
   * double reference exactly, the same bits everywhere, and the dense table is the
   * result scattered (where the indices fit a table).
   */
  private void checkExact(Shape shape, int seed) throws Exception {
    for (int n : GROUP_SIZES) {
      comms = Comm.createLocal(n, 60.0);
      for (int rowLen : ROW_LENS) {
        Rows[] all = new Rows[n];
        long maxIndex = -1;
        for (int r = 0; r < n; ++r) {
          all[r] = rows(shape, r, n, rowLen, seed);
          for (long i : all[r].indices) {
            maxIndex = Math.max(maxIndex, i);
          }
        }
        TreeMap<Long, double[]> expected = reference(all, rowLen);
        String what = n + " ranks, rowLen " + rowLen;
        List<SparseRows> out = Ranks.run(comms, c -> sparseOf(c, all[c.rank()], rowLen));
        for (int r = 0; r < n; ++r) {
          assertEqualsReference(what + ", rank " + r, expected, rowLen, out.get(r));
          assertArrayEquals(what + ": rank " + r + " has rank 0's bits", bitsOf(out.get(0)),
              bitsOf(out.get(r)));
        }
        if (maxIndex < 4096) {
          long nrows = maxIndex + 3; // two rows no rank sends
          List<float[]> tables = Ranks.run(comms, c -> denseOf(c, all[c.rank()], rowLen, nrows));
          float[] scattered = scatter(out.get(0), nrows);
          for (int r = 0; r < n; ++r) {
            assertArrayEquals(what + ": rank " + r + "'s table", CommTest.bits(scattered),
                CommTest.bits(tables.get(r)));
          }
        }
      }
      Ranks.closeAll(comms);
      comms = null;
    }
  }

  @Test
  public void overlappingIndicesAreSummedExactly() throws Exception {
    checkExact(OVERLAPPING, 1);
  }

  @Test
  public void disjointIndicesAreTheUnion() throws Exception {
    checkExact(DISJOINT, 2);
  }

  @Test
  public void emptyRanksTakePart() throws Exception {
    checkExact(SOME_EMPTY, 3);
    checkExact(ALL_EMPTY, 4);
  }

  @Test
  public void duplicateIndicesAreSummed() throws Exception {
    checkExact(DUPLICATES, 5);
  }

  @Test
  public void averageDividesByTheRankCount() throws Exception {
    comms = Comm.createLocal(2, 60.0);
    // rows 4 (both ranks: 2 + 6) and 1 (rank 1 only: 10): means 4 and 5
    List<SparseRows> out = Ranks.run(comms, c -> c.rank() == 0
        ? c.sparseAllreduce(new long[] {4}, new float[] {2f}, 1, ReduceOp.AVG, null)
        : c.sparseAllreduce(new long[] {1, 4}, new float[] {10f, 6f}, 1, ReduceOp.AVG, null));
    for (SparseRows rows : out) {
      assertArrayEquals(new long[] {1, 4}, rows.indices());
      assertArrayEquals(new float[] {5f, 4f}, rows.values(), 0f);
    }
  }

  @Test
  public void compressedResultIsBitIdenticalOnEveryRank() throws Exception {
    for (int n : new int[] {3, 5}) {
      comms = Comm.createLocal(n, 60.0);
      int rowLen = 64;
      long nrows = 40;
      Rows[] all = new Rows[n];
      for (int r = 0; r < n; ++r) {
        Random rnd = new Random(77 + r);
        long[] idx = OVERLAPPING.indices(r, n, rnd);
        float[] val = new float[idx.length * rowLen];
        for (int i = 0; i < val.length; ++i) {
          val[i] = (float) rnd.nextGaussian();
        }
        all[r] = new Rows(idx, val);
      }
      TreeMap<Long, double[]> exact = reference(all, rowLen);
      Policy minmax = Policy.builder().codec(Codec.MINMAX).bits(4).minCompressBytes(0).build();
      List<SparseRows> out = Ranks.run(comms, c -> {
        c.setLayerPolicy("emb", minmax);
        return c.sparseAllreduce(all[c.rank()].indices, all[c.rank()].values, rowLen,
            ReduceOp.SUM, "emb");
      });
      List<float[]> tables = Ranks.run(comms, c -> {
        float[] table = new float[(int) nrows * rowLen];
        c.sparseAllreduceDense(all[c.rank()].indices, all[c.rank()].values, rowLen, nrows, table,
            ReduceOp.SUM, "emb");
        return table;
      });
      SparseRows first = out.get(0);
      assertArrayEquals(toLongs(new ArrayList<>(exact.keySet())), first.indices());
      boolean lossy = false;
      int k = 0;
      for (double[] row : exact.values()) {
        for (int j = 0; j < rowLen; ++j) {
          float got = first.values()[k * rowLen + j];
          assertEquals("4-bit sum near the exact one", row[j], got, 0.5 * n);
          lossy |= got != (float) row[j];
        }
        ++k;
      }
      assertTrue("minmax 4 bits changed some value", lossy);
      // The dense form may take another schedule (densify: no index travels), so its
      // table is compared with the exact sums, not with the sparse rows.
      float[] table = tables.get(0);
      for (long i = 0; i < nrows; ++i) {
        double[] row = exact.get(i);
        for (int j = 0; j < rowLen; ++j) {
          float got = table[(int) i * rowLen + j];
          if (row == null) {
            assertEquals("row " + i + " that no rank sends is exactly zero", 0f, got, 0f);
          } else {
            assertEquals("4-bit table near the exact sum", row[j], got, 0.5 * n);
          }
        }
      }
      for (int r = 0; r < n; ++r) {
        assertArrayEquals("rank " + r, bitsOf(first), bitsOf(out.get(r)));
        assertArrayEquals("rank " + r + "'s table", CommTest.bits(table),
            CommTest.bits(tables.get(r)));
      }
      Ranks.closeAll(comms);
      comms = null;
    }
  }

  // ---- errors ----------------------------------------------------------------------

  private static QcException qcError(Ranks.Outcome<?> o, int rank) {
    assertTrue("rank " + rank + ": " + o.error, o.error instanceof QcException);
    return (QcException) o.error;
  }

  /** Rank {@code refusing} failed with INVALID_ARGUMENT, every other rank with MISMATCH. */
  private static void assertRefusedBy(int refusing, List<? extends Ranks.Outcome<?>> out) {
    for (int r = 0; r < out.size(); ++r) {
      QcException e = qcError(out.get(r), r);
      assertSame("rank " + r + ": " + e,
          r == refusing ? Status.INVALID_ARGUMENT : Status.MISMATCH, e.getStatus());
    }
  }

  @Test
  public void rowLenMismatchFailsEveryRank() throws Exception {
    comms = Comm.createLocal(3, 60.0);
    List<Ranks.Outcome<SparseRows>> out = Ranks.runAll(comms, c -> {
      int rowLen = c.rank() == 2 ? 2 : 4;
      return c.sparseAllreduce(new long[] {c.rank()}, new float[rowLen], rowLen);
    });
    for (int r = 0; r < 3; ++r) {
      QcException e = qcError(out.get(r), r);
      assertSame("rank " + r + ": " + e, Status.MISMATCH, e.getStatus());
      assertTrue("rank " + r + ": " + e.getDetail(), e.getDetail().contains("disagree"));
    }
  }

  @Test
  public void negativeIndexIsAnInvalidArgument() throws Exception {
    comms = Comm.createLocal(1, 60.0);
    QcException alone = assertThrows(QcException.class,
        () -> comms[0].sparseAllreduce(new long[] {0, -3}, new float[2], 1));
    assertSame(alone.toString(), Status.INVALID_ARGUMENT, alone.getStatus());
    assertTrue(alone.getDetail(), alone.getDetail().contains("entry 1 is -3"));
    Ranks.closeAll(comms);

    // Rank 1 refuses its rows: it fails with INVALID_ARGUMENT, its peers with MISMATCH,
    // and nobody waits; the communicators stay usable.
    comms = Comm.createLocal(3, 60.0);
    List<Ranks.Outcome<SparseRows>> out = Ranks.runAll(comms, c ->
        c.sparseAllreduce(new long[] {c.rank() == 1 ? -5 : 2}, new float[] {1f}, 1));
    assertRefusedBy(1, out);
    assertTrue(qcError(out.get(1), 1).getDetail().contains("entry 0 is -5"));
    // dense form: an index past the table
    List<Ranks.Outcome<float[]>> dense = Ranks.runAll(comms, c -> {
      float[] table = new float[4];
      c.sparseAllreduceDense(new long[] {c.rank() == 0 ? 4 : 1}, new float[] {1f}, 1, 4, table);
      return table;
    });
    assertRefusedBy(0, dense);
    assertTrue(qcError(dense.get(0), 0).getDetail().contains("entry 0 is 4"));
    List<SparseRows> after = Ranks.run(comms, c ->
        c.sparseAllreduce(new long[] {2}, new float[] {1f}, 1));
    for (SparseRows rows : after) {
      assertArrayEquals(new long[] {2}, rows.indices());
      assertArrayEquals(new float[] {3f}, rows.values(), 0f);
    }
  }

  @Test
  public void javaChecksTheArguments() {
    comms = Comm.createLocal(1, 60.0);
    Comm c = comms[0];
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> c.sparseAllreduce(new long[] {1, 2}, new float[5], 3));
    assertTrue(e.getMessage(), e.getMessage().contains("2 indices of rowLen 3 need 6"));
    e = assertThrows(IllegalArgumentException.class,
        () -> c.sparseAllreduce(new long[0], new float[0], 0));
    assertTrue(e.getMessage(), e.getMessage().contains("'rowLen' is 0"));
    assertThrows(NullPointerException.class, () -> c.sparseAllreduce(null, new float[0], 1));
    assertThrows(NullPointerException.class, () -> c.sparseAllreduce(new long[0], null, 1));
    e = assertThrows(IllegalArgumentException.class, () -> c.sparseAllreduce(
        LongBuffer.wrap(new long[] {1}), CommTest.direct(new float[1]), 1, ReduceOp.SUM, null));
    assertTrue(e.getMessage(), e.getMessage().contains("'indices' is a heap buffer"));
    e = assertThrows(IllegalArgumentException.class,
        () -> c.sparseAllreduceDense(new long[] {1}, new float[2], 2, 3, new float[5]));
    assertTrue(e.getMessage(), e.getMessage().contains("room for 5 elements"));
    e = assertThrows(IllegalArgumentException.class,
        () -> c.sparseAllreduceDense(new long[] {1}, new float[2], 2, -1, new float[5]));
    assertTrue(e.getMessage(), e.getMessage().contains("'nrows' is negative"));
    e = assertThrows(IllegalArgumentException.class, () -> c.sparseAllreduceDense(
        paddedLongs(new long[] {1}), paddedFloats(new float[1]), 1, 2,
        CommTest.direct(new float[2]).asReadOnlyBuffer(), ReduceOp.SUM, null));
    assertTrue(e.getMessage(), e.getMessage().contains("'dense' is read-only"));
    // qc's own checks come through as QcException; the Comm is still usable after them
    Policy topk = Policy.builder().codec(Codec.TOPK).build();
    c.setLayerPolicy("t", topk);
    QcException q = assertThrows(QcException.class,
        () -> c.sparseAllreduce(new long[] {1}, new float[1], 1, ReduceOp.SUM, "t"));
    assertSame(q.toString(), Status.UNSUPPORTED, q.getStatus());
    assertEquals(1, c.sparseAllreduce(new long[] {1}, new float[1], 1).nnz());
    c.close();
    assertThrows(IllegalStateException.class,
        () -> c.sparseAllreduce(new long[] {1}, new float[1], 1));
  }

  // ---- non-blocking forms and emulation ---------------------------------------------

  static Rows[] gaussianRows(int n, int rowLen, int seed) {
    Rows[] all = new Rows[n];
    for (int r = 0; r < n; ++r) {
      Random rnd = new Random(seed * 1000L + r);
      long[] idx = OVERLAPPING.indices(r, n, rnd);
      float[] val = new float[idx.length * rowLen];
      for (int i = 0; i < val.length; ++i) {
        val[i] = (float) rnd.nextGaussian();
      }
      all[r] = new Rows(idx, val);
    }
    return all;
  }

  private static Policy minmax4() {
    return Policy.builder().codec(Codec.MINMAX).bits(4).minCompressBytes(0).build();
  }

  @Test
  public void nonBlockingEqualsBlocking() throws Exception {
    int rowLen = 16;
    long nrows = 30;
    for (int n : new int[] {1, 3}) {
      comms = Comm.createLocal(n, 60.0);
      Rows[] all = gaussianRows(n, rowLen, 9);
      List<long[][]> out = Ranks.run(comms, c -> {
        c.setLayerPolicy("*", minmax4());
        Rows mine = all[c.rank()];
        SparseRows blocking = c.sparseAllreduce(mine.indices, mine.values, rowLen);
        float[] blockingTable = new float[(int) nrows * rowLen];
        c.sparseAllreduceDense(mine.indices, mine.values, rowLen, nrows, blockingTable);
        // both outstanding at once, then waited for in the other order
        FloatBuffer table = paddedFloats(new float[(int) nrows * rowLen]);
        Request sparse = c.isparseAllreduce(paddedLongs(mine.indices),
            paddedFloats(mine.values), rowLen, ReduceOp.SUM, null);
        try (Request dense = c.isparseAllreduceDense(paddedLongs(mine.indices),
                paddedFloats(mine.values), rowLen, nrows, table, ReduceOp.SUM, null)) {
          dense.waitFor();
          IllegalStateException e = assertThrows(IllegalStateException.class, dense::sparseRows);
          assertTrue(e.getMessage(), e.getMessage().contains("no sparse rows"));
          SparseRows rows = sparse.sparseRows();
          assertArrayEquals("a second read copies the same", bitsOf(rows),
              bitsOf(sparse.sparseRows()));
          assertArrayEquals("isparseAllreduce == sparseAllreduce", bitsOf(blocking),
              bitsOf(rows));
          assertArrayEquals("isparseAllreduceDense == sparseAllreduceDense",
              CommTest.bits(blockingTable), CommTest.bits(CommTest.toArray(table)));
        }
        sparse.close(); // frees the result
        assertThrows(IllegalStateException.class, sparse::sparseRows);
        return new long[][] {bitsOf(blocking)};
      });
      for (int r = 0; r < n; ++r) {
        assertArrayEquals("rank " + r, out.get(0)[0], out.get(r)[0]);
      }
      Ranks.closeAll(comms);
      comms = null;
    }
  }

  @Test
  public void requestClosedBeforeItCompletesStillRuns() throws Exception {
    comms = Comm.createLocal(2, 60.0);
    List<SparseRows> out = Ranks.run(comms, c -> {
      // the result is freed with the request; the call still runs for the peer
      c.isparseAllreduce(paddedLongs(new long[] {c.rank()}), paddedFloats(new float[] {1f}), 1,
          ReduceOp.SUM, null).close();
      return c.sparseAllreduce(new long[] {7}, new float[] {2f}, 1);
    });
    for (SparseRows rows : out) {
      assertArrayEquals(new long[] {7}, rows.indices());
      assertArrayEquals(new float[] {4f}, rows.values(), 0f);
    }
  }

  @Test
  public void emulationEqualsARealRun() throws Exception {
    int n = 3;
    int rowLen = 64;
    long nrows = 26;
    Rows[] all = gaussianRows(n, rowLen, 11);
    comms = Comm.createLocal(n, 60.0);
    List<SparseRows> real = Ranks.run(comms, c -> {
      c.setLayerPolicy("emb", minmax4());
      Rows mine = all[c.rank()];
      return c.sparseAllreduce(mine.indices, mine.values, rowLen, ReduceOp.SUM, "emb");
    });
    List<float[]> realTables = Ranks.run(comms, c -> {
      Rows mine = all[c.rank()];
      float[] table = new float[(int) nrows * rowLen];
      c.sparseAllreduceDense(mine.indices, mine.values, rowLen, nrows, table, ReduceOp.SUM,
          "emb");
      return table;
    });
    long[][] indices = new long[n][];
    float[][] values = new float[n][];
    for (int r = 0; r < n; ++r) {
      indices[r] = all[r].indices;
      values[r] = all[r].values;
    }
    SparseRows emulated = Qc.emulateSparseAllreduce(indices, values, rowLen, ReduceOp.SUM,
        minmax4(), "emb", 0);
    // the dense call was the layer's second
    float[][] emulatedTables = Qc.emulateSparseAllreduceDense(indices, values, rowLen, nrows,
        ReduceOp.SUM, minmax4(), "emb", 1);
    assertTrue("minmax 4 bits changed some value",
        !Arrays.equals(emulated.values(), Qc.emulateSparseAllreduce(indices, values, rowLen,
            Policy.defaults()).values()));
    for (int r = 0; r < n; ++r) {
      assertArrayEquals("rank " + r, bitsOf(emulated), bitsOf(real.get(r)));
      assertArrayEquals("rank " + r + "'s table", CommTest.bits(emulatedTables[r]),
          CommTest.bits(realTables.get(r)));
    }
  }

  @Test
  public void emulateChecksItsInputs() {
    Policy p = Policy.defaults();
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateSparseAllreduce(new long[][] {{1}, {2}}, new float[][] {{1f}}, 1, p));
    assertTrue(e.getMessage(), e.getMessage().contains("2 ranks of indices and 1 of values"));
    e = assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateSparseAllreduce(new long[][] {{1, 2}}, new float[][] {{1f}}, 1, p));
    assertTrue(e.getMessage(), e.getMessage().contains("values[0] has 1 elements"));
    assertThrows(NullPointerException.class,
        () -> Qc.emulateSparseAllreduce(new long[][] {null}, new float[][] {{}}, 1, p));
    QcException q = assertThrows(QcException.class,
        () -> Qc.emulateSparseAllreduce(new long[][] {{-1}}, new float[][] {{1f}}, 1, p));
    assertSame(q.toString(), Status.INVALID_ARGUMENT, q.getStatus());
    // the first virtual rank's failure comes back: its own index past the table
    q = assertThrows(QcException.class, () -> Qc.emulateSparseAllreduceDense(
        new long[][] {{3}, {0}}, new float[][] {{1f}, {1f}}, 1, 3, ReduceOp.SUM, p, null, 0));
    assertSame(q.toString(), Status.INVALID_ARGUMENT, q.getStatus());
    assertTrue(q.getDetail(), q.getDetail().contains("entry 0 is 3"));
    float[][] t = Qc.emulateSparseAllreduceDense(new long[][] {{0, 2}, {}},
        new float[][] {{1f, 2f}, {}}, 1, 3, ReduceOp.SUM, p, null, 0);
    assertArrayEquals(new float[] {1f, 0f, 2f}, t[0], 0f);
    assertArrayEquals(new float[] {1f, 0f, 2f}, t[1], 0f);
  }
}
