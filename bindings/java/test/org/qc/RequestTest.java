package org.qc;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.ShortBuffer;
import java.util.ArrayList;
import java.util.List;
import org.junit.After;
import org.junit.Test;

/**
 * Non-blocking collectives: Comm.iallreduce, iallreduceSegments, ialltoall and
 * Request, over local groups whose ranks are driven by threads (or, where a test
 * only starts requests, by one thread: the progress threads run them).
 */
public class RequestTest {
  private static final int COUNT = 3000;
  private static final long[] SEGMENTS = {1000, 500, 1500};
  private static final String[] SEGMENT_LAYERS = {"w", "b", null};
  private static final int ROUNDS = 2;

  private Comm[] comms;

  @After
  public void tearDown() {
    Ranks.closeAll(comms);
  }

  /** One policy per layer name, so the outstanding requests mix codecs and algorithms. */
  private static void setPolicies(Comm c) {
    c.setLayerPolicy("*", Policy.builder().codec(Codec.MINMAX).bits(4).bucketSize(64)
        .minCompressBytes(0).build());
    c.setLayerPolicy("w", Policy.builder().codec(Codec.ONEBIT).bucketSize(128)
        .errorFeedback(true).minCompressBytes(0).build());
    c.setLayerPolicy("b", Policy.builder().codec(Codec.NONE).build());
    c.setLayerPolicy("q8", Policy.builder().codec(Codec.QSGD).bits(8).algorithm(Algorithm.RING)
        .minCompressBytes(0).build());
  }

  /** The buffers of one rank's rounds. */
  private static List<Round> inputs(int rank, int nranks) {
    List<Round> rounds = new ArrayList<>();
    for (int k = 0; k < ROUNDS; ++k) {
      rounds.add(new Round(rank, k, nranks));
    }
    return rounds;
  }

  /** A round's buffers: five float calls and one bfloat16 call, inputs and outputs. */
  private static final class Round {
    final FloatBuffer x0, x1, x2, x3, x4;
    final FloatBuffer y0, y1, y3; // x2 and x4 are reduced in place
    final ShortBuffer h5;         // bfloat16, in place

    Round(int rank, int round, int nranks) {
      int seed = 100 * round + rank;
      x0 = CommTest.direct(CommTest.randomInput(seed, COUNT));
      x1 = CommTest.direct(CommTest.randomInput(seed + 7, COUNT));
      x2 = CommTest.direct(CommTest.randomInput(seed + 11, COUNT));
      x3 = CommTest.direct(CommTest.randomInput(seed + 13, COUNT - COUNT % nranks));
      x4 = CommTest.direct(CommTest.randomInput(seed + 17, COUNT));
      y0 = CommTest.direct(new float[COUNT]);
      y1 = CommTest.direct(new float[COUNT]);
      y3 = CommTest.direct(new float[x3.remaining()]);
      h5 = bfloat16(CommTest.randomInput(seed + 19, COUNT));
    }

    /** The outputs, as raw bits, in call order. */
    int[][] results() {
      return new int[][] {CommTest.bits(CommTest.toArray(y0)), CommTest.bits(CommTest.toArray(y1)),
          CommTest.bits(CommTest.toArray(x2)), CommTest.bits(CommTest.toArray(y3)),
          CommTest.bits(CommTest.toArray(x4)), shorts(h5)};
    }
  }

  static ShortBuffer bfloat16(float[] x) {
    ShortBuffer b = ByteBuffer.allocateDirect(2 * x.length).order(ByteOrder.nativeOrder())
        .asShortBuffer();
    for (float v : x) {
      b.put((short) (Float.floatToRawIntBits(v) >>> 16));
    }
    b.clear();
    return b;
  }

  static int[] shorts(ShortBuffer b) {
    int[] out = new int[b.remaining()];
    for (int i = 0; i < out.length; ++i) {
      out[i] = b.get(b.position() + i);
    }
    return out;
  }

  /** What one rank ends with: every output and each error buffer's image. */
  private static final class RankResult {
    final List<int[]> outputs = new ArrayList<>();
    final List<byte[]> residuals = new ArrayList<>();
  }

