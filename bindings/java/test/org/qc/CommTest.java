package org.qc;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.List;
import java.util.Random;
import org.junit.After;
import org.junit.Test;

public class CommTest {
  private static final int N = 3;         // ranks: odd on purpose
  private static final int COUNT = 10007; // odd, not a multiple of anything useful

  private Comm[] comms;

  @After
  public void tearDown() {
    Ranks.closeAll(comms);
  }

  /** Rank r's input: small integers, so that every float sum is exact. */
  static float[] intInput(int rank, int count) {
    float[] x = new float[count];
    for (int i = 0; i < count; ++i) {
      x[i] = (float) ((i * 7 + rank * 13) % 101 - 50);
    }
    return x;
  }

  /** randomInput of every rank 0..N-1. */
  static float[][] randomInputs(int count) {
    float[][] inputs = new float[N][];
    for (int r = 0; r < N; ++r) {
      inputs[r] = randomInput(r, count);
    }
    return inputs;
  }

  static float[] randomInput(int rank, int count) {
    Random rnd = new Random(1234 + rank);
    float[] x = new float[count];
    for (int i = 0; i < count; ++i) {
      x[i] = (float) rnd.nextGaussian();
    }
    return x;
  }

  static FloatBuffer direct(float[] x) {
    FloatBuffer b = ByteBuffer.allocateDirect(4 * x.length).order(ByteOrder.nativeOrder())
        .asFloatBuffer();
    b.put(x);
    b.clear();
    return b;
  }

  static float[] toArray(FloatBuffer b) {
    float[] x = new float[b.remaining()];
    b.duplicate().get(x);
    return x;
  }

  static int[] bits(float[] x) {
    int[] out = new int[x.length];
    for (int i = 0; i < x.length; ++i) {
      out[i] = Float.floatToRawIntBits(x[i]);
    }
    return out;
  }

  @Test
  public void createLocalGivesRanksAndSize() {
    comms = Comm.createLocal(N);
    assertEquals(N, comms.length);
    for (int r = 0; r < N; ++r) {
      assertEquals(r, comms[r].rank());
      assertEquals(N, comms[r].size());
      assertFalse(comms[r].isClosed());
    }
  }

  @Test
  public void createLocalRejectsZeroRanks() {
    QcException e = assertThrows(QcException.class, () -> Comm.createLocal(0));
    assertEquals(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("nranks"));
  }

