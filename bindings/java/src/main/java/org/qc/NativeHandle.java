package org.qc;

import java.lang.ref.Cleaner;

/**
 * Owns one qc handle (a communicator, an error buffer or a request) for
 * {@link Comm}, {@link ErrorBuffer} and {@link Request}: freed once, by
 * {@link #close()} or, if the owner is never closed, by the Cleaner when the owner
 * becomes unreachable. The state lives in a separate object because a Cleaner
 * action must not refer to its owner.
 */
final class NativeHandle {
  /**
   * Frees a handle. qc's destroy functions fail for a valid handle only when it is
   * in use (an error buffer held by an outstanding request).
   */
  interface Destroyer {
    void destroy(long handle) throws QcException;
  }

  private static final Cleaner CLEANER = Cleaner.create();

  private static final class State implements Runnable {
    private long value;
    private final Destroyer destroyer;

    State(long value, Destroyer destroyer) {
      this.value = value;
      this.destroyer = destroyer;
    }

    /** Frees the handle once; a destroy that qc refuses leaves it open. */
    synchronized void destroy() {
      if (value != 0) {
        destroyer.destroy(value);
        value = 0;
      }
    }

    @Override
    public void run() {
      try {
        destroy();
      } catch (QcException e) {
        // unreachable owner: nothing holds the handle in use; nothing to report to
      }
    }
  }

  private final State state;
  private final Cleaner.Cleanable cleanable;

  NativeHandle(Object owner, long handle, Destroyer destroyer) {
    this.state = new State(handle, destroyer);
    this.cleanable = CLEANER.register(owner, state);
  }

  /** The handle, or IllegalStateException with {@code closedMessage} once closed. */
  long get(String closedMessage) {
    synchronized (state) {
      if (state.value == 0) {
        throw new IllegalStateException(closedMessage);
      }
      return state.value;
    }
  }

  /**
   * Runs {@code use} on the handle while holding the lock that {@link #close()}
   * takes, so the handle cannot be freed during the call. Only for calls that
   * never block (a blocking call here would also block close()).
   */
  <T> T withHandle(String closedMessage, java.util.function.LongFunction<T> use) {
    synchronized (state) {
      if (state.value == 0) {
        throw new IllegalStateException(closedMessage);
      }
      return use.apply(state.value);
    }
  }

  boolean isClosed() {
    synchronized (state) {
      return state.value == 0;
    }
  }

  /**
   * Frees the handle; later calls do nothing. If qc refuses (an error buffer in use
   * by a request that has not completed) the QcException is thrown and the handle
   * stays open, so that close() can be called again later.
   */
  void close() {
    state.destroy();
    cleanable.clean(); // unregisters; the state is already freed
  }
}