  private static RankResult blocking(Comm c, List<Round> rounds) {
    RankResult out = new RankResult();
    try (ErrorBuffer eb0 = ErrorBuffer.create(c, COUNT);
        ErrorBuffer eb1 = ErrorBuffer.create(c, COUNT)) {
      for (Round b : rounds) {
        c.allreduce(b.x0, b.y0);
        c.allreduce(b.x1, b.y1, ReduceOp.AVG, "q8", null);
        c.allreduceSegments(b.x2, b.x2, SEGMENTS, SEGMENT_LAYERS, ReduceOp.SUM, eb0);
        c.alltoall(b.x3, b.y3, null);
        c.allreduce(b.x4, b.x4, ReduceOp.SUM, "w", eb1);
        c.allreduce(b.h5, b.h5, Dtype.BFLOAT16, ReduceOp.SUM, "w16", null);
      }
      for (Round b : rounds) {
        out.outputs.addAll(java.util.Arrays.asList(b.results()));
      }
      out.residuals.add(eb0.save());
      out.residuals.add(eb1.save());
    }
    return out;
  }

  /**
   * The calls of {@link #blocking}, every one outstanding at once, except that an
   * error buffer's second request starts once its first is done (a buffer serves
   * one outstanding request).
   */
  private static RankResult nonblocking(Comm c, List<Round> rounds) {
    RankResult out = new RankResult();
    try (ErrorBuffer eb0 = ErrorBuffer.create(c, COUNT);
        ErrorBuffer eb1 = ErrorBuffer.create(c, COUNT)) {
      List<Request> reqs = new ArrayList<>();
      for (Round b : rounds) {
        if (!reqs.isEmpty()) {
          reqs.get(2).waitFor();
          reqs.get(4).waitFor();
        }
        reqs.add(c.iallreduce(b.x0, b.y0));
        reqs.add(c.iallreduce(b.x1, b.y1, ReduceOp.AVG, "q8", null));
        reqs.add(c.iallreduceSegments(b.x2, b.x2, SEGMENTS, SEGMENT_LAYERS, ReduceOp.SUM, eb0));
        reqs.add(c.ialltoall(b.x3, b.y3, null));
        reqs.add(c.iallreduce(b.x4, b.x4, ReduceOp.SUM, "w", eb1));
        reqs.add(c.iallreduce(b.h5, b.h5, Dtype.BFLOAT16, ReduceOp.SUM, "w16", null));
      }
      Request last = reqs.get(reqs.size() - 1);
      while (!last.test()) {
        Thread.yield(); // test() never blocks; the progress thread runs the requests
      }
      for (Request r : reqs) {
        r.waitFor();
        assertTrue("done after waitFor", r.test());
        r.close();
      }
      for (Round b : rounds) {
        out.outputs.addAll(java.util.Arrays.asList(b.results()));
      }
      out.residuals.add(eb0.save());
      out.residuals.add(eb1.save());
    }
    return out;
  }

  private static List<RankResult> runGroup(int nranks, boolean nonblocking) throws Exception {
    Comm[] group = Comm.createLocal(nranks, 60.0);
    try {
      return Ranks.run(group, c -> {
        setPolicies(c);
        List<Round> rounds = inputs(c.rank(), nranks);
        return nonblocking ? nonblocking(c, rounds) : blocking(c, rounds);
      });
    } finally {
      Ranks.closeAll(group);
    }
  }

  @Test
  public void outstandingRequestsGiveTheBlockingBits() throws Exception {
    for (int nranks : new int[] {1, 2, 3}) {
      List<RankResult> want = runGroup(nranks, false);
      List<RankResult> got = runGroup(nranks, true);
      for (int r = 0; r < nranks; ++r) {
        RankResult w = want.get(r);
        RankResult g = got.get(r);
        assertEquals(6 * ROUNDS, w.outputs.size());
        assertEquals(w.outputs.size(), g.outputs.size());
        for (int i = 0; i < w.outputs.size(); ++i) {
          assertArrayEquals(nranks + " ranks, rank " + r + ", call " + i, w.outputs.get(i),
              g.outputs.get(i));
        }
        for (int i = 0; i < w.residuals.size(); ++i) {
          assertArrayEquals(nranks + " ranks, rank " + r + ", error buffer " + i,
              w.residuals.get(i), g.residuals.get(i));
        }
      }
    }
  }

