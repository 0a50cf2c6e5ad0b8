package org.qc;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.After;
import org.junit.Test;

/**
 * Reduce-scatter, allgather and broadcast: Comm.reduceScatter, allgather, broadcast,
 * their non-blocking forms and Qc.emulate*, over local groups whose ranks run on threads.
 */
public class ShardedTest {
  private static final int N = 3;        // ranks: odd on purpose
  private static final int BLOCK = 1001; // elements of one rank's block: odd

  private Comm[] comms;

  @After
  public void tearDown() {
    Ranks.closeAll(comms);
  }

  private static FloatBuffer direct(float[] x) {
    return CommTest.direct(x);
  }

  private static int[] bits(float[] x) {
    return CommTest.bits(x);
  }

  /** Elements [from, from + n) of b as a slice: the same memory. */
  private static FloatBuffer slice(FloatBuffer b, int from, int n) {
    FloatBuffer d = b.duplicate();
    d.position(from).limit(from + n);
    return d.slice();
  }

  private static float[][] randomRows(int nranks, int length, int seed) {
    float[][] rows = new float[nranks][];
    for (int r = 0; r < nranks; ++r) {
      rows[r] = CommTest.randomInput(seed + r, length);
    }
    return rows;
  }

  private static Policy.Builder compressed(int bits) {
    return Policy.builder().codec(Codec.MINMAX).bits(bits).bucketSize(64).minCompressBytes(0);
  }

  private static void assertFailedEverywhere(List<Ranks.Outcome<Void>> out, Status status,
      String detail) {
    for (int r = 0; r < out.size(); ++r) {
      Throwable t = out.get(r).error;
      assertTrue("rank " + r + ": " + t, t instanceof QcException);
      QcException e = (QcException) t;
      assertSame("rank " + r + ": " + e, status, e.getStatus());
      assertTrue("rank " + r + ": " + e.getDetail(), e.getDetail().contains(detail));
    }
  }

  // ---- codec none: exact results, every overload ----------------------------

