package org.qc;

import java.nio.charset.StandardCharsets;

/**
 * A qc call failed: it returned a status other than {@link Status#SUCCESS}.
 *
 * <p>Unchecked (a {@link RuntimeException}), like {@link IllegalArgumentException}:
 * most failures are programming errors (an invalid policy, ranks that disagree),
 * and an unchecked exception also passes through lambdas and thread bodies.
 * Catch it where a failure can be handled, e.g. a {@link Status#TIMEOUT} or
 * {@link Status#TRANSPORT} after which a communicator is rebuilt.
 *
 * <p>{@link #getStatus()} is the status and {@link #getDetail()} the message of
 * {@code qc_last_error()}, which names the offending argument; {@link #getMessage()}
 * is {@code "STATUS: detail"}.
 */
public class QcException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int statusCode;
  private final Status status;
  private final String detail;

  /** Called from JNI (qc.i) with the status and qc_last_error() as UTF-8. */
  QcException(int statusCode, byte[] utf8Detail) {
    this(statusCode, new String(utf8Detail, StandardCharsets.UTF_8));
  }

  /** An exception for status {@code statusCode} with message {@code detail}. */
  public QcException(int statusCode, String detail) {
    super(nameOf(statusCode) + ": " + detail);
    this.statusCode = statusCode;
    this.status = statusOf(statusCode);
    this.detail = detail;
  }

  /**
   * The status of the failed call; {@code null} only for a status this version of
   * the bindings does not know (a newer libqc), see {@link #getStatusCode()}.
   */
  public Status getStatus() {
    return status;
  }

  /** The numeric qc_status_t value. */
  public int getStatusCode() {
    return statusCode;
  }

  /** The message of qc_last_error() for the failed call. */
  public String getDetail() {
    return detail;
  }

  private static Status statusOf(int code) {
    for (Status s : Status.values()) {
      if (s.swigValue() == code) {
        return s;
      }
    }
    return null;
  }

  private static String nameOf(int code) {
    Status s = statusOf(code);
    return s != null ? s.name() : "STATUS_" + code;
  }
}
