/*
 * qc.i - SWIG interface of the Java bindings (package org.qc).
 *
 * This is the LOW-LEVEL layer: the module class QcNative and its JNI class
 * are package-private; users see the hand-written classes in
 * src/main/java/org/qc (Comm, ErrorBuffer, Policy, Qc, Stats, ...) and the
 * public enums generated here from qc_enums.i (Status, Dtype, ReduceOp,
 * Codec, Algorithm, Rounding, Transport, AdaptMethod).
 *
 * Conventions of this file
 *   - Every qc function that returns a status is declared here as returning
 *     qc_rc, a return-only alias of qc_status_t. Its `ret` typemap throws
 *     org.qc.QcException (status + qc_last_error()) when the status is not
 *     QC_SUCCESS. `ret` runs after `freearg`, i.e. after every JNI array or
 *     string has been released, so the throw never happens inside a critical
 *     region (this file uses no critical regions at all).
 *   - Handles (qc_comm_t, qc_error_buffer_t, qc_request_t, qc_sparse_result_t)
 *     travel as Java
 *     `long`; the Java classes own them.
 *   - Bulk data travels only through DIRECT java.nio buffers (`void* DIRECT`),
 *     whose address is handed to C: zero-copy, and safe for calls that block
 *     (collectives), unlike GetPrimitiveArrayCritical. Java checks sizes,
 *     byte order and read-only flags before the call; C rejects heap buffers.
 *     Small arguments (names as UTF-8 byte[], counts and handles as long[],
 *     widths as int[]) are copied with Get/Set<Type>ArrayRegion.
 *   - Structs with struct_size (qc_policy_t, qc_stats_t, qc_layer_stats_t)
 *     are SWIG proxies whose only constructor sets struct_size = sizeof()
 *     from C and fills defaults with the matching qc *_init function, so a
 *     Java caller can never get struct_size wrong.
 *
 * Only the shape of qc_enums.i is relied upon: plain C enums
 * `typedef enum qc_x { QC_... = n, ... } qc_x_t;` and #define constants.
 */
%module QcNative

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define QC_EXPERIMENTAL_API /* Comm.adaptPolicies wraps qc_comm_adapt_policies */
#include "qc.h"

/* Return-only alias of qc_status_t: only its `ret` typemap throws. */
typedef qc_status_t qc_rc;

/* Throw org.qc.QcException(int status, byte[] utf8Message). The message is
 * passed as bytes (not NewStringUTF) because qc_last_error() is UTF-8, which
 * is not JNI's modified UTF-8 for every input (layer names are user text). */
static void qcj_throw_status(JNIEnv* jenv, qc_status_t status) {
  const char* msg;
  size_t len;
  jclass cls;
  jmethodID ctor;
  jbyteArray bytes;
  jobject ex;
  if ((*jenv)->ExceptionCheck(jenv)) return; /* keep the pending one */
  msg = qc_last_error();
  if (msg == NULL || msg[0] == '\0') msg = qc_status_string(status);
  len = strlen(msg);
  if (len > (size_t)0x7fffffff) len = 0x7fffffff;
  cls = (*jenv)->FindClass(jenv, "org/qc/QcException");
  if (cls == NULL) return; /* NoClassDefFoundError is pending */
  ctor = (*jenv)->GetMethodID(jenv, cls, "<init>", "(I[B)V");
  if (ctor == NULL) { (*jenv)->DeleteLocalRef(jenv, cls); return; }
  bytes = (*jenv)->NewByteArray(jenv, (jsize)len);
  if (bytes == NULL) { (*jenv)->DeleteLocalRef(jenv, cls); return; }
  (*jenv)->SetByteArrayRegion(jenv, bytes, 0, (jsize)len, (const jbyte*)msg);
  if ((*jenv)->ExceptionCheck(jenv)) {
    (*jenv)->DeleteLocalRef(jenv, bytes);
    (*jenv)->DeleteLocalRef(jenv, cls);
    return;
  }
  ex = (*jenv)->NewObject(jenv, cls, ctor, (jint)status, bytes);
  if (ex != NULL) {
    (*jenv)->Throw(jenv, (jthrowable)ex);
    (*jenv)->DeleteLocalRef(jenv, ex);
  }
  (*jenv)->DeleteLocalRef(jenv, bytes);
  (*jenv)->DeleteLocalRef(jenv, cls);
}

static size_t qcj_dtype_size(qc_dtype_t dtype) {
  return dtype == QC_DTYPE_FLOAT32 ? 4u : 2u;
}

/* The collective qcj_emulate runs; Qc.java passes the same numbers. */
enum qcj_collective {
  QCJ_ALLREDUCE = 0,
  QCJ_ALLTOALL = 1,
  QCJ_REDUCE_SCATTER = 2,
  QCJ_ALLGATHER = 3,
  QCJ_BROADCAST = 4
};

/* The qc_emulate_* call of `collective`; each takes the arguments it knows
 * (count is recvcount, sendcount or count_per_rank as the call names it). */
