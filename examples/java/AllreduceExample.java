/*
 * AllreduceExample.java - a compressed allreduce from Java: 3 ranks of an
 * in-process group, each a Java thread with its own communicator, averaging
 * with 4-bit minmax codes and error feedback over direct (zero-copy)
 * FloatBuffers. The result is checked against the exact average and
 * against Qc.emulateAllreduce (the same call on virtual ranks, bit for bit).
 * The Java twin of examples/python_allreduce.py; CTest runs it as
 * example_java_allreduce:
 *
 *   java -Djava.library.path=build/bindings/java \
 *        -cp build/bindings/java/qc.jar:build/bindings/java/qc-example.jar AllreduceExample
 *
 * Exits with status 1 if a check fails.
 */
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Random;
import org.qc.Codec;
import org.qc.Comm;
import org.qc.ErrorBuffer;
import org.qc.Policy;
import org.qc.Qc;
import org.qc.ReduceOp;

public final class AllreduceExample {
  static final int N = 3;
  static final int COUNT = 1 << 16;

  public static void main(String[] args) throws InterruptedException {
    float[][] grads = new float[N][COUNT];
    Random rnd = new Random(0);
    for (float[] g : grads) {
      for (int i = 0; i < COUNT; ++i) g[i] = (float) rnd.nextGaussian();
    }
    FloatBuffer[] outs = new FloatBuffer[N];
    RuntimeException[] failures = new RuntimeException[N];

    // --- snippet: README "Using qc from Java" ---
    Policy policy = Policy.builder().codec(Codec.MINMAX).bits(4).errorFeedback(true).build();
    Comm[] comms = Comm.createLocal(N);                 // ranks 0..2 of one group
    Thread[] threads = new Thread[N];
    for (Comm comm : comms) {                           // one thread per rank
      int r = comm.rank();
      threads[r] = new Thread(() -> {
        try (comm; ErrorBuffer eb = ErrorBuffer.create(comm, COUNT)) {
          FloatBuffer in = direct(COUNT).put(grads[r]).flip();  // direct: no copy
          outs[r] = direct(COUNT);
          comm.setLayerPolicy("*", policy);
          comm.allreduce(in, outs[r], ReduceOp.AVG, "fc1.weight", eb);
        } catch (RuntimeException e) {                  // QcException: status + message
          failures[r] = e;
        }
      });
      threads[r].start();
    }
    for (Thread t : threads) t.join();
    // --- end snippet ---

    boolean ok = true;
    for (int r = 0; r < N; ++r) {
      if (failures[r] != null) {
        System.out.println("FAIL: rank " + r + ": " + failures[r]);
        ok = false;
      }
    }
    if (ok) {
      float[][] got = new float[N][COUNT];
      for (int r = 0; r < N; ++r) outs[r].get(got[r]);
      double num = 0, den = 0;
      for (int i = 0; i < COUNT; ++i) {
        double exact = 0;
        for (float[] g : grads) exact += g[i];
        exact /= N;
        num += (got[0][i] - exact) * (got[0][i] - exact);
        den += exact * exact;
      }
      double rel = Math.sqrt(num / den);
      System.out.printf("3 ranks, %d floats, minmax 4-bit + error feedback%n", COUNT);
      System.out.printf("relative error vs the exact average: %.4f%n", rel);
      float[][] emulated = Qc.emulateAllreduce(grads, ReduceOp.AVG, policy, null);
      for (int r = 0; r < N; ++r) {
        if (!java.util.Arrays.equals(got[r], got[0])) {
          System.out.println("FAIL: rank " + r + " received other bits than rank 0");
          ok = false;
        }
        if (!java.util.Arrays.equals(emulated[r], got[0])) {
          System.out.println("FAIL: the emulation differs from the real run");
          ok = false;
        }
      }
      if (!(rel < 0.2)) {
        System.out.println("FAIL: error too large");
        ok = false;
      }
    }
    System.out.println(ok ? "OK" : "FAILED");
    System.exit(ok ? 0 : 1);
  }

  static FloatBuffer direct(int n) {
    return ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder()).asFloatBuffer();
  }
}