  @Test
  public void allreduceNoneIsExactSumOnEveryRank() throws Exception {
    comms = Comm.createLocal(N);
    float[] expected = new float[COUNT];
    for (int r = 0; r < N; ++r) {
      float[] x = intInput(r, COUNT);
      for (int i = 0; i < COUNT; ++i) {
        expected[i] += x[i];
      }
    }
    // rank 0: direct buffers; rank 1: in-place direct buffer; rank 2: float[] (copying)
    List<float[]> out = Ranks.run(comms, c -> {
      float[] x = intInput(c.rank(), COUNT);
      if (c.rank() == 0) {
        FloatBuffer recv = direct(new float[COUNT]);
        c.allreduce(direct(x), recv);
        return toArray(recv);
      } else if (c.rank() == 1) {
        FloatBuffer buf = direct(x);
        c.allreduce(buf);
        assertEquals("position unchanged", 0, buf.position());
        return toArray(buf);
      } else {
        float[] recv = new float[COUNT];
        c.allreduce(x, recv);
        return recv;
      }
    });
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r, expected, out.get(r), 0.0f);
    }
    Stats s = comms[0].stats();
    assertEquals(1, s.calls());
    assertEquals(4L * COUNT, s.logicalBytes());
    assertTrue(s.wireBytes() > 0);
  }

  @Test
  public void allreduceAvg() throws Exception {
    comms = Comm.createLocal(N);
    List<float[]> out = Ranks.run(comms, c -> {
      float[] x = new float[] {3f * (c.rank() + 1), 6f};
      float[] y = new float[2];
      c.allreduce(x, y, ReduceOp.AVG, null, null);
      return y;
    });
    for (float[] y : out) {
      assertArrayEquals(new float[] {6f, 6f}, y, 1e-6f);
    }
  }

  @Test
  public void emulationReproducesALaterCallOfALayer() throws Exception {
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(2).bucketSize(64).minCompressBytes(0)
        .rounding(Rounding.STOCHASTIC).seed(7).build();
    comms = Comm.createLocal(N);
    float[][] inputs = randomInputs(COUNT);
    // Layer "a" three times, with calls of "b" in between: its third call is
    // call index 2 of "a", whatever "b" did.
    List<float[]> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", p);
      float[] y = new float[COUNT];
      for (int call = 0; call < 3; ++call) {
        c.allreduce(inputs[c.rank()], y, ReduceOp.SUM, "b", null);
        c.allreduce(inputs[c.rank()], y, ReduceOp.SUM, "a", null);
      }
      return y;
    });
    float[][] third = Qc.emulateAllreduce(inputs, ReduceOp.SUM, p, null, "a", 2);
    float[][] first = Qc.emulateAllreduce(inputs, ReduceOp.SUM, p, null, "a", 0);
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r + " = emulated call 2 of a", bits(third[r]), bits(out.get(r)));
    }
    assertFalse("call 0 draws other bits",
        java.util.Arrays.equals(bits(first[0]), bits(out.get(0))));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateAllreduce(inputs, ReduceOp.SUM, p, null, "a", -1));
  }

  @Test
  public void compressedAllreduceMatchesEmulationBitForBit() throws Exception {
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(4).bucketSize(64).minCompressBytes(0)
        .build();
    comms = Comm.createLocal(N);
    float[][] inputs = randomInputs(COUNT);
    List<float[]> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", p);
      assertEquals(p, c.getLayerPolicy("fc1.weight"));
      float[] y = new float[COUNT];
      c.allreduce(inputs[c.rank()], y, ReduceOp.SUM, "fc1.weight", null);
      return y;
    });
    float[][] emulated = Qc.emulateAllreduce(inputs, p);
    float[] exact = new float[COUNT];
    for (float[] x : inputs) {
      for (int i = 0; i < COUNT; ++i) {
        exact[i] += x[i];
      }
    }
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("replica " + r + " = replica 0", bits(out.get(0)), bits(out.get(r)));
      assertArrayEquals("rank " + r + " = emulation", bits(emulated[r]), bits(out.get(r)));
    }
    assertFalse("4-bit result differs from the exact sum",
        java.util.Arrays.equals(bits(exact), bits(out.get(0))));
    assertArrayEquals(exact, out.get(0), 1.0f);
    LayerStats ls = comms[0].layerStats("fc1.weight");
    assertEquals(1, ls.calls());
    assertEquals(COUNT, ls.count());
    assertTrue(comms[0].stats().wireBytes() < 4L * COUNT);
  }

  @Test
  public void errorFeedbackThroughComm() throws Exception {
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(2).errorFeedback(true)
        .minCompressBytes(0).build();
    comms = Comm.createLocal(N);
    List<Double> norms = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", p);
      try (ErrorBuffer eb = ErrorBuffer.create(c, COUNT)) {
        assertEquals(0.0, eb.norm(), 0.0);
        FloatBuffer x = direct(randomInput(c.rank(), COUNT));
        FloatBuffer y = direct(new float[COUNT]);
        c.allreduce(x, y, ReduceOp.SUM, null, eb);
        double norm = eb.norm();
        // a checkpoint restores into a fresh buffer of the same rank
        byte[] image = eb.save();
        try (ErrorBuffer fresh = ErrorBuffer.create(c, COUNT)) {
          fresh.load(image);
          assertEquals(norm, fresh.norm(), 0.0);
        }
        return norm;
      }
    });
    for (double n : norms) {
      assertTrue("residuals are kept", n > 0);
    }
  }

  @Test
  public void alltoallMatchesEmulation() throws Exception {
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(8).minCompressBytes(0).build();
    int block = 257;
    float[][] inputs = new float[N][];
    for (int r = 0; r < N; ++r) {
      inputs[r] = randomInput(10 + r, N * block);
    }
    comms = Comm.createLocal(N);
    List<float[]> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", p);
      if (c.rank() == 0) {
        FloatBuffer y = direct(new float[N * block]);
        c.alltoall(direct(inputs[0]), y, null);
        return toArray(y);
      }
      float[] y = new float[N * block];
      c.alltoall(inputs[c.rank()], y, null);
      return y;
    });
    float[][] emulated = Qc.emulateAlltoall(inputs, p);
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r, bits(emulated[r]), bits(out.get(r)));
      // block i of rank r's output comes from rank i's block r
      for (int i = 0; i < N; ++i) {
        assertEquals(inputs[i][r * block], out.get(r)[i * block], 0.02f);
      }
    }
  }

  @Test
  public void ranksThatDisagreeOnCountAllGetMismatch() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    List<Ranks.Outcome<Void>> out = Ranks.runAll(comms, c -> {
      int n = c.rank() == N - 1 ? COUNT + 1 : COUNT;
      c.allreduce(direct(intInput(c.rank(), n)));
      return null;
    });
    for (int r = 0; r < N; ++r) {
      Throwable t = out.get(r).error;
      assertNotNull("rank " + r + " must fail", t);
      assertTrue("rank " + r + ": " + t, t instanceof QcException);
      assertEquals("rank " + r + ": " + t, Status.MISMATCH, ((QcException) t).getStatus());
    }
    // the communicator is broken from now on: the same status again
    QcException again = assertThrows(QcException.class,
        () -> comms[0].allreduce(direct(new float[4])));
    assertEquals(Status.MISMATCH, again.getStatus());
  }

  @Test
  public void heapBufferIsRejected() {
    comms = Comm.createLocal(1);
    FloatBuffer heap = FloatBuffer.allocate(16);
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> comms[0].allreduce(heap));
    assertTrue(e.getMessage(), e.getMessage().contains("direct"));
    assertTrue(e.getMessage(), e.getMessage().contains("sendbuf"));
    FloatBuffer bigEndian = ByteBuffer.allocateDirect(64)
        .order(ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN
            ? ByteOrder.LITTLE_ENDIAN : ByteOrder.BIG_ENDIAN)
        .asFloatBuffer();
    e = assertThrows(IllegalArgumentException.class, () -> comms[0].allreduce(bigEndian));
    assertTrue(e.getMessage(), e.getMessage().contains("byte order"));
    FloatBuffer ro = direct(new float[4]).asReadOnlyBuffer();
    assertThrows(IllegalArgumentException.class,
        () -> comms[0].allreduce(direct(new float[4]), ro));
    assertThrows(IllegalArgumentException.class,
        () -> comms[0].allreduce(direct(new float[4]), direct(new float[3])));
    // a one-rank group still works after the rejections
    FloatBuffer ok = direct(new float[] {1f, 2f});
    comms[0].allreduce(ok);
    assertArrayEquals(new float[] {1f, 2f}, toArray(ok), 0f);
  }

  @Test
  public void positionAndLimitSelectTheElements() {
    comms = Comm.createLocal(1);
    FloatBuffer b = direct(new float[] {1f, 2f, 3f, 4f, 5f});
    b.position(1).limit(4);
    FloatBuffer r = direct(new float[3]);
    comms[0].allreduce(b, r);
    assertArrayEquals(new float[] {2f, 3f, 4f}, toArray(r), 0f);
    assertEquals(1, b.position());
  }

  @Test
  public void closedCommThrowsIllegalState() {
    comms = Comm.createLocal(1);
    Comm c = comms[0];
    c.close();
    c.close(); // idempotent
    assertTrue(c.isClosed());
    assertThrows(IllegalStateException.class, () -> c.allreduce(new float[2]));
    assertThrows(IllegalStateException.class, () -> c.allreduce(direct(new float[2])));
    assertThrows(IllegalStateException.class, c::rank);
    assertThrows(IllegalStateException.class, c::stats);
    assertThrows(IllegalStateException.class, () -> c.getLayerPolicy(null));
    assertThrows(IllegalStateException.class, () -> ErrorBuffer.create(c, 4));
  }

  @Test
  public void tryWithResources() {
    Comm[] group = Comm.createLocal(2);
    try (Comm a = group[0]; Comm b = group[1]) {
      assertEquals(0, a.rank());
      assertEquals(1, b.rank());
    }
    assertTrue(group[0].isClosed());
    assertTrue(group[1].isClosed());
  }

  @Test
  public void presetAndLayerPolicies() {
    comms = Comm.createLocal(1);
    Comm c = comms[0];
    Policy base = Policy.builder().codec(Codec.MINMAX).bits(4).build();
    c.policyPreset("cgx", base);
    assertSame(Codec.NONE, c.getLayerPolicy("fc.bias").codec());
    assertSame(Codec.NONE, c.getLayerPolicy("layer1.0.bn1.weight").codec());
    Policy w = c.getLayerPolicy("fc.weight");
    assertSame(Codec.MINMAX, w.codec());
    assertEquals(4, w.bits());
    assertTrue(w.minCompressBytes() >= 16384);
    QcException e = assertThrows(QcException.class, () -> c.policyPreset("no-such-preset", null));
    assertEquals(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("cgx"));
    // exact names beat globs; unicode names travel as UTF-8
    Policy exact = Policy.builder().codec(Codec.FP16).build();
    c.setLayerPolicy("décodeur.𝛼", exact);
    assertEquals(exact, c.getLayerPolicy("décodeur.𝛼"));
  }

  @Test
  public void missingPeerTimesOut() throws Exception {
    comms = Comm.createLocal(2, 0.5);
    assertNull(comms[1].asyncError());
    QcException e = assertThrows(QcException.class, () -> comms[0].allreduce(new float[8]));
    assertSame(Status.TIMEOUT, e.getStatus());
    // rank 1 never called, yet learns that its group broke
    QcException late = comms[1].asyncError();
    assertNotNull(late);
    assertSame(Status.TIMEOUT, late.getStatus());
    assertTrue(late.getDetail(), late.getDetail().contains("qc_comm_get_async_error"));
    comms[1].close();
    assertThrows(IllegalStateException.class, () -> comms[1].asyncError());
  }

  @Test
  public void closedPeerGivesTransportError() throws Exception {
    comms = Comm.createLocal(2, 60.0);
    comms[1].close();
    QcException e = assertThrows(QcException.class,
        () -> comms[0].allreduce(direct(new float[8])));
    assertSame(Status.TRANSPORT, e.getStatus());
  }

  @Test
  public void manyCallsFromThreadsStayConsistent() throws Exception {
    Policy p = Policy.builder().codec(Codec.QSGD).bits(4).rounding(Rounding.STOCHASTIC)
        .seed(42).minCompressBytes(0).build();
    comms = Comm.createLocal(N);
    final int calls = 40;
    final int count = 999;
    List<int[]> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("q*", p);
      FloatBuffer x = direct(randomInput(c.rank(), count));
      FloatBuffer y = direct(new float[count]);
      int[] digest = new int[calls];
      for (int k = 0; k < calls; ++k) {
        c.allreduce(x, y, ReduceOp.AVG, k % 2 == 0 ? "q.weight" : "bias", null);
        digest[k] = java.util.Arrays.hashCode(bits(toArray(y)));
      }
      assertEquals(calls, c.stats().calls());
      assertEquals(calls / 2, c.layerStats("q.weight").calls());
      return digest;
    });
    for (int r = 1; r < N; ++r) {
      assertArrayEquals("replicas identical after every call", out.get(0), out.get(r));
    }
  }

  @Test
  public void adaptPoliciesAgreeOnEveryRank() throws Exception {
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(4).minCompressBytes(0).build();
    String[] layers = {"big", "mid", "small"};
    int[] sizes = {4000, 1000, 300};
    float[] scale = {1f, 10f, 0.1f};
    comms = Comm.createLocal(N);
    List<java.util.List<Object>> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", p);
      for (int it = 0; it < 2; ++it) {
        for (int l = 0; l < layers.length; ++l) {
          float[] x = randomInput(c.rank() + 10 * it, sizes[l]);
          for (int i = 0; i < x.length; ++i) {
            x[i] *= scale[l];
          }
          c.allreduce(x, new float[x.length], ReduceOp.SUM, layers[l], null);
        }
      }
      assertEquals(java.util.Arrays.asList(layers), c.layerNames());
      AdaptReport rep = c.adaptPolicies();
      assertEquals(rep.toString(), 3, rep.layers());
      assertTrue(rep.toString(), rep.predictedError() <= rep.errorBudget());
      assertTrue(rep.toString(), rep.predictedBytes() <= rep.bytesAt4());
      java.util.List<Object> res = new java.util.ArrayList<>();
      res.add(rep.predictedBytes());
      res.add(rep.predictedError());
      for (String l : layers) {
        int b = c.getLayerPolicy(l).bits();
        assertTrue(l + ": " + b, b == 2 || b == 3 || b == 4 || b == 8);
        res.add(b);
      }
      return res;
    });
    for (int r = 1; r < N; ++r) {
      assertEquals("rank " + r, out.get(0), out.get(r));
    }
  }

  @Test
  public void adaptPoliciesValidatesItsConfig() {
    comms = Comm.createLocal(1);
    QcException e = assertThrows(QcException.class,
        () -> comms[0].adaptPolicies(AdaptMethod.LINEAR, 0.5, 2, 4));
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("'alpha'"));
    e = assertThrows(QcException.class,
        () -> comms[0].adaptPolicies(AdaptMethod.LINEAR, 2.0, 2, 3, 4, 5, 6, 7, 8, 1, 2));
    assertTrue(e.getDetail(), e.getDetail().contains("'num_allowed'"));
    e = assertThrows(QcException.class, () -> comms[0].adaptPolicies(AdaptMethod.LINEAR, 2.0, 9));
    assertTrue(e.getDetail(), e.getDetail().contains("allowed_bits"));
  }

  @Test
  public void bfloat16ShortBuffers() throws Exception {
    comms = Comm.createLocal(2);
    List<float[]> out = Ranks.run(comms, c -> {
      float[] x = {1f + c.rank(), -2f, 0.5f * (c.rank() + 1)};
      java.nio.ShortBuffer s = ByteBuffer.allocateDirect(2 * x.length)
          .order(ByteOrder.nativeOrder()).asShortBuffer();
      for (float v : x) {
        s.put((short) (Float.floatToRawIntBits(v) >>> 16));
      }
      s.clear();
      c.allreduce(s, s, Dtype.BFLOAT16, ReduceOp.SUM, null, null);
      float[] y = new float[x.length];
      for (int i = 0; i < y.length; ++i) {
        y[i] = Float.intBitsToFloat((s.get(i) & 0xffff) << 16);
      }
      return y;
    });
    for (float[] y : out) {
      assertArrayEquals(new float[] {3f, -4f, 1.5f}, y, 0f);
    }
    java.nio.ShortBuffer s = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder())
        .asShortBuffer();
    assertThrows(IllegalArgumentException.class,
        () -> comms[0].allreduce(s, s, Dtype.FLOAT32, ReduceOp.SUM, null, null));
  }

  @Test
  public void fusedSegmentsKeepTheirPolicies() throws Exception {
    Policy q = Policy.builder().codec(Codec.MINMAX).bits(4).minCompressBytes(0).build();
    long[] counts = {5000, 301, 0, 700};
    String[] layers = {"enc.weight", "enc.bias", "empty", null};
    int total = 6001;
    comms = Comm.createLocal(N);
    float[][] inputs = new float[N][];
    for (int r = 0; r < N; ++r) {
      inputs[r] = randomInput(r, total);
      float[] ints = intInput(r, total);
      for (int i = 5000; i < total; ++i) {
        inputs[r][i] = ints[i]; // integers: the uncompressed bias segment sums exactly
      }
    }
    List<float[]> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", q);
      c.setLayerPolicy("*bias*", Policy.defaults());
      FloatBuffer buf = direct(inputs[c.rank()]);
      c.allreduceSegments(buf, buf, counts, layers, ReduceOp.SUM, null);
      assertEquals(1, c.layerStats("enc.weight").calls());
      assertEquals(1, c.layerStats("enc.bias").calls());
      return toArray(buf);
    });
    float[] exact = new float[total];
    for (float[] x : inputs) {
      for (int i = 0; i < total; ++i) {
        exact[i] += x[i];
      }
    }
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("replica " + r, bits(out.get(0)), bits(out.get(r)));
    }
    float[] y = out.get(0);
    for (int i = 5000; i < 5301; ++i) {
      assertEquals("bias segment is uncompressed: exact", exact[i], y[i], 0f);
    }
    boolean differs = false;
    for (int i = 0; i < 5000; ++i) {
      assertEquals(exact[i], y[i], 1.0f);
      differs |= exact[i] != y[i];
    }
    assertTrue("weight segment is compressed", differs);
  }

  @Test
  public void segmentsThatDisagreeGiveMismatch() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    List<Ranks.Outcome<Void>> out = Ranks.runAll(comms, c -> {
      long[] counts = c.rank() == 1 ? new long[] {60, 40} : new long[] {50, 50};
      c.allreduceSegments(direct(new float[100]), direct(new float[100]), counts, null,
          ReduceOp.SUM, null);
      return null;
    });
    for (int r = 0; r < N; ++r) {
      Throwable t = out.get(r).error;
      assertTrue("rank " + r + ": " + t, t instanceof QcException);
      assertSame(Status.MISMATCH, ((QcException) t).getStatus());
    }
    assertThrows(IllegalArgumentException.class, () -> comms[0].allreduceSegments(
        direct(new float[10]), direct(new float[10]), new long[] {4, 5}, null, ReduceOp.SUM,
        null));
  }
}
