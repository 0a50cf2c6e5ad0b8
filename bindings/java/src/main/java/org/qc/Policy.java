package org.qc;

import java.util.Objects;

/**
 * What a collective sends for one layer: codec, bit width, bucket size, ... (the C
 * struct {@code qc_policy_t}). Immutable; make one with {@link #builder()}:
 *
 * <pre>{@code
 * Policy p = Policy.builder().codec(Codec.MINMAX).bits(4).errorFeedback(true).build();
 * }</pre>
 *
 * <p>The defaults are read once from the library ({@code qc_policy_init}), so they
 * are always those of the libqc that is running. {@link Builder#build()} validates
 * the policy in C and throws {@link QcException} with {@link Status#INVALID_ARGUMENT}
 * and a message naming the bad field.
 */
public final class Policy {
  private static final Policy DEFAULTS = readDefaults();

  private final Codec codec;
  private final int bits;
  private final int bucketSize;
  private final Rounding rounding;
  private final Algorithm algorithm;
  private final boolean errorFeedback;
  private final int groupSize;
  private final float topkRatio;
  private final int scaleUpdatePeriod;
  private final long seed;
  private final long minCompressBytes;
  private final Scale scale;

  private Policy(Builder b) {
    codec = b.codec;
    bits = b.bits;
    bucketSize = b.bucketSize;
    rounding = b.rounding;
    algorithm = b.algorithm;
    errorFeedback = b.errorFeedback;
    groupSize = b.groupSize;
    topkRatio = b.topkRatio;
    scaleUpdatePeriod = b.scaleUpdatePeriod;
    seed = b.seed;
    minCompressBytes = b.minCompressBytes;
    scale = b.scale;
  }

  private static Policy readDefaults() {
    try (PolicyStruct s = new PolicyStruct()) {
      return fromStruct(s);
    }
  }

  /** The library's defaults (QC_POLICY_INIT): codec none, bits 4, bucket 128, ... */
  public static Policy defaults() {
    return DEFAULTS;
  }

  /** A builder that starts from {@link #defaults()}. */
  public static Builder builder() {
    return new Builder(DEFAULTS);
  }

  /** A builder that starts from this policy. */
  public Builder toBuilder() {
    return new Builder(this);
  }

  public Codec codec() { return codec; }
  public int bits() { return bits; }
  public int bucketSize() { return bucketSize; }
  public Rounding rounding() { return rounding; }
  public Algorithm algorithm() { return algorithm; }
  public boolean errorFeedback() { return errorFeedback; }
  public int groupSize() { return groupSize; }
  public float topkRatio() { return topkRatio; }
  public int scaleUpdatePeriod() { return scaleUpdatePeriod; }
  /** Stochastic rounding seed; the C field is uint64_t (same bits). */
  public long seed() { return seed; }
  public long minCompressBytes() { return minCompressBytes; }
  /** The global codecs' shared scale: SCALE_AUTO (max-abs), L2 or MAX_ABS. */
  public Scale scale() { return scale; }

  /** A new native qc_policy_t (struct_size from C); the caller closes it. */
  PolicyStruct toStruct() {
    PolicyStruct s = new PolicyStruct();
    s.setCodec(codec);
    s.setBits(bits);
    s.setBucket_size(bucketSize);
    s.setRounding(rounding);
    s.setAlgorithm(algorithm);
    s.setError_feedback(errorFeedback ? 1 : 0);
    s.setGroup_size(groupSize);
    s.setTopk_ratio(topkRatio);
    s.setScale_update_period(scaleUpdatePeriod);
    s.setSeed(seed);
    s.setMin_compress_bytes(minCompressBytes);
    s.setScale(scale);
    return s;
  }

  static Policy fromStruct(PolicyStruct s) {
    Builder b = new Builder();
    b.codec = s.getCodec();
    b.bits = s.getBits();
    b.bucketSize = s.getBucket_size();
    b.rounding = s.getRounding();
    b.algorithm = s.getAlgorithm();
    b.errorFeedback = s.getError_feedback() != 0;
    b.groupSize = s.getGroup_size();
    b.topkRatio = s.getTopk_ratio();
    b.scaleUpdatePeriod = s.getScale_update_period();
    b.seed = s.getSeed();
    b.minCompressBytes = s.getMin_compress_bytes();
    b.scale = s.getScale();
    return new Policy(b);
  }

