package org.qc;

import java.lang.ref.Reference;
import java.nio.ByteBuffer;

/**
 * Residuals for error feedback on one tensor of {@link #count()} elements
 * (qc_error_buffer_t), all zero at creation. It belongs to one rank: that of the
 * communicator it was created for, or, created without one, the rank of its first
 * {@link Qc#emulateAllreduce} (see qc.h). Pass it to {@link Comm#allreduce} with a
 * policy that has {@code errorFeedback(true)}.
 *
 * <p>Checkpoints: {@link #save()} gives a versioned, checksummed image;
 * {@link #load(byte[])} restores it ({@link Status#CORRUPT_DATA} for a damaged
 * image, {@link Status#MISMATCH} for another count, rank or group size).
 *
 * <p>Used by one thread at a time; methods are synchronized so that
 * {@link #close()} cannot free the residuals under a running call. A non-blocking
 * collective ({@link Comm#iallreduce}) holds the buffer until its {@link Request}
 * completes: meanwhile every method, {@link #close()} included, throws
 * {@link QcException} {@link Status#INVALID_ARGUMENT} ("in use").
 */
public final class ErrorBuffer implements AutoCloseable {
  private final NativeHandle handle;
  private final long count;

  private ErrorBuffer(long h, long count) {
    this.handle = new NativeHandle(this, h, QcNative::qc_error_buffer_destroy);
    this.count = count;
  }

  /**
   * A buffer of {@code count} zero residuals for rank {@code comm.rank()} of a
   * group of {@code comm.size()}; {@code comm} may be null (bound on first use by
   * {@link Qc#emulateAllreduce}).
   */
  public static ErrorBuffer create(Comm comm, long count) {
    if (count < 0) {
      throw new IllegalArgumentException("qc: argument 'count' is negative: " + count);
    }
    long[] out = new long[1];
    if (comm == null) {
      QcNative.qcj_error_buffer_create(0, count, out);
    } else {
      synchronized (comm) {
        try {
          QcNative.qcj_error_buffer_create(comm.handle(), count, out);
        } finally {
          Reference.reachabilityFence(comm);
        }
      }
    }
    return new ErrorBuffer(out[0], count);
  }

  long handle() {
    return handle.get("qc: ErrorBuffer is closed");
  }

  /** The number of residuals. */
  public long count() {
    return count;
  }

  /** Set every residual to zero. */
  public synchronized void reset() {
    try {
      QcNative.qc_error_buffer_reset(handle());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** L2 norm of the residuals (computed in double). */
  public synchronized double norm() {
    double[] out = new double[1];
    try {
      QcNative.qc_error_buffer_norm(handle(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /** Bytes of the image {@link #save()} writes (56 + 4 * count). */
  public synchronized long savedSize() {
    long[] out = new long[1];
    try {
      QcNative.qcj_error_buffer_save(handle(), null, 0, out);
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /** The residuals and their binding as a checkpoint image. */
  public synchronized byte[] save() {
    ByteBuffer buf = ByteBuffer.allocateDirect(Buffers.checkedInt(savedSize(), "image size"));
    int n = save(buf);
    byte[] out = new byte[n];
    buf.flip();
    buf.get(out);
    return out;
  }

  /**
   * Write the image into a direct buffer at its position (zero-copy) and advance
   * the position past it.
   *
   * @return the number of bytes written
   * @throws QcException {@link Status#INVALID_ARGUMENT} when the remaining space is
   *     smaller than {@link #savedSize()}
   */
  public synchronized int save(ByteBuffer dst) {
    ByteBuffer d = Buffers.check(dst, "dst", true);
    long[] out = new long[1];
    try {
      QcNative.qcj_error_buffer_save(handle(), d, d.remaining(), out);
    } finally {
      Reference.reachabilityFence(this);
    }
    int n = (int) out[0];
    dst.position(dst.position() + n);
    return n;
  }

  /**
   * Restore residuals saved by {@link #save()}; copies the array once.
   *
   * @throws QcException {@link Status#CORRUPT_DATA} for a damaged, truncated or
   *     foreign image, {@link Status#MISMATCH} for another count, rank or group
   *     size; the buffer is unchanged then
   */
  public void load(byte[] image) {
    if (image == null) {
      throw new NullPointerException("qc: argument 'image' is null");
    }
    ByteBuffer buf = ByteBuffer.allocateDirect(image.length);
    buf.put(image);
    buf.flip();
    load(buf);
  }

  /**
   * Restore from the remaining bytes of a direct buffer (zero-copy); on success the
   * position moves to the limit.
   */
  public synchronized void load(ByteBuffer src) {
    ByteBuffer s = Buffers.check(src, "src", false);
    try {
      QcNative.qc_error_buffer_load(handle(), s, s.remaining());
    } finally {
      Reference.reachabilityFence(this);
    }
    src.position(src.limit());
  }

  /** Whether {@link #close()} was called. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /**
   * Release the residuals; calling it again does nothing.
   *
   * @throws QcException {@link Status#INVALID_ARGUMENT} ("in use") while a
   *     {@link Request} that has not completed uses the buffer; it stays open then,
   *     and may be closed once the request is done
   */
  @Override
  public synchronized void close() {
    handle.close();
  }

  @Override
  public String toString() {
    return "ErrorBuffer{count=" + count + (isClosed() ? ", closed" : "") + "}";
  }
}