static qc_status_t qcj_emulate_run(int collective, int nranks, const void* const* sends,
                                   void* const* recvs, size_t count, qc_dtype_t dtype,
                                   qc_reduce_op_t op, int root, const char* layer,
                                   uint64_t call, const qc_policy_t* policy,
                                   qc_error_buffer_t* ebs) {
  switch (collective) {
    case QCJ_ALLTOALL:
      return qc_emulate_alltoall(nranks, sends, recvs, count, dtype, layer, call, policy);
    case QCJ_REDUCE_SCATTER:
      return qc_emulate_reduce_scatter(nranks, sends, recvs, count, dtype, op, layer, call,
                                       policy, ebs);
    case QCJ_ALLGATHER:
      return qc_emulate_allgather(nranks, sends, recvs, count, dtype, layer, call, policy, ebs);
    case QCJ_BROADCAST:
      return qc_emulate_broadcast(nranks, sends, recvs, count, dtype, root, layer, call, policy);
    default:
      return qc_emulate_allreduce(nranks, sends, recvs, count, dtype, op, layer, call, policy,
                                  ebs);
  }
}
%}

/* ---- native library: loaded once, with a message that helps ------------ */
%pragma(java) jniclasscode=%{
  static {
    try {
      System.loadLibrary("qcjni");
    } catch (UnsatisfiedLinkError e) {
      UnsatisfiedLinkError err = new UnsatisfiedLinkError(
          "qc: cannot load the JNI library 'qcjni' (" + System.mapLibraryName("qcjni")
          + ") from java.library.path=" + System.getProperty("java.library.path")
          + "; start the JVM with -Djava.library.path=<directory of "
          + System.mapLibraryName("qcjni") + "> (it also needs libqc on the loader path): "
          + e.getMessage());
      err.initCause(e);
      throw err;
    }
  }
%}
%pragma(java) jniclassclassmodifiers="final class"
%pragma(java) moduleclassmodifiers="final class"
/* No finalize(): every native object is released explicitly (close()). */
%typemap(javafinalize) SWIGTYPE ""

/* ---- enums ------------------------------------------------------------- */
%include "enums.swg"   /* proper Java enums */
%javaconst(1);
%rename(Status) qc_status_t;
%rename(Dtype) qc_dtype_t;
%rename(ReduceOp) qc_reduce_op_t;
%rename(Codec) qc_codec_t;
%rename(Algorithm) qc_algorithm_t;
%rename(Rounding) qc_rounding_t;
%rename(Scale) qc_scale_t;
%rename(Transport) qc_transport_t;
%rename(AdaptMethod) qc_adapt_method_t;
/* QC_ERROR_CORRUPT_DATA -> CORRUPT_DATA, QC_CODEC_MINMAX -> MINMAX, ... */
%rename("%(regex:/^QC_(ERROR_|DTYPE_|OP_|CODEC_|ALGO_|ROUND_|SCALE_|TRANSPORT_|ADAPT_)?(.*)$/\\2/)s",
        %$isenumitem) "";
/* C enum items share one scope, so SWIG would take QC_ROUND_AUTO's AUTO for
   a second definition of QC_ALGO_AUTO's and drop it: these keep their
   prefix, Rounding.ROUND_AUTO and Scale.SCALE_AUTO. */
%rename(ROUND_AUTO) QC_ROUND_AUTO;
%rename(SCALE_AUTO) QC_SCALE_AUTO;
/* QC_VERSION_MAJOR -> VERSION_MAJOR (compile-time constants of qc.h) */
%rename("%(regex:/^QC_(.*)$/\\1/)s", %$isconstant) "";

%include "qc_enums.i"

/* ---- status: return-only alias that throws ----------------------------- */
typedef qc_status_t qc_rc;
%typemap(jni) qc_rc "void"
%typemap(jtype) qc_rc "void"
%typemap(jstype) qc_rc "void"
%typemap(javaout) qc_rc { $jnicall; }
%typemap(out) qc_rc ""
%typemap(ret) qc_rc %{
  if ($1 != QC_SUCCESS) qcj_throw_status(jenv, $1);
%}

/* ---- handles as long --------------------------------------------------- */
%define QCJ_HANDLE(TYPE)
%typemap(jni) TYPE "jlong"
%typemap(jtype) TYPE "long"
%typemap(jstype) TYPE "long"
%typemap(javain) TYPE "$javainput"
%typemap(javaout) TYPE { return $jnicall; }
%typemap(in) TYPE %{ $1 = (TYPE)(intptr_t)$input; %}
%typemap(out) TYPE %{ $result = (jlong)(intptr_t)$1; %}
%enddef
typedef struct qc_comm_s* qc_comm_t;
typedef struct qc_error_buffer_s* qc_error_buffer_t;
typedef struct qc_request_s* qc_request_t;
typedef struct qc_sparse_result_s* qc_sparse_result_t;
QCJ_HANDLE(qc_comm_t)
QCJ_HANDLE(qc_error_buffer_t)
QCJ_HANDLE(qc_request_t)
QCJ_HANDLE(qc_sparse_result_t)

