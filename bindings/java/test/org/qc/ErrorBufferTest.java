package org.qc;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import org.junit.Test;

public class ErrorBufferTest {
  private static final int N = 3;
  private static final int COUNT = 4099;

  /** Error buffers of an emulated 2-bit allreduce with error feedback. */
  private static ErrorBuffer[] trained() {
    Policy p = Policy.builder().codec(Codec.MINMAX).bits(2).errorFeedback(true)
        .minCompressBytes(0).build();
    ErrorBuffer[] ebs = new ErrorBuffer[N];
    float[][] x = new float[N][];
    for (int r = 0; r < N; ++r) {
      ebs[r] = ErrorBuffer.create(null, COUNT);
      x[r] = CommTest.randomInput(r, COUNT);
    }
    Qc.emulateAllreduce(x, ReduceOp.SUM, p, ebs);
    return ebs;
  }

  private static void closeAll(ErrorBuffer[] ebs) {
    for (ErrorBuffer eb : ebs) {
      eb.close();
    }
  }

  @Test
  public void saveLoadRoundTrip() {
    ErrorBuffer[] ebs = trained();
    try {
      for (int r = 0; r < N; ++r) {
        double norm = ebs[r].norm();
        assertTrue("rank " + r + " keeps residuals", norm > 0);
        byte[] image = ebs[r].save();
        assertEquals(56 + 4L * COUNT, image.length);
        assertEquals(image.length, ebs[r].savedSize());
        try (ErrorBuffer fresh = ErrorBuffer.create(null, COUNT)) {
          assertEquals(0.0, fresh.norm(), 0.0);
          fresh.load(image);
          assertEquals(norm, fresh.norm(), 0.0);
          assertArrayEquals("the image is reproduced", image, fresh.save());
        }
      }
    } finally {
      closeAll(ebs);
    }
  }

  @Test
  public void byteBufferOverloads() {
    ErrorBuffer[] ebs = trained();
    try {
      byte[] image = ebs[0].save();
      ByteBuffer dst = ByteBuffer.allocateDirect(image.length + 10);
      dst.position(3);
      assertEquals(image.length, ebs[0].save(dst));
      assertEquals(3 + image.length, dst.position());
      dst.flip().position(3);
      try (ErrorBuffer fresh = ErrorBuffer.create(null, COUNT)) {
        fresh.load(dst);
        assertEquals(dst.limit(), dst.position());
        assertEquals(ebs[0].norm(), fresh.norm(), 0.0);
      }
      // too small: qc says how much it needs
      QcException e = assertThrows(QcException.class,
          () -> ebs[0].save(ByteBuffer.allocateDirect(10)));
      assertSame(Status.INVALID_ARGUMENT, e.getStatus());
      assertThrows(IllegalArgumentException.class,
          () -> ebs[0].save(ByteBuffer.allocate(image.length)));
    } finally {
      closeAll(ebs);
    }
  }

  @Test
  public void corruptImageIsRejectedAndBufferUnchanged() {
    ErrorBuffer[] ebs = trained();
    try {
      byte[] image = ebs[1].save();
      byte[] bad = image.clone();
      bad[bad.length - 5] ^= 0x40; // a residual bit: caught by the checksum
      try (ErrorBuffer fresh = ErrorBuffer.create(null, COUNT)) {
        QcException e = assertThrows(QcException.class, () -> fresh.load(bad));
        assertSame(Status.CORRUPT_DATA, e.getStatus());
        assertEquals(0.0, fresh.norm(), 0.0);
        byte[] truncated = java.util.Arrays.copyOf(image, 40);
        e = assertThrows(QcException.class, () -> fresh.load(truncated));
        assertSame(Status.CORRUPT_DATA, e.getStatus());
      }
      try (ErrorBuffer other = ErrorBuffer.create(null, COUNT + 1)) {
        QcException e = assertThrows(QcException.class, () -> other.load(image));
        assertSame(Status.MISMATCH, e.getStatus());
      }
    } finally {
      closeAll(ebs);
    }
  }

  @Test
  public void resetAndClose() {
    ErrorBuffer[] ebs = trained();
    try {
      ebs[2].reset();
      assertEquals(0.0, ebs[2].norm(), 0.0);
      assertEquals(COUNT, ebs[2].count());
      ebs[2].close();
      ebs[2].close();
      assertTrue(ebs[2].isClosed());
      assertThrows(IllegalStateException.class, ebs[2]::norm);
      assertThrows(IllegalArgumentException.class, () -> ErrorBuffer.create(null, -1));
    } finally {
      closeAll(ebs);
    }
  }
}
