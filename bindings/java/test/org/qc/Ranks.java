package org.qc;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/** Test helper: run one body per rank of a local group, each on its own thread. */
final class Ranks {
  private Ranks() {}

  interface Body<T> {
    T run(Comm comm) throws Exception;
  }

  /** Result of one rank: its value or what it threw. */
  static final class Outcome<T> {
    final T value;
    final Throwable error;

    Outcome(T value, Throwable error) {
      this.value = value;
      this.error = error;
    }
  }

  /** Run body on every rank at once; collect each rank's outcome. */
  static <T> List<Outcome<T>> runAll(Comm[] comms, Body<T> body) throws InterruptedException {
    ExecutorService pool = Executors.newFixedThreadPool(comms.length);
    try {
      List<Future<T>> futures = new ArrayList<>();
      for (Comm c : comms) {
        futures.add(pool.submit(() -> body.run(c)));
      }
      List<Outcome<T>> out = new ArrayList<>();
      for (Future<T> f : futures) {
        try {
          out.add(new Outcome<>(f.get(120, TimeUnit.SECONDS), null));
        } catch (java.util.concurrent.ExecutionException e) {
          out.add(new Outcome<>(null, e.getCause()));
        } catch (java.util.concurrent.TimeoutException e) {
          out.add(new Outcome<>(null, e));
        }
      }
      return out;
    } finally {
      pool.shutdownNow();
      pool.awaitTermination(30, TimeUnit.SECONDS);
    }
  }

  /** As runAll, rethrowing the first rank's failure; returns the values by rank. */
  static <T> List<T> run(Comm[] comms, Body<T> body) throws Exception {
    List<T> values = new ArrayList<>();
    for (Outcome<T> o : runAll(comms, body)) {
      if (o.error != null) {
        if (o.error instanceof Exception) {
          throw (Exception) o.error;
        }
        throw new AssertionError(o.error);
      }
      values.add(o.value);
    }
    return values;
  }

  static void closeAll(Comm[] comms) {
    if (comms != null) {
      for (Comm c : comms) {
        if (c != null) {
          c.close();
        }
      }
    }
  }
}