/* ---- direct java.nio buffers (zero-copy) -------------------------------- */
%typemap(jni) void* DIRECT, const void* DIRECT "jobject"
%typemap(jtype) void* DIRECT, const void* DIRECT "java.nio.Buffer"
%typemap(jstype) void* DIRECT, const void* DIRECT "java.nio.Buffer"
%typemap(javain) void* DIRECT, const void* DIRECT "$javainput"
%typemap(in) void* DIRECT, const void* DIRECT {
  $1 = NULL;
  if ($input != NULL) {
    if ((*jenv)->GetDirectBufferCapacity(jenv, $input) < 0) {
      SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
          "qc: a direct java.nio buffer is required (allocate it with "
          "ByteBuffer.allocateDirect(...).order(ByteOrder.nativeOrder()))");
      return $null;
    }
    $1 = ($1_ltype)(*jenv)->GetDirectBufferAddress(jenv, $input);
  }
}

/* ---- UTF-8 strings: Java passes String.getBytes(UTF_8) or null ---------- */
%typemap(jni) const char* UTF8 "jbyteArray"
%typemap(jtype) const char* UTF8 "byte[]"
%typemap(jstype) const char* UTF8 "byte[]"
%typemap(javain) const char* UTF8 "$javainput"
%typemap(in) const char* UTF8 {
  $1 = NULL;
  if ($input != NULL) {
    jsize n_ = (*jenv)->GetArrayLength(jenv, $input);
    char* s_ = (char*)malloc((size_t)n_ + 1);
    if (s_ == NULL) {
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "qc: out of memory");
      return $null;
    }
    (*jenv)->GetByteArrayRegion(jenv, $input, 0, n_, (jbyte*)s_);
    s_[n_] = '\0';
    $1 = s_;
  }
}
%typemap(freearg) const char* UTF8 %{ free((char*)$1); %}

/* ---- handle arrays: long[] in and out ---------------------------------- */
%typemap(jni) (jlong* HANDLES, int NHANDLES) "jlongArray"
%typemap(jtype) (jlong* HANDLES, int NHANDLES) "long[]"
%typemap(jstype) (jlong* HANDLES, int NHANDLES) "long[]"
%typemap(javain) (jlong* HANDLES, int NHANDLES) "$javainput"
%typemap(in) (jlong* HANDLES, int NHANDLES) {
  $1 = NULL;
  $2 = 0;
  if ($input != NULL) {
    $2 = (int)(*jenv)->GetArrayLength(jenv, $input);
    $1 = (jlong*)calloc((size_t)$2 + 1, sizeof(jlong));
    if ($1 == NULL) {
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "qc: out of memory");
      return $null;
    }
    (*jenv)->GetLongArrayRegion(jenv, $input, 0, (jsize)$2, $1);
  }
}
%typemap(argout) (jlong* HANDLES, int NHANDLES) {
  if ($input != NULL) (*jenv)->SetLongArrayRegion(jenv, $input, 0, (jsize)$2, $1);
}
%typemap(freearg) (jlong* HANDLES, int NHANDLES) %{ free($1); %}

%include <typemaps.i>
%apply int *OUTPUT { int* out };
%apply long long *OUTPUT { long long* out };
%apply double *OUTPUT { double* out };

/* 64-bit struct fields as Java long (values above 2^63 do not occur). */
%apply long long { uint64_t };
%apply long long { int64_t };

/* ---- struct proxies: struct_size always from C's sizeof ----------------- */
%define QCJ_STRUCT(CTYPE, TAG, JNAME, INIT)
%rename(JNAME) TAG;
%typemap(javaclassmodifiers) struct TAG "final class"
%typemap(javainterfaces) struct TAG "AutoCloseable"
%typemap(javacode) struct TAG %{
  @Override
  public void close() {
    delete();
  }
%}
%immutable TAG::struct_size;
%nodefaultctor TAG;
%extend TAG {
  TAG() {
    CTYPE* s = (CTYPE*)calloc(1, sizeof(CTYPE));
    if (s != NULL) {
      s->struct_size = sizeof(CTYPE);
      INIT;
    }
    return s;
  }
  ~TAG() { free($self); }
}
%enddef

QCJ_STRUCT(qc_policy_t, qc_policy, PolicyStruct, (void)qc_policy_init(s))
QCJ_STRUCT(qc_stats_t, qc_stats, StatsStruct, (void)0)
QCJ_STRUCT(qc_layer_stats_t, qc_layer_stats, LayerStatsStruct, (void)0)
QCJ_STRUCT(qc_adapt_report_t, qc_adapt_report, AdaptReportStruct, (void)0)

typedef struct qc_policy {
  size_t struct_size;
  qc_codec_t codec;
  int bits;
  int bucket_size;
  qc_rounding_t rounding;
  qc_algorithm_t algorithm;
  int error_feedback;
  int group_size;
  float topk_ratio;
  int scale_update_period;
  uint64_t seed;
  size_t min_compress_bytes;
  qc_scale_t scale;
} qc_policy_t;

typedef struct qc_stats {
  size_t struct_size;
  uint64_t calls;
  uint64_t logical_bytes;
  uint64_t wire_bytes;
  double codec_seconds;
  double transport_seconds;
  double codec_seconds_in_flight;
} qc_stats_t;

typedef struct qc_layer_stats {
  size_t struct_size;
  uint64_t calls;
  uint64_t count;
  uint64_t logical_bytes;
  uint64_t wire_bytes;
  double codec_seconds;
  double transport_seconds;
  double last_rel_error;
  double mean_sq_norm;
} qc_layer_stats_t;

