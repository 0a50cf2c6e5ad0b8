package org.qc;

import java.lang.ref.Reference;

/**
 * A non-blocking collective in flight (qc_request_t), started by
 * {@link Comm#iallreduce}, {@link Comm#iallreduceSegments}, {@link Comm#ialltoall},
 * {@link Comm#ireduceScatter}, {@link Comm#iallgather}, {@link Comm#ibroadcast},
 * {@link Comm#isparseAllreduce} or {@link Comm#isparseAllreduceDense}.
 *
 * <p>{@link #waitFor()} blocks until it has completed and throws its
 * {@link QcException} if it failed; {@link #test()} says whether it has completed
 * without blocking (and throws the failure once it has). Both may be called again
 * after completion: they give the same outcome. ({@code wait()} is taken by
 * {@link Object}, hence {@code waitFor}, as in {@link Process#waitFor()}.)
 *
 * <h2>Buffers</h2>
 * Until the request has completed, its buffers and its error buffer belong to it:
 * do not read the output, nor write the input or the output, before
 * {@link #waitFor()} returns (or {@link #test()} returns true). qc writes into the
 * buffers' memory from its own progress thread after the start has returned, so this
 * object keeps the direct buffers (and the {@link ErrorBuffer}) it was started with
 * <b>strongly reachable until the request completes</b>: the garbage collector cannot
 * free memory the library still uses, even if the caller drops its own references.
 * If the request is closed, or becomes unreachable, before it has completed, it still
 * runs (its peers need it); its communicator then keeps those objects until it is
 * done. The request also keeps its {@link Comm} reachable until then.
 *
 * <h2>Threads</h2>
 * {@link #waitFor()} may be called from any thread, also from several at once;
 * {@link #test()} never blocks. {@link #close()} waits for threads inside
 * {@link #waitFor()} to return. A closed request throws
 * {@link IllegalStateException}.
 *
 * <h2>Sparse allreduce</h2>
 * A request of {@link Comm#isparseAllreduce} also owns the result (a
 * qc_sparse_result_t): {@link #sparseRows()} waits for the request and copies it out;
 * {@link #close()} (or the Cleaner) frees it, whether or not the request has completed.
 */
public final class Request implements AutoCloseable {
  private final NativeHandle handle;
  private final InFlight inFlight;
  private final NativeHandle sparseResult; // isparseAllreduce's result, else null
  private final int rowLen;                // of sparseResult's rows
  private int waiters; // threads inside waitFor (guarded by this)

  /**
   * What a started request uses until it completes. It is the Cleaner action's
   * state, so it must not refer to the Request.
   */
  private static final class InFlight {
    private final OrphanedRequests orphans;
    private Comm comm;     // null once completed or released
    private Object[] uses; // the buffers C was given and the error buffer

    InFlight(Comm comm, OrphanedRequests orphans, Object[] uses) {
      this.comm = comm;
      this.orphans = orphans;
      this.uses = uses;
    }

    /** The request has completed: its buffers are the caller's again. */
    synchronized void completed() {
      comm = null;
      uses = null;
    }

    /**
     * NativeHandle's destroyer: frees a completed request; hands one still running,
     * with what it uses (not its Comm: orphans live as long as their Comm), to the
     * communicator.
     */
    void release(long h) {
      Object[] held;
      synchronized (this) {
        held = uses;
        comm = null;
        uses = null;
      }
      orphans.adopt(h, held);
    }
  }

  /**
   * {@code sparseResult}: the qc_sparse_result_t of an isparseAllreduce (rows of
   * {@code rowLen}), which this request then owns; 0 for the other collectives.
   */
  Request(long h, long sparseResult, int rowLen, Comm comm, OrphanedRequests orphans,
      Object... uses) {
    this.inFlight = new InFlight(comm, orphans, uses);
    this.handle = new NativeHandle(this, h, inFlight::release);
    this.sparseResult = sparseResult == 0 ? null
        : new NativeHandle(this, sparseResult, QcNative::qc_sparse_result_destroy);
    this.rowLen = rowLen;
  }

  private long handle() {
    return handle.get("qc: Request is closed");
  }

  /**
   * Blocks until the request has completed (bounded as the blocking call is: each
   * request waits for its peers at most the communicator's timeout once it runs).
   *
   * @throws QcException the collective's failure, with the message of
   *     qc_last_error(): e.g. {@link Status#MISMATCH} when ranks disagree, or the
   *     status of an earlier request on the communicator that failed ("did not run")
   * @throws IllegalStateException if the request is closed
   */
  public void waitFor() {
    long h;
    synchronized (this) {
      h = handle();
      ++waiters; // close() waits for us: the handle stays live
    }
    try {
      QcNative.qc_request_wait(h);
    } catch (QcException e) {
      inFlight.completed(); // a failed request has completed too
      throw e;
    } finally {
      synchronized (this) {
        if (--waiters == 0) {
          notifyAll();
        }
      }
      Reference.reachabilityFence(this);
    }
    inFlight.completed();
  }

  /**
   * Whether the request has completed; never blocks. False while it runs or waits
   * for the requests started before it on its communicator.
   *
   * @throws QcException once the request has completed, if it failed
   * @throws IllegalStateException if the request is closed
   */
  public synchronized boolean test() {
    int[] done = new int[1];
    try {
      QcNative.qc_request_test(handle(), done);
    } finally {
      if (done[0] != 0) {
        inFlight.completed();
      }
      Reference.reachabilityFence(this);
    }
    return done[0] != 0;
  }

  /**
   * The result of the sparse allreduce this request runs ({@link Comm#isparseAllreduce}):
   * waits for it as {@link #waitFor()} does (throwing its failure), then copies the
   * rows out. May be called again; each call copies.
   *
   * @throws IllegalStateException if the request is closed, or is not a sparse
   *     allreduce's (those of {@link Comm#isparseAllreduceDense} write their table)
   */
  public SparseRows sparseRows() {
    if (sparseResult == null) {
      handle(); // a closed request says so first
      throw new IllegalStateException("qc: this Request has no sparse rows (only those of "
          + "Comm.isparseAllreduce do)");
    }
    waitFor();
    try {
      return sparseResult.withHandle("qc: Request is closed", h -> SparseRows.read(h, rowLen));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Whether {@link #close()} was called. */
  public boolean isClosed() {
    return handle.isClosed();
  }

  /**
   * Releases the handle (qc_request_free); calling it again does nothing. A request
   * that has not completed still runs, and its buffers stay in use until it has
   * (see the class comment). Waits for threads inside {@link #waitFor()} to return.
   */
  @Override
  public synchronized void close() {
    boolean interrupted = false;
    while (waiters > 0) {
      try {
        wait();
      } catch (InterruptedException e) {
        interrupted = true; // the handle must outlive the waiters: keep waiting
      }
    }
    try {
      handle.close();
    } finally {
      if (sparseResult != null) {
        sparseResult.close();
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public String toString() {
    return "Request{" + (isClosed() ? "closed" : "open") + "}";
  }
}