  @Test
  public void testTurnsTrueAndWaitingAgainIsFine() {
    comms = Comm.createLocal(2, 30.0);
    FloatBuffer x0 = CommTest.direct(new float[] {1, 1, 1});
    FloatBuffer y0 = CommTest.direct(new float[3]);
    FloatBuffer x1 = CommTest.direct(new float[] {2, 2, 2});
    Request r0 = comms[0].iallreduce(x0, y0);
    assertFalse("rank 1 has not started", r0.test());
    Request r1 = comms[1].iallreduce(x1); // in place
    while (!r0.test()) {
      Thread.yield();
    }
    assertTrue(r0.test());
    r0.waitFor();
    r0.waitFor(); // again: the same outcome
    r1.waitFor();
    assertTrue(r1.test());
    assertArrayEquals(new float[] {3, 3, 3}, CommTest.toArray(y0), 0f);
    assertArrayEquals(new float[] {3, 3, 3}, CommTest.toArray(x1), 0f);
    assertEquals("position unchanged", 0, x1.position());
    assertEquals("Request{open}", r0.toString());

    r0.close();
    assertTrue(r0.isClosed());
    assertEquals("Request{closed}", r0.toString());
    IllegalStateException e = assertThrows(IllegalStateException.class, r0::waitFor);
    assertTrue(e.getMessage(), e.getMessage().contains("closed"));
    assertThrows(IllegalStateException.class, r0::test);
    r0.close(); // idempotent
    r1.close();
  }

  @Test
  public void aFailedRequestThrowsFromWaitAndTestAndFailsTheNext() {
    comms = Comm.createLocal(2, 30.0);
    List<Request> ra = new ArrayList<>();
    List<Request> rb = new ArrayList<>();
    ra.add(comms[0].iallreduce(CommTest.direct(new float[10])));
    ra.add(comms[0].iallreduce(CommTest.direct(new float[10])));
    rb.add(comms[1].iallreduce(CommTest.direct(new float[12]))); // another count
    rb.add(comms[1].iallreduce(CommTest.direct(new float[10])));
    for (List<Request> reqs : List.of(ra, rb)) {
      QcException e = assertThrows(QcException.class, reqs.get(0)::waitFor);
      assertEquals(Status.MISMATCH, e.getStatus());
      e = assertThrows(QcException.class, reqs.get(0)::test); // done: throws again
      assertEquals(Status.MISMATCH, e.getStatus());
      e = assertThrows(QcException.class, reqs.get(1)::waitFor);
      assertEquals(Status.MISMATCH, e.getStatus());
      assertTrue(e.getDetail(), e.getDetail().contains("did not run"));
      for (Request r : reqs) {
        r.close();
      }
    }
  }

  @Test
  public void anErrorBufferOfAnotherCountFailsTheRequest() {
    comms = Comm.createLocal(1);
    comms[0].setLayerPolicy("*", Policy.builder().codec(Codec.MINMAX).bits(4)
        .errorFeedback(true).minCompressBytes(0).build());
    try (ErrorBuffer eb = ErrorBuffer.create(comms[0], 5);
        Request r = comms[0].iallreduce(CommTest.direct(new float[8]),
            CommTest.direct(new float[8]), ReduceOp.SUM, null, eb)) {
      QcException e = assertThrows(QcException.class, r::waitFor);
      assertEquals(Status.MISMATCH, e.getStatus());
      assertTrue(e.getDetail(), e.getDetail().contains("error_buffer"));
    }
  }

