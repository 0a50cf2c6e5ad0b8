package org.qc;

/** Counters of one layer name on one rank (qc_layer_stats_t). */
public final class LayerStats {
  private final long calls;
  private final long count;
  private final long logicalBytes;
  private final long wireBytes;
  private final double codecSeconds;
  private final double transportSeconds;
  private final double lastRelError;
  private final double meanSqNorm;

  LayerStats(LayerStatsStruct s) {
    calls = s.getCalls();
    count = s.getCount();
    logicalBytes = s.getLogical_bytes();
    wireBytes = s.getWire_bytes();
    codecSeconds = s.getCodec_seconds();
    transportSeconds = s.getTransport_seconds();
    lastRelError = s.getLast_rel_error();
    meanSqNorm = s.getMean_sq_norm();
  }

  /** Calls that used this layer; 0 for a name never used. */
  public long calls() { return calls; }
  /** Elements in the last call. */
  public long count() { return count; }
  public long logicalBytes() { return logicalBytes; }
  public long wireBytes() { return wireBytes; }
  public double codecSeconds() { return codecSeconds; }
  public double transportSeconds() { return transportSeconds; }
  /** ||x - decode(encode(x))|| / ||x|| of the last call's first encode; -1 if not measured. */
  public double lastRelError() { return lastRelError; }
  /** Squared L2 norm of this rank's input, averaged over calls. */
  public double meanSqNorm() { return meanSqNorm; }

  @Override
  public String toString() {
    return "LayerStats{calls=" + calls + ", count=" + count + ", logicalBytes=" + logicalBytes
        + ", wireBytes=" + wireBytes + ", lastRelError=" + lastRelError + ", meanSqNorm="
        + meanSqNorm + "}";
  }
}
