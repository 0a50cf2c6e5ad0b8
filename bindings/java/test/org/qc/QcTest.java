package org.qc;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.FloatBuffer;
import org.junit.Test;

public class QcTest {
  @Test
  public void versions() {
    String header = Qc.HEADER_VERSION_MAJOR + "." + Qc.HEADER_VERSION_MINOR + "."
        + Qc.HEADER_VERSION_PATCH;
    assertEquals(header, Qc.version());
    assertEquals(Qc.HEADER_VERSION_MAJOR * 10000 + Qc.HEADER_VERSION_MINOR * 100
        + Qc.HEADER_VERSION_PATCH, Qc.versionNumber());
  }

  @Test
  public void enumNamesAreTheLibrarys() {
    for (Codec c : Codec.values()) {
      assertEquals(c, Qc.codecFromName(Qc.name(c)));
    }
    for (Algorithm a : Algorithm.values()) {
      assertEquals(a, Qc.algorithmFromName(Qc.name(a)));
    }
    assertEquals("minmax", Qc.name(Codec.MINMAX));
    assertEquals("recursive_doubling", Qc.name(Algorithm.RECURSIVE_DOUBLING));
    assertEquals(Algorithm.RECURSIVE_DOUBLING, Qc.algorithmFromName("rd"));
    assertEquals(Dtype.FLOAT16, Qc.dtypeFromName("half"));
    assertEquals("nearest", Qc.name(Rounding.NEAREST_EVEN));
    assertEquals("auto", Qc.name(Rounding.ROUND_AUTO));
    assertEquals(Transport.MPI, Qc.transportFromName("mpi"));
    assertEquals(ReduceOp.AVG, Qc.reduceOpFromName(Qc.name(ReduceOp.AVG)));
    assertEquals(AdaptMethod.LINEAR, Qc.adaptMethodFromName("linear"));
    QcException e = assertThrows(QcException.class, () -> Qc.codecFromName("minmax4"));
    assertEquals(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getMessage(), e.getMessage().contains("none, fp16"));
  }

  @Test
  public void emulateNoneIsExactSum() {
    float[][] x = {{1f, 2f, 3f}, {10f, 20f, 30f}, {100f, 200f, 300f}};
    float[][] y = Qc.emulateAllreduce(x, Policy.defaults());
    for (float[] row : y) {
      assertArrayEquals(new float[] {111f, 222f, 333f}, row, 0f);
    }
    y = Qc.emulateAllreduce(x, ReduceOp.AVG, Policy.defaults(), null);
    assertArrayEquals(new float[] {37f, 74f, 111f}, y[1], 1e-5f);
  }

  @Test
  public void emulateRejectsRaggedInputs() {
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateAllreduce(new float[][] {{1f}, {1f, 2f}}, Policy.defaults()));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateAlltoall(new float[][] {{1f, 2f}, {3f, 4f}, {5f, 6f}}, Policy.defaults()));
    assertThrows(IllegalArgumentException.class,
        () -> Qc.emulateAllreduce(new float[][] {{1f}}, ReduceOp.SUM, Policy.defaults(),
            new ErrorBuffer[2]));
  }

  @Test
  public void encodeDecodeRoundTrip() {
    float[] x = CommTest.randomInput(7, 1000);
    byte[] none = Qc.encode(Policy.defaults(), x);
    assertArrayEquals(x, Qc.decode(none, x.length), 0f);
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(8).build();
    byte[] msg = Qc.encode(p, x);
    assertTrue(msg.length <= Qc.encodedSize(p, x.length));
    assertTrue(msg.length < 4 * x.length);
    assertEquals('Q', msg[0]);
    assertArrayEquals(x, Qc.decode(msg, x.length), 0.05f);
    // zero-copy overloads give the same bytes
    FloatBuffer src = CommTest.direct(x);
    ByteBuffer dst = ByteBuffer.allocateDirect(msg.length);
    assertEquals(msg.length, Qc.encode(p, src, dst));
    dst.flip();
    byte[] again = new byte[dst.remaining()];
    dst.duplicate().get(again);
    assertArrayEquals(msg, again);
    FloatBuffer out = CommTest.direct(new float[x.length]);
    Qc.decode(dst, out);
    assertArrayEquals(Qc.decode(msg, x.length), CommTest.toArray(out), 0f);
  }

  @Test
  public void decodeErrors() {
    float[] x = CommTest.randomInput(8, 100);
    byte[] msg = Qc.encode(Policy.builder().codec(Codec.MINMAX).bits(4).build(), x);
    QcException e = assertThrows(QcException.class, () -> Qc.decode(msg, 99));
    assertSame(Status.MISMATCH, e.getStatus());
    byte[] bad = msg.clone();
    bad[0] = 'X';
    e = assertThrows(QcException.class, () -> Qc.decode(bad, 100));
    assertSame(Status.CORRUPT_DATA, e.getStatus());
    assertTrue(e.getDetail().length() > 0);
  }

  @Test
  public void exceptionCarriesStatusAndDetail() {
    QcException e = new QcException(Status.TIMEOUT.swigValue(), "waited");
    assertSame(Status.TIMEOUT, e.getStatus());
    assertEquals("TIMEOUT: waited", e.getMessage());
    QcException unknown = new QcException(999, "new");
    assertEquals(null, unknown.getStatus());
    assertEquals(999, unknown.getStatusCode());
  }
}