  @Override
  public boolean equals(Object o) {
    if (this == o) {
      return true;
    }
    if (!(o instanceof Policy)) {
      return false;
    }
    Policy p = (Policy) o;
    return codec == p.codec && bits == p.bits && bucketSize == p.bucketSize
        && rounding == p.rounding && algorithm == p.algorithm
        && errorFeedback == p.errorFeedback && groupSize == p.groupSize
        && Float.compare(topkRatio, p.topkRatio) == 0
        && scaleUpdatePeriod == p.scaleUpdatePeriod && seed == p.seed
        && minCompressBytes == p.minCompressBytes && scale == p.scale;
  }

  @Override
  public int hashCode() {
    return Objects.hash(codec, bits, bucketSize, rounding, algorithm, errorFeedback, groupSize,
        topkRatio, scaleUpdatePeriod, seed, minCompressBytes, scale);
  }

  @Override
  public String toString() {
    return "Policy{codec=" + codec + ", bits=" + bits + ", bucketSize=" + bucketSize
        + ", rounding=" + rounding + ", algorithm=" + algorithm + ", errorFeedback="
        + errorFeedback + ", groupSize=" + groupSize + ", topkRatio=" + topkRatio
        + ", scaleUpdatePeriod=" + scaleUpdatePeriod + ", seed=" + Long.toUnsignedString(seed)
        + ", minCompressBytes=" + minCompressBytes + ", scale=" + scale + "}";
  }

  /** Builds a {@link Policy}; not thread-safe. */
  public static final class Builder {
    private Codec codec;
    private int bits;
    private int bucketSize;
    private Rounding rounding;
    private Algorithm algorithm;
    private boolean errorFeedback;
    private int groupSize;
    private float topkRatio;
    private int scaleUpdatePeriod;
    private long seed;
    private long minCompressBytes;
    private Scale scale;

    private Builder() {}

    private Builder(Policy p) {
      codec = p.codec;
      bits = p.bits;
      bucketSize = p.bucketSize;
      rounding = p.rounding;
      algorithm = p.algorithm;
      errorFeedback = p.errorFeedback;
      groupSize = p.groupSize;
      topkRatio = p.topkRatio;
      scaleUpdatePeriod = p.scaleUpdatePeriod;
      seed = p.seed;
      minCompressBytes = p.minCompressBytes;
      scale = p.scale;
    }

    public Builder codec(Codec v) { codec = Objects.requireNonNull(v, "codec"); return this; }
    /** Code width, 1..8 (2..8 for qsgd). */
    public Builder bits(int v) { bits = v; return this; }
    /** Elements per bucket, >= 1. */
    public Builder bucketSize(int v) { bucketSize = v; return this; }
    public Builder rounding(Rounding v) { rounding = Objects.requireNonNull(v, "rounding"); return this; }
    public Builder algorithm(Algorithm v) { algorithm = Objects.requireNonNull(v, "algorithm"); return this; }
    public Builder errorFeedback(boolean v) { errorFeedback = v; return this; }
    /** Recursive doubling intra-group size, >= 1. */
    public Builder groupSize(int v) { groupSize = v; return this; }
    /** Fraction kept by topk, in (0, 1]. */
    public Builder topkRatio(float v) { topkRatio = v; return this; }
    /** Scales computed every K-th call, >= 1. */
    public Builder scaleUpdatePeriod(int v) { scaleUpdatePeriod = v; return this; }
    /** Stochastic rounding seed (read as an unsigned 64-bit value by C). */
    public Builder seed(long v) { seed = v; return this; }
    /** Messages smaller than this go with codec none; 0 always compresses; >= 0. */
    public Builder minCompressBytes(long v) {
      if (v < 0) {
        throw new IllegalArgumentException("qc: minCompressBytes " + v + " is negative");
      }
      minCompressBytes = v;
      return this;
    }

    /** The global codecs' shared scale (SCALE_AUTO: max-abs). */
    public Builder scale(Scale v) { scale = Objects.requireNonNull(v, "scale"); return this; }

    /**
     * The policy, validated by libqc.
     *
     * @throws QcException {@link Status#INVALID_ARGUMENT} naming the invalid field
     */
    public Policy build() {
      Policy p = new Policy(this);
      try (PolicyStruct s = p.toStruct()) {
        // qc_codec_encoded_size validates every field of the policy (and nothing else
        // for count 0): the same checks every collective makes.
        QcNative.qcj_encoded_size(s, 0, new long[1]);
      }
      return p;
    }
  }
}