  @Test
  public void closedHandlesAndBadArguments() {
    comms = Comm.createLocal(2, 30.0);
    Comm c = comms[0];
    FloatBuffer x = CommTest.direct(new float[8]);
    assertThrows(IllegalArgumentException.class, () -> c.iallreduce(FloatBuffer.allocate(8)));
    assertThrows(IllegalArgumentException.class,
        () -> c.iallreduce(x, CommTest.direct(new float[7])));
    assertThrows(IllegalArgumentException.class,
        () -> c.iallreduce(x.asReadOnlyBuffer(), x.asReadOnlyBuffer()));
    assertThrows(NullPointerException.class, () -> c.iallreduce(x, x, null, null, null));
    assertThrows(IllegalArgumentException.class, () -> c.iallreduce(x, x, "a\0b"));
    IllegalArgumentException bad = assertThrows(IllegalArgumentException.class,
        () -> c.iallreduceSegments(x, x, new long[] {4, 5}, null, ReduceOp.SUM, null));
    assertTrue(bad.getMessage(), bad.getMessage().contains("add up to 9"));
    assertThrows(IllegalArgumentException.class,
        () -> c.iallreduceSegments(x, x, new long[] {4, 4}, new String[] {"a"}, ReduceOp.SUM,
            null));
    bad = assertThrows(IllegalArgumentException.class,
        () -> c.ialltoall(CommTest.direct(new float[7]), CommTest.direct(new float[7]), null));
    assertTrue(bad.getMessage(), bad.getMessage().contains("multiple"));
    assertThrows(IllegalArgumentException.class, () -> c.iallreduce(bfloat16(new float[4]),
        bfloat16(new float[4]), Dtype.FLOAT32, ReduceOp.SUM, null, null));

    ErrorBuffer closedEb = ErrorBuffer.create(c, 8);
    closedEb.close();
    assertThrows(IllegalStateException.class,
        () -> c.iallreduce(x, x, ReduceOp.SUM, null, closedEb));
    c.close();
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> c.iallreduce(x));
    assertTrue(e.getMessage(), e.getMessage().contains("closed"));
    assertThrows(IllegalStateException.class, () -> c.ialltoall(x, x, null));
  }

  @Test
  public void requestsOfAClosedCommunicatorEnd() {
    comms = Comm.createLocal(2, 0.5);
    FloatBuffer x = CommTest.direct(new float[10]);
    Request[] reqs = {comms[0].iallreduce(x), comms[0].iallreduce(x)};
    comms[0].iallreduce(CommTest.direct(new float[10])).close(); // handed to the Comm
    comms[0].close(); // gives them the timeout, then ends them
    for (Request r : reqs) {
      assertThrows("done, and failed", QcException.class, r::test);
      QcException e = assertThrows(QcException.class, r::waitFor);
      assertTrue(e.toString(), e.getStatus() == Status.TRANSPORT || e.getStatus() == Status.TIMEOUT);
      r.close();
    }
    // the peer learns that its group is broken
    try (Request r = comms[1].iallreduce(CommTest.direct(new float[10]))) {
      QcException e = assertThrows(QcException.class, r::waitFor);
      assertTrue(e.toString(), e.getStatus() == Status.TRANSPORT || e.getStatus() == Status.TIMEOUT);
    }
  }

  @Test
  public void theErrorBufferBelongsToItsRequestUntilDone() {
    comms = Comm.createLocal(2, 30.0);
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(4).errorFeedback(true)
        .minCompressBytes(0).build();
    comms[0].setLayerPolicy("*", p);
    comms[1].setLayerPolicy("*", p);
    ErrorBuffer eb = ErrorBuffer.create(comms[0], 1000);
    FloatBuffer x = CommTest.direct(CommTest.randomInput(0, 1000));
    Request req = comms[0].iallreduce(x, x, ReduceOp.SUM, null, eb);

    QcException e = assertThrows(QcException.class, eb::close);
    assertEquals(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("in use"));
    assertFalse("a refused close leaves the buffer open", eb.isClosed());
    e = assertThrows(QcException.class, eb::norm);
    assertTrue(e.getDetail(), e.getDetail().contains("in use"));
    e = assertThrows(QcException.class,
        () -> comms[0].iallreduce(x, x, ReduceOp.SUM, null, eb));
    assertEquals(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("in use"));

    comms[1].allreduce(CommTest.direct(CommTest.randomInput(1, 1000)));
    req.waitFor();
    assertTrue(eb.norm() > 0);
    eb.close();
    assertTrue(eb.isClosed());
    req.close();
  }

  @Test
  public void aClosedOrDroppedRequestStillRunsAndKeepsItsBuffers() throws Exception {
    comms = Comm.createLocal(2, 30.0);
    int n = 50000;
    FloatBuffer out = CommTest.direct(new float[n]);
    float[] ones = new float[n];
    java.util.Arrays.fill(ones, 1f);
    // closed at once, its input dropped: only the request keeps it
    comms[0].iallreduce(CommTest.direct(ones), out).close();
    // never closed, dropped: the Cleaner hands it to its communicator
    comms[0].iallreduce(CommTest.direct(ones));
    for (int i = 0; i < 3; ++i) {
      System.gc();
      CommTest.direct(new float[n]); // memory the dropped input might be given to
    }
    float[] twos = new float[n];
    java.util.Arrays.fill(twos, 2f);
    FloatBuffer peer = CommTest.direct(twos);
    // rank 1 makes the same two calls, blocking; rank 0's blocking call waits for
    // the requests started before it
    List<Float> sums = Ranks.run(comms, c -> {
      if (c.rank() == 1) {
        c.allreduce(peer, CommTest.direct(new float[n]));
        c.allreduce(peer, CommTest.direct(new float[n]));
      }
      FloatBuffer one = CommTest.direct(new float[] {1f});
      c.allreduce(one);
      return one.get(0);
    });
    assertEquals(List.of(2f, 2f), sums);
    float[] got = CommTest.toArray(out);
    for (int i = 0; i < n; ++i) {
      assertEquals("element " + i, 3f, got[i], 0f);
    }
  }
}