  @Test
  public void reduceScatterNoneIsTheExactSumOfEachBlock() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    float[][] inputs = new float[N][];
    for (int r = 0; r < N; ++r) {
      inputs[r] = CommTest.intInput(r, N * BLOCK); // integers: every float sum is exact
    }
    // rank 0: direct buffers; rank 1: in place (its own block of sendbuf); rank 2: float[]
    List<float[]> out = Ranks.run(comms, c -> {
      int r = c.rank();
      if (r == 0) {
        FloatBuffer y = direct(new float[BLOCK]);
        c.reduceScatter(direct(inputs[r]), y);
        return CommTest.toArray(y);
      } else if (r == 1) {
        FloatBuffer x = direct(inputs[r]);
        FloatBuffer mine = slice(x, r * BLOCK, BLOCK);
        c.reduceScatter(x, mine);
        assertEquals("position unchanged", 0, x.position());
        return CommTest.toArray(mine);
      }
      float[] y = new float[BLOCK];
      c.reduceScatter(inputs[r], y);
      return y;
    });
    for (int r = 0; r < N; ++r) {
      float[] expected = new float[BLOCK];
      for (float[] x : inputs) {
        for (int i = 0; i < BLOCK; ++i) {
          expected[i] += x[r * BLOCK + i];
        }
      }
      assertArrayEquals("rank " + r + " gets the sum of block " + r, expected, out.get(r), 0f);
    }
  }

  @Test
  public void reduceScatterAvg() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    List<float[]> out = Ranks.run(comms, c -> {
      float[] x = new float[2 * N];
      for (int i = 0; i < x.length; ++i) {
        x[i] = 3f * (c.rank() + 1) + i; // mean over ranks: 6 + i
      }
      float[] y = new float[2];
      c.reduceScatter(x, y, ReduceOp.AVG, null, null);
      return y;
    });
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r, new float[] {6f + 2 * r, 7f + 2 * r}, out.get(r), 1e-6f);
    }
  }

  @Test
  public void allgatherNoneIsTheConcatenation() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    float[][] inputs = randomRows(N, BLOCK, 20);
    // rank 0: direct buffers; rank 1: in place (sendbuf is its block of recvbuf); rank 2: float[]
    List<float[]> out = Ranks.run(comms, c -> {
      int r = c.rank();
      if (r == 0) {
        FloatBuffer y = direct(new float[N * BLOCK]);
        c.allgather(direct(inputs[r]), y);
        return CommTest.toArray(y);
      } else if (r == 1) {
        FloatBuffer y = direct(new float[N * BLOCK]);
        FloatBuffer mine = slice(y, r * BLOCK, BLOCK);
        mine.put(inputs[r]).clear();
        c.allgather(mine, y);
        return CommTest.toArray(y);
      }
      float[] y = new float[N * BLOCK];
      c.allgather(inputs[r], y);
      return y;
    });
    float[] expected = new float[N * BLOCK];
    for (int r = 0; r < N; ++r) {
      System.arraycopy(inputs[r], 0, expected, r * BLOCK, BLOCK);
    }
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r, bits(expected), bits(out.get(r)));
    }
  }

  @Test
  public void broadcastNoneIsTheRootsCopy() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    float[] x = CommTest.randomInput(30, BLOCK);
    // root 1 in place; rank 0: direct buffer, no sendbuf; rank 2: float[], no sendbuf
    List<float[]> out = Ranks.run(comms, c -> {
      int root = 1;
      if (c.rank() == root) {
        FloatBuffer buf = direct(x);
        c.broadcast(buf, root);
        return CommTest.toArray(buf);
      } else if (c.rank() == 0) {
        FloatBuffer y = direct(new float[BLOCK]);
        c.broadcast(null, y, root, null);
        return CommTest.toArray(y);
      }
      float[] y = new float[BLOCK];
      c.broadcast(null, y, root, null);
      return y;
    });
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r, bits(x), bits(out.get(r)));
    }
    // float[] in place from root 2: the other ranks' arrays are overwritten, not read
    out = Ranks.run(comms, c -> {
      float[] data = c.rank() == 2 ? x.clone() : CommTest.randomInput(40 + c.rank(), BLOCK);
      c.broadcast(data, 2);
      return data;
    });
    for (int r = 0; r < N; ++r) {
      assertArrayEquals("rank " + r + ", root 2", bits(x), bits(out.get(r)));
    }
  }

  // ---- compressed: identical replicas, equal to the emulation ----------------

  @Test
  public void compressedAllgatherReplicasAreIdenticalAndEmulated() throws Exception {
    for (int n : new int[] {3, 4}) {
      for (Algorithm algo : new Algorithm[] {Algorithm.AUTO, Algorithm.RING,
          Algorithm.RECURSIVE_DOUBLING}) {
        String what = n + " ranks, " + algo;
        Policy p = compressed(4).algorithm(algo).build();
        float[][] inputs = randomRows(n, BLOCK, 50);
        Comm[] group = Comm.createLocal(n, 60.0);
        List<float[]> out;
        try {
          out = Ranks.run(group, c -> {
            c.setLayerPolicy("*", p);
            float[] y = new float[n * BLOCK];
            c.allgather(inputs[c.rank()], y);
            return y;
          });
        } finally {
          Ranks.closeAll(group);
        }
        float[][] emulated = Qc.emulateAllgather(inputs, p);
        for (int r = 0; r < n; ++r) {
          assertArrayEquals(what + ": replica " + r, bits(out.get(0)), bits(out.get(r)));
          assertArrayEquals(what + ": rank " + r + " = emulation", bits(emulated[r]),
              bits(out.get(r)));
        }
        float[] y = out.get(0);
        boolean differs = false;
        for (int r = 0; r < n; ++r) {
          for (int i = 0; i < BLOCK; ++i) {
            assertEquals(what, inputs[r][i], y[r * BLOCK + i], 0.5f);
            differs |= inputs[r][i] != y[r * BLOCK + i];
          }
        }
        assertTrue(what + ": 4-bit blocks differ from the inputs", differs);
      }
    }
  }

  @Test
  public void compressedBroadcastReplicasAreIdenticalAndEmulated() throws Exception {
    int count = 40009; // 160 KB: the chain runs in several pieces
    for (Algorithm algo : new Algorithm[] {Algorithm.AUTO, Algorithm.TREE, Algorithm.RING}) {
      Policy p = compressed(4).algorithm(algo).build();
      float[] x = CommTest.randomInput(60, count);
      int root = N - 1;
      Comm[] group = Comm.createLocal(N, 60.0);
      List<float[]> out;
      try {
        out = Ranks.run(group, c -> {
          c.setLayerPolicy("*", p);
          FloatBuffer y = direct(new float[count]);
          c.broadcast(c.rank() == root ? direct(x) : null, y, root, "params");
          return CommTest.toArray(y);
        });
      } finally {
        Ranks.closeAll(group);
      }
      float[][] sendbufs = new float[N][];
      sendbufs[root] = x; // the others are not read: null
      float[][] emulated = Qc.emulateBroadcast(sendbufs, root, p);
      for (int r = 0; r < N; ++r) {
        assertArrayEquals(algo + ": replica " + r, bits(out.get(0)), bits(out.get(r)));
        assertArrayEquals(algo + ": rank " + r + " = emulation", bits(emulated[r]),
            bits(out.get(r)));
      }
      assertFalse(algo + ": the root gets the decoded values, not its input",
          Arrays.equals(bits(x), bits(out.get(root))));
      assertArrayEquals(x, out.get(root), 0.5f);
    }
  }

  @Test
  public void reduceScatterWithErrorFeedbackMatchesEmulationBitForBit() throws Exception {
    for (Algorithm algo : new Algorithm[] {Algorithm.AUTO, Algorithm.RING}) {
      Policy p = compressed(2).algorithm(algo).errorFeedback(true).build();
      float[][] inputs = randomRows(N, N * BLOCK, 70);
      Comm[] group = Comm.createLocal(N, 60.0);
      List<Object[]> out;
      try {
        out = Ranks.run(group, c -> {
          c.setLayerPolicy("*", p);
          try (ErrorBuffer eb = ErrorBuffer.create(c, N * BLOCK)) {
            FloatBuffer y = direct(new float[BLOCK]);
            c.reduceScatter(direct(inputs[c.rank()]), y, ReduceOp.SUM, "grad", eb);
            return new Object[] {CommTest.toArray(y), eb.save(), eb.norm()};
          }
        });
      } finally {
        Ranks.closeAll(group);
      }
      ErrorBuffer[] ebs = new ErrorBuffer[N];
      try {
        for (int r = 0; r < N; ++r) {
          ebs[r] = ErrorBuffer.create(null, N * BLOCK);
        }
        float[][] emulated = Qc.emulateReduceScatter(inputs, ReduceOp.SUM, p, ebs, "grad", 0);
        for (int r = 0; r < N; ++r) {
          Object[] got = out.get(r);
          assertArrayEquals(algo + ": rank " + r + " = emulation", bits(emulated[r]),
              bits((float[]) got[0]));
          assertTrue(algo + ": residuals kept", (Double) got[2] > 0);
          assertArrayEquals(algo + ": rank " + r + " residuals = emulation's", ebs[r].save(),
              (byte[]) got[1]);
        }
        float[] exact = new float[BLOCK];
        for (float[] x : inputs) {
          for (int i = 0; i < BLOCK; ++i) {
            exact[i] += x[i];
          }
        }
        assertFalse(algo + ": 2-bit sum differs from the exact one",
            Arrays.equals(bits(exact), bits(emulated[0])));
      } finally {
        for (ErrorBuffer eb : ebs) {
          if (eb != null) {
            eb.close();
          }
        }
      }
    }
  }

  @Test
  public void emulationReproducesALaterCallOfEachCollective() throws Exception {
    Policy p = compressed(2).rounding(Rounding.STOCHASTIC).seed(11).build();
    int root = 0;
    float[][] rsIn = randomRows(N, N * BLOCK, 80);
    float[][] agIn = randomRows(N, BLOCK, 90);
    float[][] bcIn = new float[N][];
    bcIn[root] = CommTest.randomInput(99, BLOCK);
    comms = Comm.createLocal(N, 60.0);
    // Each layer three times, with calls of layer "other" in between: the third is
    // call index 2 of its layer, whatever "other" did.
    List<float[][]> out = Ranks.run(comms, c -> {
      c.setLayerPolicy("*", p);
      int r = c.rank();
      float[] rs = new float[BLOCK];
      float[] ag = new float[N * BLOCK];
      float[] bc = new float[BLOCK];
      for (int call = 0; call < 3; ++call) {
        c.allreduce(agIn[r], new float[BLOCK], ReduceOp.SUM, "other", null);
        c.reduceScatter(rsIn[r], rs, ReduceOp.SUM, "rs", null);
        c.allgather(agIn[r], ag, "ag", null);
        c.broadcast(bcIn[r], bc, root, "bc");
      }
      return new float[][] {rs, ag, bc};
    });
    float[][][] third = {
        Qc.emulateReduceScatter(rsIn, ReduceOp.SUM, p, null, "rs", 2),
        Qc.emulateAllgather(agIn, p, null, "ag", 2),
        Qc.emulateBroadcast(bcIn, root, p, "bc", 2)};
    float[][][] first = {
        Qc.emulateReduceScatter(rsIn, ReduceOp.SUM, p, null, "rs", 0),
        Qc.emulateAllgather(agIn, p, null, "ag", 0),
        Qc.emulateBroadcast(bcIn, root, p, "bc", 0)};
    String[] names = {"reduceScatter", "allgather", "broadcast"};
    for (int k = 0; k < names.length; ++k) {
      for (int r = 0; r < N; ++r) {
        assertArrayEquals(names[k] + ", rank " + r + " = emulated call 2", bits(third[k][r]),
            bits(out.get(r)[k]));
      }
      assertFalse(names[k] + ": call 0 draws other bits",
          Arrays.equals(bits(first[k][0]), bits(out.get(0)[k])));
    }
  }

  // ---- non-blocking == blocking ----------------------------------------------

  /** The buffers of one rank's round: six calls, two of each collective. */
  private static final class Round {
    final FloatBuffer rs, rsOut, rsInPlace, ag, agOut, agInPlace, bc, bcOut;
    final int root;

    Round(int rank, int round, int nranks) {
      int seed = 1000 * round + 10 * rank;
      root = round % nranks;
      rs = direct(CommTest.randomInput(seed, nranks * BLOCK));
      rsOut = direct(new float[BLOCK]);
      rsInPlace = direct(CommTest.randomInput(seed + 1, nranks * BLOCK));
      ag = direct(CommTest.randomInput(seed + 2, BLOCK));
      agOut = direct(new float[nranks * BLOCK]);
      agInPlace = direct(new float[nranks * BLOCK]);
      slice(agInPlace, rank * BLOCK, BLOCK).put(CommTest.randomInput(seed + 3, BLOCK));
      bc = direct(CommTest.randomInput(seed + 4, BLOCK)); // in place
      bcOut = direct(new float[BLOCK]);
    }

    FloatBuffer rsMine(int rank) {
      return slice(rsInPlace, rank * BLOCK, BLOCK);
    }

    FloatBuffer agMine(int rank) {
      return slice(agInPlace, rank * BLOCK, BLOCK);
    }

    /** The outputs, as raw bits, in call order. */
    List<int[]> results(int rank) {
      List<int[]> out = new ArrayList<>();
      for (FloatBuffer b : new FloatBuffer[] {rsOut, rsMine(rank), agOut, agInPlace, bc,
          bcOut}) {
        out.add(bits(CommTest.toArray(b)));
      }
      return out;
    }
  }

  private static void setPolicies(Comm c) {
    c.setLayerPolicy("*", compressed(4).build());
    c.setLayerPolicy("rs", Policy.builder().codec(Codec.ONEBIT).bucketSize(128)
        .errorFeedback(true).minCompressBytes(0).build());
    c.setLayerPolicy("ag", Policy.builder().codec(Codec.QSGD).bits(8).algorithm(Algorithm.RING)
        .errorFeedback(true).minCompressBytes(0).build());
    c.setLayerPolicy("bc", compressed(2).algorithm(Algorithm.TREE).build());
  }

  /** What one rank ends with: every output and each error buffer's image. */
  private static List<Object> runRounds(Comm c, int rounds, boolean nonblocking) {
    int rank = c.rank();
    int n = c.size();
    List<Round> bufs = new ArrayList<>();
    for (int k = 0; k < rounds; ++k) {
      bufs.add(new Round(rank, k, n));
    }
    List<Object> out = new ArrayList<>();
    try (ErrorBuffer rsEb = ErrorBuffer.create(c, n * BLOCK);
        ErrorBuffer agEb = ErrorBuffer.create(c, BLOCK)) {
      List<Request> reqs = new ArrayList<>();
      for (Round b : bufs) {
        int root = b.root;
        FloatBuffer bcSend = rank == root ? b.bc : null;
        if (!nonblocking) {
          c.reduceScatter(b.rs, b.rsOut, ReduceOp.AVG, "rs", rsEb);
          c.reduceScatter(b.rsInPlace, b.rsMine(rank));
          c.allgather(b.ag, b.agOut, "ag", agEb);
          c.allgather(b.agMine(rank), b.agInPlace);
          c.broadcast(b.bc, root);
          c.broadcast(bcSend, b.bcOut, root, "bc");
          continue;
        }
        if (!reqs.isEmpty()) { // an error buffer serves one outstanding request
          reqs.get(reqs.size() - 6).waitFor();
          reqs.get(reqs.size() - 4).waitFor();
        }
        reqs.add(c.ireduceScatter(b.rs, b.rsOut, ReduceOp.AVG, "rs", rsEb));
        reqs.add(c.ireduceScatter(b.rsInPlace, b.rsMine(rank)));
        reqs.add(c.iallgather(b.ag, b.agOut, "ag", agEb));
        reqs.add(c.iallgather(b.agMine(rank), b.agInPlace));
        reqs.add(c.ibroadcast(b.bc, root));
        reqs.add(c.ibroadcast(bcSend, b.bcOut, root, "bc"));
      }
      for (Request r : reqs) {
        r.waitFor();
        assertTrue("done after waitFor", r.test());
        r.close();
      }
      for (Round b : bufs) {
        out.addAll(b.results(rank));
      }
      out.add(rsEb.save());
      out.add(agEb.save());
    }
    return out;
  }

  @Test
  public void outstandingRequestsGiveTheBlockingBits() throws Exception {
    for (int n : new int[] {1, 3}) {
      List<List<Object>> want;
      List<List<Object>> got;
      Comm[] group = Comm.createLocal(n, 60.0);
      try {
        want = Ranks.run(group, c -> {
          setPolicies(c);
          return runRounds(c, 2, false);
        });
      } finally {
        Ranks.closeAll(group);
      }
      group = Comm.createLocal(n, 60.0);
      try {
        got = Ranks.run(group, c -> {
          setPolicies(c);
          return runRounds(c, 2, true);
        });
      } finally {
        Ranks.closeAll(group);
      }
      for (int r = 0; r < n; ++r) {
        List<Object> w = want.get(r);
        List<Object> g = got.get(r);
        assertEquals(2 * 6 + 2, w.size());
        assertEquals(w.size(), g.size());
        for (int i = 0; i < w.size(); ++i) {
          String what = n + " ranks, rank " + r + ", result " + i;
          if (w.get(i) instanceof int[]) {
            assertArrayEquals(what, (int[]) w.get(i), (int[]) g.get(i));
          } else {
            assertArrayEquals(what, (byte[]) w.get(i), (byte[]) g.get(i));
          }
        }
      }
    }
  }

  // ---- bad inputs ------------------------------------------------------------

  @Test
  public void wrongBufferSizesThrowBeforeAnythingStarts() throws Exception {
    comms = Comm.createLocal(2, 30.0);
    Comm c = comms[0];
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> c.reduceScatter(direct(new float[7]), direct(new float[4])));
    assertTrue(e.getMessage(), e.getMessage().contains("reduceScatter needs a multiple of size() = 2"));
    e = assertThrows(IllegalArgumentException.class,
        () -> c.reduceScatter(new float[7], new float[4]));
    assertTrue(e.getMessage(), e.getMessage().contains("multiple"));
    e = assertThrows(IllegalArgumentException.class,
        () -> c.ireduceScatter(direct(new float[7]), direct(new float[4])));
    assertTrue(e.getMessage(), e.getMessage().contains("multiple"));
    e = assertThrows(IllegalArgumentException.class,
        () -> c.reduceScatter(direct(new float[8]), direct(new float[3])));
    assertTrue(e.getMessage(), e.getMessage().contains("room for 3 elements, reduceScatter writes 4"));
    assertThrows(IllegalArgumentException.class, () -> c.reduceScatter(new float[8], new float[3]));
    assertThrows(IllegalArgumentException.class,
        () -> c.ireduceScatter(direct(new float[8]), direct(new float[3])));

    e = assertThrows(IllegalArgumentException.class,
        () -> c.allgather(direct(new float[4]), direct(new float[7])));
    assertTrue(e.getMessage(), e.getMessage().contains("room for 7 elements, allgather writes 8"));
    assertThrows(IllegalArgumentException.class, () -> c.allgather(new float[4], new float[7]));
    assertThrows(IllegalArgumentException.class,
        () -> c.iallgather(direct(new float[4]), direct(new float[7])));

    // rank 0 is the root: its sendbuf must hold recvbuf's count
    e = assertThrows(IllegalArgumentException.class,
        () -> c.broadcast(direct(new float[5]), direct(new float[4]), 0, null));
    assertTrue(e.getMessage(), e.getMessage().contains("'sendbuf' has 5 elements on the root"));
    assertThrows(IllegalArgumentException.class,
        () -> c.broadcast(new float[5], new float[4], 0, null));
    assertThrows(IllegalArgumentException.class,
        () -> c.ibroadcast(direct(new float[5]), direct(new float[4]), 0, null));
    assertThrows(NullPointerException.class, () -> c.broadcast(null, new float[4], 0, null));
    assertThrows(NullPointerException.class,
        () -> c.broadcast(null, direct(new float[4]), 0, null));

    // heap, read-only, null
    e = assertThrows(IllegalArgumentException.class,
        () -> c.reduceScatter(FloatBuffer.allocate(8), direct(new float[4])));
    assertTrue(e.getMessage(), e.getMessage().contains("direct"));
    assertThrows(IllegalArgumentException.class,
        () -> c.allgather(direct(new float[4]), direct(new float[8]).asReadOnlyBuffer()));
    assertThrows(IllegalArgumentException.class,
        () -> c.broadcast(FloatBuffer.allocate(4), 0));
    assertThrows(NullPointerException.class,
        () -> c.reduceScatter(direct(new float[8]), direct(new float[4]), null, null, null));
    assertThrows(NullPointerException.class, () -> c.allgather(null, direct(new float[8])));

    // nothing started: the group still works
    List<float[]> out = Ranks.run(comms, k -> {
      float[] y = new float[2];
      k.reduceScatter(new float[] {1f, 2f, 3f, 4f}, y);
      return y;
    });
    assertArrayEquals(new float[] {2f, 4f}, out.get(0), 0f);
    assertArrayEquals(new float[] {6f, 8f}, out.get(1), 0f);
  }

  @Test
  public void rootOutOfRangeThrowsTheLibrarysMessage() throws Exception {
    comms = Comm.createLocal(2, 30.0);
    QcException e = assertThrows(QcException.class,
        () -> comms[0].broadcast(direct(new float[4]), direct(new float[4]), 2, null));
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("argument 'root' is 2; expected 0..1"));
    e = assertThrows(QcException.class, () -> comms[1].broadcast(new float[4], -1));
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("argument 'root' is -1"));
    e = assertThrows(QcException.class, () -> comms[0].ibroadcast(direct(new float[4]), 3));
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("argument 'root' is 3"));
    e = assertThrows(QcException.class,
        () -> Qc.emulateBroadcast(new float[][] {{1f}, {2f}}, 5, Policy.defaults()));
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("argument 'root' is 5"));
    // nothing started: the group still works
    List<float[]> out = Ranks.run(comms, c -> {
      float[] data = {c.rank() + 1f};
      c.broadcast(data, 1);
      return data;
    });
    assertArrayEquals(new float[] {2f}, out.get(0), 0f);
  }

  @Test
  public void anErrorBufferOfAnotherCountIsAMismatch() throws Exception {
    Policy p = compressed(4).errorFeedback(true).build();
    comms = Comm.createLocal(2, 30.0);
    List<Ranks.Outcome<Void>> out = Ranks.runAll(comms, c -> {
      c.setLayerPolicy("*", p);
      try (ErrorBuffer eb = ErrorBuffer.create(c, BLOCK)) { // needs 2 * BLOCK
        c.reduceScatter(direct(new float[2 * BLOCK]), direct(new float[BLOCK]), ReduceOp.SUM,
            null, eb);
      }
      return null;
    });
    assertFailedEverywhere(out, Status.MISMATCH,
        "holds " + BLOCK + " residuals but the call reduces " + 2 * BLOCK + " elements");
    Ranks.closeAll(comms);

    comms = Comm.createLocal(2, 30.0);
    out = Ranks.runAll(comms, c -> {
      c.setLayerPolicy("*", p);
      try (ErrorBuffer eb = ErrorBuffer.create(c, BLOCK + 1)) { // needs BLOCK
        c.allgather(direct(new float[BLOCK]), direct(new float[2 * BLOCK]), null, eb);
      }
      return null;
    });
    assertFailedEverywhere(out, Status.MISMATCH, "error_buffer");
  }

  @Test
  public void ranksThatDisagreeAllGetMismatch() throws Exception {
    comms = Comm.createLocal(N, 60.0);
    // rank 2 names another root: every rank fails, none waits
    List<Ranks.Outcome<Void>> out = Ranks.runAll(comms, c -> {
      c.broadcast(new float[8], c.rank() == 2 ? 1 : 0);
      return null;
    });
    assertFailedEverywhere(out, Status.MISMATCH, "disagree");
    Ranks.closeAll(comms);

    comms = Comm.createLocal(N, 60.0);
    out = Ranks.runAll(comms, c -> {
      int recvcount = c.rank() == 0 ? 16 : 17;
      c.reduceScatter(new float[N * recvcount], new float[recvcount]);
      return null;
    });
    assertFailedEverywhere(out, Status.MISMATCH, "disagree");
  }

  @Test
  public void emulateChecksItsInputs() {
    Policy p = Policy.defaults();
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateReduceScatter(new float[][] {{1f, 2f, 3f}, {4f, 5f, 6f}}, p));
    assertTrue(e.getMessage(), e.getMessage().contains("emulateReduceScatter needs a multiple"));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateAllgather(new float[][] {{1f}, {1f, 2f}}, p));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateAllgather(new float[][] {{1f}, null}, p));
    assertThrows(IllegalArgumentException.class, () -> Qc.emulateAllgather(new float[][] {{1f},
        {2f}}, p, new ErrorBuffer[1], null, 0));
    assertThrows(IllegalArgumentException.class, () -> Qc.emulateReduceScatter(
        new float[][] {{1f, 2f}, {3f, 4f}}, ReduceOp.SUM, p, null, null, -1));
    e = assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateBroadcast(new float[][] {{1f}, null}, 1, p));
    assertTrue(e.getMessage(), e.getMessage().contains("sendbufs[1] is null"));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateBroadcast(new float[][] {{1f, 2f}, {3f}}, 0, p));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateBroadcast(new float[][] {null, null}, 7, p));

    // codec none: exact, with the sizes of each collective
    float[][] rs = Qc.emulateReduceScatter(new float[][] {{1f, 2f, 3f, 4f}, {10f, 20f, 30f,
        40f}}, p);
    assertArrayEquals(new float[] {11f, 22f}, rs[0], 0f);
    assertArrayEquals(new float[] {33f, 44f}, rs[1], 0f);
    float[][] ag = Qc.emulateAllgather(new float[][] {{1f, 2f}, {3f, 4f}}, p);
    for (float[] row : ag) {
      assertArrayEquals(new float[] {1f, 2f, 3f, 4f}, row, 0f);
    }
    float[][] bc = Qc.emulateBroadcast(new float[][] {null, {5f, 6f, 7f}, null}, 1, p);
    assertEquals(3, bc.length);
    for (float[] row : bc) {
      assertArrayEquals(new float[] {5f, 6f, 7f}, row, 0f);
    }
  }

  @Test
  public void closedCommThrowsIllegalState() {
    comms = Comm.createLocal(1);
    Comm c = comms[0];
    c.close();
    FloatBuffer x = direct(new float[2]);
    assertThrows(IllegalStateException.class, () -> c.reduceScatter(x, direct(new float[2])));
    assertThrows(IllegalStateException.class, () -> c.reduceScatter(new float[2], new float[2]));
    assertThrows(IllegalStateException.class, () -> c.allgather(x, direct(new float[2])));
    assertThrows(IllegalStateException.class, () -> c.allgather(new float[2], new float[2]));
    assertThrows(IllegalStateException.class, () -> c.broadcast(x, 0));
    assertThrows(IllegalStateException.class, () -> c.broadcast(new float[2], 0));
    assertThrows(IllegalStateException.class, () -> c.ireduceScatter(x, direct(new float[2])));
    assertThrows(IllegalStateException.class, () -> c.iallgather(x, direct(new float[2])));
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> c.ibroadcast(x, 0));
    assertNotNull(e.getMessage());
    assertTrue(e.getMessage(), e.getMessage().contains("closed"));
  }
}
