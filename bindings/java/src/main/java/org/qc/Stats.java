package org.qc;

/** Counters of one rank of a communicator since its creation (qc_stats_t). */
public final class Stats {
  private final long calls;
  private final long logicalBytes;
  private final long wireBytes;
  private final double codecSeconds;
  private final double transportSeconds;
  private final double codecSecondsInFlight;

  Stats(StatsStruct s) {
    calls = s.getCalls();
    logicalBytes = s.getLogical_bytes();
    wireBytes = s.getWire_bytes();
    codecSeconds = s.getCodec_seconds();
    transportSeconds = s.getTransport_seconds();
    codecSecondsInFlight = s.getCodec_seconds_in_flight();
  }

  /** Collectives completed. */
  public long calls() { return calls; }
  /** count x dtype size of every collective's input. */
  public long logicalBytes() { return logicalBytes; }
  /** Bytes this rank handed to the transport, headers included. */
  public long wireBytes() { return wireBytes; }
  public double codecSeconds() { return codecSeconds; }
  public double transportSeconds() { return transportSeconds; }
  /** The part of codecSeconds spent while transfers were in flight (overlapped). */
  public double codecSecondsInFlight() { return codecSecondsInFlight; }

  @Override
  public String toString() {
    return "Stats{calls=" + calls + ", logicalBytes=" + logicalBytes + ", wireBytes=" + wireBytes
        + ", codecSeconds=" + codecSeconds + ", transportSeconds=" + transportSeconds
        + ", codecSecondsInFlight=" + codecSecondsInFlight + "}";
  }
}
