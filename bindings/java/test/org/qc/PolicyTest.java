package org.qc;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import org.junit.Test;

public class PolicyTest {
  @Test
  public void defaultsComeFromQcPolicyInit() {
    Policy d = Policy.defaults();
    // QC_POLICY_INIT as documented in qc.h
    assertSame(Codec.NONE, d.codec());
    assertEquals(4, d.bits());
    assertEquals(128, d.bucketSize());
    assertSame(Rounding.ROUND_AUTO, d.rounding());
    assertSame(Algorithm.AUTO, d.algorithm());
    assertFalse(d.errorFeedback());
    assertEquals(8, d.groupSize());
    assertEquals(0.01f, d.topkRatio(), 0f);
    assertEquals(1, d.scaleUpdatePeriod());
    assertEquals(0L, d.seed());
    assertEquals(16384L, d.minCompressBytes());
    assertSame(Scale.SCALE_AUTO, d.scale());
    assertSame(Scale.L2, Policy.builder().scale(Scale.L2).build().scale());
    assertEquals("max_abs", Qc.name(Scale.MAX_ABS));
    assertSame(Scale.MAX_ABS, Qc.scaleFromName("max_abs"));
    assertEquals(d, Policy.builder().build());
  }

  @Test
  public void builderSetsEveryField() {
    Policy p = Policy.builder().codec(Codec.QSGD).bits(3).bucketSize(512)
        .rounding(Rounding.STOCHASTIC).algorithm(Algorithm.SRA).errorFeedback(true).groupSize(2)
        .topkRatio(0.5f).scaleUpdatePeriod(4).seed(-1L).minCompressBytes(0).build();
    assertSame(Codec.QSGD, p.codec());
    assertEquals(3, p.bits());
    assertEquals(512, p.bucketSize());
    assertSame(Rounding.STOCHASTIC, p.rounding());
    assertSame(Algorithm.SRA, p.algorithm());
    assertTrue(p.errorFeedback());
    assertEquals(2, p.groupSize());
    assertEquals(0.5f, p.topkRatio(), 0f);
    assertEquals(4, p.scaleUpdatePeriod());
    assertEquals(-1L, p.seed());
    assertEquals(0L, p.minCompressBytes());
    assertEquals(p, p.toBuilder().build());
    assertEquals(p.hashCode(), p.toBuilder().build().hashCode());
    assertNotEquals(p, p.toBuilder().bits(4).build());
    assertTrue(p.toString(), p.toString().contains("seed=18446744073709551615"));
    // a round trip through a communicator keeps every field (uint64 seed included)
    Comm[] c = Comm.createLocal(1);
    try {
      c[0].setLayerPolicy("x", p);
      assertEquals(p, c[0].getLayerPolicy("x"));
    } finally {
      c[0].close();
    }
  }

  @Test
  public void invalidBitsNamesTheField() {
    QcException e = assertThrows(QcException.class, () -> Policy.builder().bits(0).build());
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertEquals(Status.INVALID_ARGUMENT.swigValue(), e.getStatusCode());
    assertTrue(e.getDetail(), e.getDetail().contains("'bits'"));
    assertTrue(e.getMessage(), e.getMessage().startsWith("INVALID_ARGUMENT: "));
  }

  @Test
  public void otherInvalidFields() {
    assertField("bucket_size", Policy.builder().bucketSize(0));
    assertField("group_size", Policy.builder().groupSize(0));
    assertField("topk_ratio", Policy.builder().topkRatio(1.5f));
    assertField("scale_update_period", Policy.builder().scaleUpdatePeriod(0));
    assertField("bits", Policy.builder().codec(Codec.QSGD).bits(1));
    assertThrows(IllegalArgumentException.class, () -> Policy.builder().minCompressBytes(-1));
    assertThrows(NullPointerException.class, () -> Policy.builder().codec(null));
  }

  private static void assertField(String field, Policy.Builder b) {
    QcException e = assertThrows(QcException.class, b::build);
    assertSame(Status.INVALID_ARGUMENT, e.getStatus());
    assertTrue(e.getDetail(), e.getDetail().contains("'" + field + "'"));
  }

  @Test
  public void enumsCarryTheCValues() {
    assertEquals(0, Status.SUCCESS.swigValue());
    assertEquals(7, Status.CORRUPT_DATA.swigValue());
    assertEquals(3, Codec.MINMAX.swigValue());
    assertEquals(8, Codec.TOPK.swigValue());
    assertEquals(9, Codec.MXFP8.swigValue());
    assertEquals(15, Codec.NVFP4.swigValue());
    assertEquals(2, Algorithm.RECURSIVE_DOUBLING.swigValue());
    assertEquals(1, ReduceOp.AVG.swigValue());
    assertEquals(2, Dtype.BFLOAT16.swigValue());
    assertEquals(1, Transport.MPI.swigValue());
    assertEquals(1, AdaptMethod.LINEAR.swigValue());
    assertEquals("QC_ERROR_TIMEOUT", Qc.statusString(Status.TIMEOUT));
  }
}
