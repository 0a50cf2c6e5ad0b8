package org.qc;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.nio.ShortBuffer;

/** Checks and helpers for the java.nio buffers handed to C (package-private). */
final class Buffers {
  private Buffers() {}

  /** A direct float buffer in native byte order, as qc needs: {@code n} floats. */
  static FloatBuffer directFloats(int n) {
    return ByteBuffer.allocateDirect(Math.multiplyExact(n, 4))
        .order(ByteOrder.nativeOrder())
        .asFloatBuffer();
  }

  static FloatBuffer directFloats(long n) {
    return directFloats(checkedInt(n, "element count"));
  }

  /** A direct long buffer in native byte order: {@code n} longs (row indices). */
  static LongBuffer directLongs(long n) {
    return ByteBuffer.allocateDirect(Math.multiplyExact(checkedInt(n, "index count"), 8))
        .order(ByteOrder.nativeOrder())
        .asLongBuffer();
  }

  static int checkedInt(long n, String what) {
    if (n < 0 || n > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("qc: " + what + " " + n + " does not fit a Java buffer");
    }
    return (int) n;
  }

  private static String howToAllocate(String kind, int bytes) {
    return "ByteBuffer.allocateDirect(" + bytes + " * n).order(ByteOrder.nativeOrder())" + kind;
  }

  /**
   * Check that {@code b} can be handed to C without copying and return a slice from
   * its position to its limit (the buffer's own position is not changed).
   */
  static FloatBuffer check(FloatBuffer b, String name, boolean writable) {
    checkCommon(b, name, writable, b != null && b.order() == ByteOrder.nativeOrder(),
        howToAllocate(".asFloatBuffer()", 4), "float[]");
    return b.slice();
  }

  static ShortBuffer check(ShortBuffer b, String name, boolean writable) {
    checkCommon(b, name, writable, b != null && b.order() == ByteOrder.nativeOrder(),
        howToAllocate(".asShortBuffer()", 2), "copying into a direct buffer");
    return b.slice();
  }

  static LongBuffer check(LongBuffer b, String name, boolean writable) {
    checkCommon(b, name, writable, b != null && b.order() == ByteOrder.nativeOrder(),
        howToAllocate(".asLongBuffer()", 8), "long[]");
    return b.slice();
  }

  /** Byte buffers carry no byte order of their own data: any order is accepted. */
  static ByteBuffer check(ByteBuffer b, String name, boolean writable) {
    checkCommon(b, name, writable, true, "ByteBuffer.allocateDirect(n)", "byte[]");
    return b.slice();
  }

  private static void checkCommon(Buffer b, String name, boolean writable, boolean nativeOrder,
      String how, String alternative) {
    if (b == null) {
      throw new NullPointerException("qc: argument '" + name + "' is null");
    }
    if (!b.isDirect()) {
      throw new IllegalArgumentException("qc: argument '" + name + "' is a heap buffer; qc reads "
          + "and writes buffers in place (zero-copy) and needs a direct buffer: allocate it with "
          + how + ", or use the " + alternative + " overload, which copies");
    }
    if (!nativeOrder) {
      throw new IllegalArgumentException("qc: argument '" + name + "' is not in the native byte "
          + "order (" + ByteOrder.nativeOrder() + "); allocate it with " + how);
    }
    if (writable && b.isReadOnly()) {
      throw new IllegalArgumentException("qc: argument '" + name + "' is read-only but qc writes "
          + "into it");
    }
  }
}