/* Parameter names select the typemaps above. */
%apply const void* DIRECT { const void* sendbuf, const void* src, const void* indices,
                            const void* values };
%apply void* DIRECT { void* recvbuf, void* dst, void* dense, void* indices_out,
                      void* values_out };
%apply const char* UTF8 { const char* layer, const char* pattern, const char* name };
%apply (jlong* HANDLES, int NHANDLES) { (jlong* handles, int nhandles) };

typedef struct qc_adapt_report {
  size_t struct_size;
  uint64_t layers;
  double predicted_error;
  double error_budget;
  double e4;
  uint64_t predicted_bytes;
  uint64_t bytes_at_4;
} qc_adapt_report_t;

/* ---- int[] in (copied) -------------------------------------------------- */
%typemap(jni) (const int* ints, int nints) "jintArray"
%typemap(jtype) (const int* ints, int nints) "int[]"
%typemap(jstype) (const int* ints, int nints) "int[]"
%typemap(javain) (const int* ints, int nints) "$javainput"
%typemap(in) (const int* ints, int nints) {
  $1 = NULL;
  $2 = 0;
  if ($input != NULL) {
    jint* a_;
    $2 = (int)(*jenv)->GetArrayLength(jenv, $input);
    a_ = (jint*)calloc((size_t)$2 + 1, sizeof(jint));
    if (a_ == NULL) {
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "qc: out of memory");
      return $null;
    }
    (*jenv)->GetIntArrayRegion(jenv, $input, 0, (jsize)$2, a_);
    $1 = ($1_ltype)a_;
  }
}
%typemap(freearg) (const int* ints, int nints) %{ free((void*)$1); %}

/* ---- long[] in (copied) -------------------------------------------------- */
%typemap(jni) (const jlong* longs, int nlongs) "jlongArray"
%typemap(jtype) (const jlong* longs, int nlongs) "long[]"
%typemap(jstype) (const jlong* longs, int nlongs) "long[]"
%typemap(javain) (const jlong* longs, int nlongs) "$javainput"
%typemap(in) (const jlong* longs, int nlongs) {
  $1 = NULL;
  $2 = 0;
  if ($input != NULL) {
    jlong* a_;
    $2 = (int)(*jenv)->GetArrayLength(jenv, $input);
    a_ = (jlong*)calloc((size_t)$2 + 1, sizeof(jlong));
    if (a_ == NULL) {
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "qc: out of memory");
      return $null;
    }
    (*jenv)->GetLongArrayRegion(jenv, $input, 0, (jsize)$2, a_);
    $1 = ($1_ltype)a_;
  }
}
%typemap(freearg) (const jlong* longs, int nlongs) %{ free((void*)$1); %}

/* ---- byte[][] of UTF-8 names (entries may be null) in -------------------- */
%typemap(jni) (char** names, int nnames) "jobjectArray"
%typemap(jtype) (char** names, int nnames) "byte[][]"
%typemap(jstype) (char** names, int nnames) "byte[][]"
%typemap(javain) (char** names, int nnames) "$javainput"
%typemap(in) (char** names, int nnames) {
  $1 = NULL;
  $2 = 0;
  if ($input != NULL) {
    int i_;
    int ok_ = 1;
    $2 = (int)(*jenv)->GetArrayLength(jenv, $input);
    $1 = (char**)calloc((size_t)$2 + 1, sizeof(char*));
    ok_ = $1 != NULL;
    for (i_ = 0; ok_ && i_ < $2; ++i_) {
      jbyteArray b_ = (jbyteArray)(*jenv)->GetObjectArrayElement(jenv, $input, (jsize)i_);
      if (b_ != NULL) {
        jsize n_ = (*jenv)->GetArrayLength(jenv, b_);
        $1[i_] = (char*)malloc((size_t)n_ + 1);
        if ($1[i_] == NULL) {
          ok_ = 0;
        } else {
          (*jenv)->GetByteArrayRegion(jenv, b_, 0, n_, (jbyte*)$1[i_]);
          $1[i_][n_] = '\0';
        }
        (*jenv)->DeleteLocalRef(jenv, b_);
      }
    }
    if (!ok_) {
      if ($1 != NULL) {
        for (i_ = 0; i_ < $2; ++i_) free($1[i_]);
        free($1);
      }
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "qc: out of memory");
      return $null;
    }
  }
}
%typemap(freearg) (char** names, int nnames) {
  if ($1 != NULL) {
    int i_;
    for (i_ = 0; i_ < $2; ++i_) free($1[i_]);
    free($1);
  }
}

/* ---- functions of qc.h used as they are -------------------------------- */
int qc_version_number(void);
const char* qc_version_string(void);
const char* qc_status_string(qc_status_t status);

qc_rc qc_comm_destroy(qc_comm_t comm);
qc_rc qc_comm_rank(qc_comm_t comm, int* out);
qc_rc qc_comm_size(qc_comm_t comm, int* out);
qc_rc qc_comm_get_stats(qc_comm_t comm, qc_stats_t* stats);
qc_rc qc_comm_get_layer_stats(qc_comm_t comm, const char* layer, qc_layer_stats_t* stats);
qc_rc qc_comm_set_layer_policy(qc_comm_t comm, const char* pattern, const qc_policy_t* policy);
qc_rc qc_comm_get_layer_policy(qc_comm_t comm, const char* layer, qc_policy_t* policy);
qc_rc qc_comm_apply_preset(qc_comm_t comm, const char* name, const qc_policy_t* base);

