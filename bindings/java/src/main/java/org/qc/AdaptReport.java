package org.qc;

/** What {@link Comm#adaptPolicies} assigned (qc_adapt_report_t). */
public final class AdaptReport {
  private final long layers;
  private final double predictedError;
  private final double errorBudget;
  private final double e4;
  private final long predictedBytes;
  private final long bytesAt4;

  AdaptReport(AdaptReportStruct s) {
    layers = s.getLayers();
    predictedError = s.getPredicted_error();
    errorBudget = s.getError_budget();
    e4 = s.getE4();
    predictedBytes = s.getPredicted_bytes();
    bytesAt4 = s.getBytes_at_4();
  }

  /** Layers given a width. */
  public long layers() { return layers; }
  /** Predicted quantization error, summed over layers (squared-error units). */
  public double predictedError() { return predictedError; }
  /** alpha * E4. */
  public double errorBudget() { return errorBudget; }
  /** The error with every adaptable layer at 4 bits. */
  public double e4() { return e4; }
  /** Predicted bytes of one rank's message per call of every layer. */
  public long predictedBytes() { return predictedBytes; }
  /** The same with every adaptable layer at 4 bits. */
  public long bytesAt4() { return bytesAt4; }

  @Override
  public String toString() {
    return "AdaptReport{layers=" + layers + ", predictedError=" + predictedError
        + ", errorBudget=" + errorBudget + ", e4=" + e4 + ", predictedBytes=" + predictedBytes
        + ", bytesAt4=" + bytesAt4 + "}";
  }
}
