package org.qc;

import java.util.ArrayList;
import java.util.List;

/**
 * The requests of one communicator whose {@link Request} was closed, or became
 * unreachable, before they completed. qc still runs such a request (its peers need
 * it) and it still reads and writes its buffers, so each is kept here with the
 * objects that own that memory until it is seen done, or until the communicator is
 * destroyed (which ends every request). Package-private; thread-safe.
 */
final class OrphanedRequests {
  private static final class Orphan {
    final long handle;
    final Object[] uses; // the java.nio buffers and error buffer, held until done

    Orphan(long handle, Object[] uses) {
      this.handle = handle;
      this.uses = uses;
    }
  }

  private final List<Orphan> orphans = new ArrayList<>();

  /** Takes over a request handle: frees it now if it is done, else once it is. */
  synchronized void adopt(long handle, Object[] uses) {
    reap();
    if (isDone(handle)) {
      QcNative.qc_request_free(handle);
    } else {
      orphans.add(new Orphan(handle, uses));
    }
  }

  /** Frees the orphans that have completed (their buffers are free again). Never blocks. */
  synchronized void reap() {
    orphans.removeIf(o -> {
      if (!isDone(o.handle)) {
        return false;
      }
      QcNative.qc_request_free(o.handle);
      return true;
    });
  }

  /** After qc_comm_destroy, which has ended every request of the communicator. */
  synchronized void communicatorDestroyed() {
    for (Orphan o : orphans) {
      QcNative.qc_request_free(o.handle);
    }
    orphans.clear();
  }

  /** Whether a live request has completed, successfully or not. Never blocks. */
  static boolean isDone(long handle) {
    int[] done = new int[1];
    try {
      QcNative.qc_request_test(handle, done);
    } catch (QcException e) {
      // the request failed: done[0] says that it has completed
    }
    return done[0] != 0;
  }
}