qc_rc qc_error_buffer_destroy(qc_error_buffer_t error_buffer);
qc_rc qc_error_buffer_reset(qc_error_buffer_t error_buffer);
qc_rc qc_error_buffer_norm(qc_error_buffer_t error_buffer, double* out);
qc_rc qc_error_buffer_load(qc_error_buffer_t error_buffer, const void* src, size_t size);

qc_rc qc_codec_decode(const void* src, size_t size, void* dst, size_t count, qc_dtype_t dtype);

/* Requests (qc.h section 6). test: *out is 1 once done, and the status is
 * then the collective's (thrown); wait blocks, with no lock held here. */
qc_rc qc_request_test(qc_request_t request, int* out);
qc_rc qc_request_wait(qc_request_t request);
qc_rc qc_request_free(qc_request_t request);

/* Sparse allreduce results (qc.h section 5); NULL (0) is accepted. */
qc_rc qc_sparse_result_destroy(qc_sparse_result_t result);

/* Names of enum values (qc.h): null for a value the library does not know. */
const char* qc_codec_name(qc_codec_t value);
const char* qc_algorithm_name(qc_algorithm_t value);
const char* qc_dtype_name(qc_dtype_t value);
const char* qc_reduce_op_name(qc_reduce_op_t value);
const char* qc_rounding_name(qc_rounding_t value);
const char* qc_scale_name(qc_scale_t value);
const char* qc_transport_name(qc_transport_t value);
const char* qc_adapt_method_name(qc_adapt_method_t value);

/* ---- small C helpers where the C signature does not map directly -------- */
%inline %{
/* qc_<enum>_from_name with an int out, which the Java side maps to its enum. */
qc_rc qcj_codec_from_name(const char* name, int* out) {
  qc_codec_t v;
  const qc_rc s = qc_codec_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_algorithm_from_name(const char* name, int* out) {
  qc_algorithm_t v;
  const qc_rc s = qc_algorithm_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_dtype_from_name(const char* name, int* out) {
  qc_dtype_t v;
  const qc_rc s = qc_dtype_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_reduce_op_from_name(const char* name, int* out) {
  qc_reduce_op_t v;
  const qc_rc s = qc_reduce_op_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_rounding_from_name(const char* name, int* out) {
  qc_rounding_t v;
  const qc_rc s = qc_rounding_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_scale_from_name(const char* name, int* out) {
  qc_scale_t v;
  const qc_rc s = qc_scale_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_transport_from_name(const char* name, int* out) {
  qc_transport_t v;
  const qc_rc s = qc_transport_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
qc_rc qcj_adapt_method_from_name(const char* name, int* out) {
  qc_adapt_method_t v;
  const qc_rc s = qc_adapt_method_from_name(name, &v);
  if (s == QC_SUCCESS) *out = (int)v;
  return s;
}
/* qc_comm_create_local(_with_config): the handles come back in handles[].
 * timeout_seconds <= 0 means the default configuration (config NULL). */
qc_rc qcj_comm_create_local(int nranks, double timeout_seconds, jlong* handles, int nhandles) {
  qc_comm_t* comms;
  qc_status_t st;
  int i;
  if (nranks < 1 || nhandles < nranks) return qc_comm_create_local(nranks, NULL);
  comms = (qc_comm_t*)calloc((size_t)nranks, sizeof(qc_comm_t));
  if (comms == NULL) return QC_ERROR_OUT_OF_MEMORY;
  if (timeout_seconds > 0) {
    qc_comm_config_t config;
    memset(&config, 0, sizeof(config));
    config.struct_size = sizeof(config);
    st = qc_comm_config_init(&config);
    if (st == QC_SUCCESS) {
      config.timeout_seconds = timeout_seconds;
      st = qc_comm_create_local_with_config(nranks, &config, comms);
    }
  } else {
    st = qc_comm_create_local(nranks, comms);
  }
  if (st == QC_SUCCESS)
    for (i = 0; i < nranks; ++i) handles[i] = (jlong)(intptr_t)comms[i];
  free(comms);
  return st;
}

/* qc_comm_get_async_error as one status: the group's failure, which the
 * qc_rc typemap throws with the message the library set, or the query's own
 * failure. Comm.asyncError() catches it and returns it. */
qc_rc qcj_comm_async_error(qc_comm_t comm) {
  qc_status_t failure = QC_SUCCESS;
  qc_status_t st = qc_comm_get_async_error(comm, &failure);
  return st != QC_SUCCESS ? st : failure;
}

qc_rc qcj_error_buffer_create(qc_comm_t comm, size_t count, long long* out) {
  qc_error_buffer_t eb = NULL;
  qc_status_t st = qc_error_buffer_create(comm, count, &eb);
  *out = (long long)(intptr_t)eb;
  return st;
}

/* dst NULL: only *out (the bytes needed) is set. */
qc_rc qcj_error_buffer_save(qc_error_buffer_t error_buffer, void* dst, size_t capacity,
                            long long* out) {
  size_t size = 0;
  qc_status_t st = qc_error_buffer_save(error_buffer, dst, capacity, &size);
  *out = (long long)size;
  return st;
}

qc_rc qcj_allreduce(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                    qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                    qc_error_buffer_t error_buffer) {
  return qc_allreduce(comm, sendbuf, recvbuf, count, dtype, op, layer, error_buffer, NULL);
}

qc_rc qcj_alltoall(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                   qc_dtype_t dtype, const char* layer) {
  return qc_alltoall(comm, sendbuf, recvbuf, count_per_rank, dtype, layer, NULL);
}

qc_rc qcj_reduce_scatter(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                         qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                         qc_error_buffer_t error_buffer) {
  return qc_reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op, layer, error_buffer,
                           NULL);
}

qc_rc qcj_allgather(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t sendcount,
                    qc_dtype_t dtype, const char* layer, qc_error_buffer_t error_buffer) {
  return qc_allgather(comm, sendbuf, recvbuf, sendcount, dtype, layer, error_buffer, NULL);
}

/* sendbuf: null on the ranks other than the root (Java passes it there only). */
qc_rc qcj_broadcast(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                    qc_dtype_t dtype, int root, const char* layer) {
  return qc_broadcast(comm, sendbuf, recvbuf, count, dtype, root, layer, NULL);
}

/* ---- sparse allreduce: indices as direct LongBuffers (int64_t, native order),
 * values and dense tables as direct FloatBuffers; Java checks their sizes. The
 * result handle comes back in *out (0 on failure); Java frees it. */
qc_rc qcj_sparse_allreduce(qc_comm_t comm, const void* indices, const void* values, size_t nnz,
                           size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op,
                           const char* layer, long long* out) {
  qc_sparse_result_t result = NULL;
  qc_status_t st = qc_sparse_allreduce(comm, (const int64_t*)indices, values, nnz, row_len,
                                       dtype, op, layer, &result);
  *out = (long long)(intptr_t)result;
  return st;
}

qc_rc qcj_sparse_allreduce_dense(qc_comm_t comm, const void* indices, const void* values,
                                 size_t nnz, size_t row_len, size_t nrows, void* dense,
                                 qc_dtype_t dtype, qc_reduce_op_t op, const char* layer) {
  return qc_sparse_allreduce_dense(comm, (const int64_t*)indices, values, nnz, row_len, nrows,
                                   dense, dtype, op, layer);
}

qc_rc qcj_sparse_result_nnz(qc_sparse_result_t result, long long* out) {
  size_t nnz = 0;
  qc_status_t st = qc_sparse_result_nnz(result, &nnz);
  *out = (long long)nnz;
  return st;
}

qc_rc qcj_sparse_result_copy(qc_sparse_result_t result, void* indices_out, void* values_out,
                             size_t capacity) {
  return qc_sparse_result_copy(result, (int64_t*)indices_out, values_out, capacity);
}

qc_rc qcj_encoded_size(const qc_policy_t* policy, size_t count, long long* out) {
  size_t n = 0;
  qc_status_t st = qc_codec_encoded_size(policy, count, &n);
  *out = (long long)n;
  return st;
}

qc_rc qcj_encode(const qc_policy_t* policy, const void* src, size_t count, qc_dtype_t dtype,
                 void* dst, size_t capacity, long long* out) {
  size_t written = 0;
  qc_status_t st = qc_codec_encode(policy, src, count, dtype, dst, capacity, &written);
  *out = (long long)written;
  return st;
}

/* Emulation of `collective` (enum qcj_collective) over buffers laid out
 * rank after rank: rank i's send buffer starts at sendbuf + i * send_stride
 * elements, its receive buffer at recvbuf + i * recv_stride (the strides
 * differ where the call's input and output sizes do: reduce-scatter,
 * allgather). A broadcast reads the root's row only; the others go to qc as
 * NULL, as qc_emulate_broadcast allows. count: the C call's count argument.
 * handles: one error buffer per rank (0 for none), or null for none at all.
 * layer and call_index: the call of that layer to reproduce (Java checks
 * call_index >= 0). */
qc_rc qcj_emulate(int collective, int nranks, const void* sendbuf, void* recvbuf,
                  size_t send_stride, size_t recv_stride, size_t count, qc_dtype_t dtype,
                  qc_reduce_op_t op, int root, const char* layer, long long call_index,
                  const qc_policy_t* policy, jlong* handles, int nhandles) {
  const uint64_t call = (uint64_t)call_index;
  const void** sends;
  void** recvs;
  qc_error_buffer_t* ebs = NULL;
  qc_status_t st;
  const size_t send_bytes = send_stride * qcj_dtype_size(dtype);
  const size_t recv_bytes = recv_stride * qcj_dtype_size(dtype);
  int i;
  if (nranks < 1 || (handles != NULL && nhandles != nranks)) {
    /* qc words the message for a bad nranks; Java checks the array lengths */
    return qcj_emulate_run(collective, nranks, NULL, NULL, count, dtype, op, root, layer, call,
                           policy, NULL);
  }
  sends = (const void**)calloc((size_t)nranks, sizeof(void*));
  recvs = (void**)calloc((size_t)nranks, sizeof(void*));
  if (handles != NULL) ebs = (qc_error_buffer_t*)calloc((size_t)nranks, sizeof(qc_error_buffer_t));
  if (sends == NULL || recvs == NULL || (handles != NULL && ebs == NULL)) {
    free((void*)sends);
    free(recvs);
    free(ebs);
    return QC_ERROR_OUT_OF_MEMORY;
  }
  for (i = 0; i < nranks; ++i) {
    const int read_here = sendbuf != NULL && (collective != QCJ_BROADCAST || i == root);
    sends[i] = read_here ? (const char*)sendbuf + (size_t)i * send_bytes : NULL;
    recvs[i] = recvbuf == NULL ? NULL : (char*)recvbuf + (size_t)i * recv_bytes;
    if (ebs != NULL) ebs[i] = (qc_error_buffer_t)(intptr_t)handles[i];
  }
  st = qcj_emulate_run(collective, nranks, sends, recvs, count, dtype, op, root, layer, call,
                       policy, ebs);
  free((void*)sends);
  free(recvs);
  free(ebs);
  return st;
}

/* qc_emulate_sparse_allreduce (dense_form 0: the result handle in *out) or
 * qc_emulate_sparse_allreduce_dense (dense_form 1: rank r's table of nrows x row_len
 * elements at dense + r x nrows x row_len) over rows laid out rank after rank: rank r
 * has longs[r] rows, its indices and values following those of the ranks before it.
 * Java checks that nlongs == nranks >= 1 and the counts. */
qc_rc qcj_emulate_sparse(int nranks, const void* indices, const void* values,
                         const jlong* longs, int nlongs, size_t row_len, int dense_form,
                         size_t nrows, void* dense, qc_dtype_t dtype, qc_reduce_op_t op,
                         const char* layer, long long call_index, const qc_policy_t* policy,
                         long long* out) {
  const uint64_t call = (uint64_t)call_index;
  const size_t n = nranks > 0 ? (size_t)nranks : 0;
  const int64_t** idx = (const int64_t**)calloc(n + 1, sizeof(int64_t*));
  const void** vals = (const void**)calloc(n + 1, sizeof(void*));
  size_t* nnz = (size_t*)calloc(n + 1, sizeof(size_t));
  void** tables = (void**)calloc(n + 1, sizeof(void*));
  qc_sparse_result_t result = NULL;
  qc_status_t st;
  size_t row = 0;
  size_t i;
  *out = 0;
  if (idx == NULL || vals == NULL || nnz == NULL || tables == NULL) {
    st = QC_ERROR_OUT_OF_MEMORY;
  } else {
    for (i = 0; i < n && (int)i < nlongs; ++i) {
      nnz[i] = (size_t)longs[i];
      idx[i] = nnz[i] == 0 ? NULL : (const int64_t*)indices + row;
      vals[i] = nnz[i] == 0 ? NULL : (const char*)values + row * row_len * qcj_dtype_size(dtype);
      tables[i] = dense == NULL ? NULL
                                : (char*)dense + i * nrows * row_len * qcj_dtype_size(dtype);
      row += nnz[i];
    }
    if (dense_form) {
      st = qc_emulate_sparse_allreduce_dense(nranks, idx, vals, nnz, row_len, nrows, tables,
                                             dtype, op, layer, call, policy);
    } else {
      st = qc_emulate_sparse_allreduce(nranks, idx, vals, nnz, row_len, dtype, op, layer, call,
                                       policy, &result);
      *out = (long long)(intptr_t)result;
    }
  }
  free((void*)idx);
  free((void*)vals);
  free(nnz);
  free(tables);
  return st;
}

qc_rc qcj_comm_layer_count(qc_comm_t comm, long long* out) {
  size_t n = 0;
  qc_status_t st = qc_comm_layer_count(comm, &n);
  *out = (long long)n;
  return st;
}

/* dst NULL (capacity 0): only the name's length is set. */
qc_rc qcj_comm_layer_name(qc_comm_t comm, size_t index, void* dst, size_t capacity,
                          long long* out) {
  size_t length = 0;
  qc_status_t st = qc_comm_layer_name(comm, index, (char*)dst, capacity, &length);
  *out = (long long)length;
  return st;
}

/* qc_comm_adapt_policies with QC_ADAPT_CONFIG_INIT, or with method, alpha and the
 * allowed widths (ints, nints) when use_defaults is 0. */
qc_rc qcj_adapt_policies(qc_comm_t comm, int use_defaults, qc_adapt_method_t method,
                         double alpha, const int* ints, int nints, qc_adapt_report_t* report) {
  qc_adapt_config_t config = QC_ADAPT_CONFIG_INIT;
  int i;
  if (!use_defaults) {
    config.method = method;
    config.alpha = alpha;
    config.num_allowed = nints; /* qc checks 1..8 */
    for (i = 0; i < 8; ++i) config.allowed_bits[i] = (ints != NULL && i < nints) ? ints[i] : 0;
  }
  return qc_comm_adapt_policies(comm, &config, report);
}

/* qc_allreduce_segments; names NULL: every segment is "*". Java makes sure
 * that nnames == nlongs and that the counts are >= 0. */
qc_rc qcj_allreduce_segments(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                             const jlong* longs, int nlongs, char** names, int nnames,
                             qc_dtype_t dtype, qc_reduce_op_t op,
                             qc_error_buffer_t error_buffer) {
  size_t* counts;
  qc_status_t st;
  int i;
  (void)nnames;
  counts = (size_t*)calloc((size_t)nlongs + 1, sizeof(size_t));
  if (counts == NULL) return QC_ERROR_OUT_OF_MEMORY;
  for (i = 0; i < nlongs; ++i) counts[i] = (size_t)longs[i];
  st = qc_allreduce_segments(comm, sendbuf, recvbuf, (size_t)nlongs, counts,
                             (const char* const*)names, dtype, op, error_buffer, NULL);
  free(counts);
  return st;
}

/* ---- non-blocking collectives: the request handle comes back in *out ---- */
/* The buffers' addresses go to a task that runs after this returns: the
 * Java Request keeps their java.nio objects reachable until it is done. */
qc_rc qcj_iallreduce(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                     qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                     qc_error_buffer_t error_buffer, long long* out) {
  qc_request_t request = NULL;
  qc_status_t st = qc_iallreduce(comm, sendbuf, recvbuf, count, dtype, op, layer, error_buffer,
                                 &request);
  *out = (long long)(intptr_t)request;
  return st;
}

/* As qcj_allreduce_segments; qc copies counts and layers at the start. */
qc_rc qcj_iallreduce_segments(qc_comm_t comm, const void* sendbuf, void* recvbuf,
                              const jlong* longs, int nlongs, char** names, int nnames,
                              qc_dtype_t dtype, qc_reduce_op_t op,
                              qc_error_buffer_t error_buffer, long long* out) {
  qc_request_t request = NULL;
  size_t* counts;
  qc_status_t st;
  int i;
  (void)nnames;
  *out = 0;
  counts = (size_t*)calloc((size_t)nlongs + 1, sizeof(size_t));
  if (counts == NULL) return QC_ERROR_OUT_OF_MEMORY;
  for (i = 0; i < nlongs; ++i) counts[i] = (size_t)longs[i];
  st = qc_iallreduce_segments(comm, sendbuf, recvbuf, (size_t)nlongs, counts,
                              (const char* const*)names, dtype, op, error_buffer, &request);
  free(counts);
  *out = (long long)(intptr_t)request;
  return st;
}

qc_rc qcj_ialltoall(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count_per_rank,
                    qc_dtype_t dtype, const char* layer, long long* out) {
  qc_request_t request = NULL;
  qc_status_t st = qc_ialltoall(comm, sendbuf, recvbuf, count_per_rank, dtype, layer, &request);
  *out = (long long)(intptr_t)request;
  return st;
}

qc_rc qcj_ireduce_scatter(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                          qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                          qc_error_buffer_t error_buffer, long long* out) {
  qc_request_t request = NULL;
  qc_status_t st = qc_ireduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op, layer,
                                      error_buffer, &request);
  *out = (long long)(intptr_t)request;
  return st;
}

qc_rc qcj_iallgather(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t sendcount,
                     qc_dtype_t dtype, const char* layer, qc_error_buffer_t error_buffer,
                     long long* out) {
  qc_request_t request = NULL;
  qc_status_t st = qc_iallgather(comm, sendbuf, recvbuf, sendcount, dtype, layer, error_buffer,
                                 &request);
  *out = (long long)(intptr_t)request;
  return st;
}

/* isparseAllreduce: the request in out[0], the result handle (made at once, read
 * once the request has completed) in out[1]; both 0 when the start fails. */
qc_rc qcj_isparse_allreduce(qc_comm_t comm, const void* indices, const void* values, size_t nnz,
                            size_t row_len, qc_dtype_t dtype, qc_reduce_op_t op,
                            const char* layer, jlong* handles, int nhandles) {
  qc_sparse_result_t result = NULL;
  qc_request_t request = NULL;
  qc_status_t st = qc_isparse_allreduce(comm, (const int64_t*)indices, values, nnz, row_len,
                                        dtype, op, layer, &result, &request);
  (void)nhandles; /* Java passes 2 */
  handles[0] = (jlong)(intptr_t)request;
  handles[1] = (jlong)(intptr_t)result;
  return st;
}

qc_rc qcj_isparse_allreduce_dense(qc_comm_t comm, const void* indices, const void* values,
                                  size_t nnz, size_t row_len, size_t nrows, void* dense,
                                  qc_dtype_t dtype, qc_reduce_op_t op, const char* layer,
                                  long long* out) {
  qc_request_t request = NULL;
  qc_status_t st = qc_isparse_allreduce_dense(comm, (const int64_t*)indices, values, nnz,
                                              row_len, nrows, dense, dtype, op, layer,
                                              &request);
  *out = (long long)(intptr_t)request;
  return st;
}

qc_rc qcj_ibroadcast(qc_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                     qc_dtype_t dtype, int root, const char* layer, long long* out) {
  qc_request_t request = NULL;
  qc_status_t st = qc_ibroadcast(comm, sendbuf, recvbuf, count, dtype, root, layer, &request);
  *out = (long long)(intptr_t)request;
  return st;
}
%}
