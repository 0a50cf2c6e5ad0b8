// Every QC_* environment variable the library reads, in one list.
//
// QC_PARAM_LIST is the only place a variable is named: the EnvParams fields,
// the parser dispatch, qc-info's listing and docs/parameters.md are all
// generated from it, so a new variable cannot be read without being
// documented (tests/unit/test_params.cpp compares the page with the list).
//
// Variables override the "*" default policy and the communicator timeout;
// they never override a per-layer policy the program set, because the program
// knows better than the environment which layers must stay exact.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "core/log_level.h"
#include "core/status.h"
#include "qc.h"

namespace qc {
namespace cpu {
enum class Isa;  // cpu/isa.h; opaque here to keep this header free of the CPU code
}  // namespace cpu

// Each parser returns false for text outside `allowed`; the message is then
// built from the entry, so parsers never format errors themselves.
bool parse_log_level(const char* text, LogLevel* out);
bool parse_text(const char* text, std::string* out);
bool parse_codec(const char* text, qc_codec_t* out);
bool parse_bits(const char* text, int* out);
bool parse_positive_int(const char* text, int* out);
bool parse_algorithm(const char* text, qc_algorithm_t* out);
bool parse_flag(const char* text, int* out);
bool parse_byte_size(const char* text, size_t* out);
bool parse_positive_seconds(const char* text, double* out);
// Isa is opaque here, so this parser stores the Isa's value as an int and
// auto as -1 (let the dispatcher choose).
bool parse_cpu_isa(const char* text, int* out);
// A SparseSchedule (sparse_plan.h) as an int, auto as -1.
bool parse_sparse_schedule(const char* text, int* out);

// X(field, NAME, type, C++ type, parser, default, allowed, doc)
//   type: enum | int | size | double | string; it prefixes `allowed` in error
//   messages ("expected an integer 1..8"). Text must not contain '|': it ends
//   up in a Markdown table.
// The defaults of policy fields must match QC_POLICY_INIT / QC_COMM_CONFIG_INIT
// (a test checks).
#define QC_PARAM_LIST(X)                                                                       \
  X(debug, "QC_DEBUG", enum, ::qc::LogLevel, ::qc::parse_log_level, "warn",                    \
    "none, warn, info, debug (or 0..3)",                                                       \
    "What the library prints on its own, one line each (`qc <UTC time> <host>:<pid>:<tid> "    \
    "[<rank>] <level>: <text>`): nothing; warnings; info: communicator creation (transport, "   \
    "ranks, build features), each layer's policy on first use, the algorithm auto chose and "  \
    "why, a layer's messages sent uncompressed, failures of the group naming the peer; "      \
    "debug: also a line per call. An invalid value prints one warning and uses warn; "         \
    "communicator creation then fails with it.")                                               \
  X(debug_file, "QC_DEBUG_FILE", string, std::string, ::qc::parse_text, "",                    \
    "a file path; %p is replaced by the process id",                                           \
    "Append log lines to this file instead of stderr (one file per process with %p). If it "   \
    "cannot be opened, lines go to stderr after one warning.")                                 \
  X(log_level, "QC_LOG_LEVEL", enum, ::qc::LogLevel, ::qc::parse_log_level, "warn",            \
    "none, warn, info, debug (or 0..3)",                                                       \
    "Deprecated alias of QC_DEBUG, read only when QC_DEBUG is unset.")                         \
  X(codec, "QC_CODEC", enum, qc_codec_t, ::qc::parse_codec, "none",                            \
    "none, fp16, bf16, minmax, qsgd, global_linear, global_exp, onebit, topk, mxfp8, "         \
    "mxfp8_e5m2, mxfp6, mxfp6_e3m2, mxfp4, mxint8, nvfp4",                                      \
    "Codec of the \"*\" default policy (layers without a policy of their own).")               \
  X(bits, "QC_BITS", int, int, ::qc::parse_bits, "4", "1..8",                                  \
    "Code width of the \"*\" default policy (qsgd, global_linear and global_exp need 2..8; "  \
    "checked with QC_CODEC when the communicator is created).")                                \
  X(bucket, "QC_BUCKET", int, int, ::qc::parse_positive_int, "128", ">= 1",                    \
    "Elements per bucket of the \"*\" default policy.")                                        \
  X(algo, "QC_ALGO", enum, qc_algorithm_t, ::qc::parse_algorithm, "auto",                      \
    "auto, ring, rd, recursive_doubling, sra, tree, native",                                   \
    "Allreduce algorithm of the \"*\" default policy; rd is short for recursive_doubling.")    \
  X(ef, "QC_EF", enum, int, ::qc::parse_flag, "0", "0, 1",                                     \
    "Error feedback in the \"*\" default policy.")                                             \
  X(min_compress, "QC_MIN_COMPRESS", size, size_t, ::qc::parse_byte_size, "16384",             \
    ">= 0 bytes, optional suffix K, M or G (times 1024, 1024^2, 1024^3)",                      \
    "Messages smaller than this go uncompressed under the \"*\" default policy; 0 always "     \
    "compresses.")                                                                             \
  X(timeout, "QC_TIMEOUT", double, double, ::qc::parse_positive_seconds, "300",                \
    "> 0 seconds, finite (nan, inf, 0, negatives and values past the double range are "       \
    "refused)",                                                                                \
    "How long a blocked collective waits for its peers before QC_ERROR_TIMEOUT; replaces "     \
    "the configured timeout_seconds. Values above 1e9 (about 32 years) wait 1e9 s: for ever "  \
    "in practice.")                                                                            \
  X(cpu_isa, "QC_CPU_ISA", enum, int, ::qc::parse_cpu_isa, "auto",                             \
    "auto, scalar, avx2, avx512",                                                              \
    "CPU kernels to use; auto picks the best this CPU supports, and so does a path the CPU "   \
    "lacks.")                                                                                  \
  X(device_codec, "QC_DEVICE_CODEC", enum, int, ::qc::parse_flag, "1", "0, 1",                 \
    "1: collectives on device buffers run the codec on the device and stage only compressed "  \
    "bytes where the call allows (docs/cuda.md). 0: they copy the whole buffers to the host "  \
    "and run the host path, a switch for telling a device-codec problem from others; the "     \
    "results are the same bytes either way.")                                                  \
  X(progress_thread, "QC_PROGRESS_THREAD", enum, int, ::qc::parse_flag, "1", "0, 1",           \
    "1: the non-blocking collectives (qc_iallreduce ...) run on a progress thread of the "    \
    "communicator while the caller goes on. 0: no thread; each runs to completion when it is " \
    "started. MPI communicators below MPI_THREAD_MULTIPLE never start one.")                  \
  X(pipeline_chunk, "QC_PIPELINE_CHUNK", size, size_t, ::qc::parse_byte_size, "128K",         \
    ">= 0 bytes, optional suffix K, M or G (times 1024, 1024^2, 1024^3)",                      \
    "Host SRA, ring and alltoall cut blocks larger than this (in float32 bytes, rounded up "   \
    "to the codec's bucket) into pieces whose encode, transfer and decode overlap; the "       \
    "results are the same bits. 0: whole blocks. Top-k and fused (segments) calls are never " \
    "cut.")                                                                                    \
  X(sparse_schedule, "QC_SPARSE_SCHEDULE", enum, int, ::qc::parse_sparse_schedule, "auto",     \
    "auto, allgather, sra, densify",                                                           \
    "Schedule of every sparse allreduce (docs/algorithms.md): auto chooses per call by the "   \
    "modeled bytes (and the policy's algorithm sra forces sra); the others force one: every "  \
    "rank's rows to every rank, rows summed at their index's owner, or the dense table's "     \
    "allreduce (qc_sparse_allreduce_dense only; the sparse form then runs allgather).")      \
  X(emulation_keep, "QC_EMULATION_KEEP", size, size_t, ::qc::parse_byte_size, "256M",         \
    ">= 0 bytes, optional suffix K, M or G (times 1024, 1024^2, 1024^3)",                      \
    "The qc_emulate_* calls keep up to this many bytes of their virtual ranks' buffers "       \
    "(message slots, working copies) for the next call, so a stream of emulated calls of "     \
    "one shape stops allocating and page-faulting after the first, as a communicator's "       \
    "calls do. The largest set that fits is kept until a larger one replaces it. 0: every "    \
    "call gives them back when it returns. The results are the same bits either way.")

// One variable as read: set only when the text parsed; raw is kept even when
// it did not, so qc-info can show what was wrong.
template <typename T>
struct EnvValue {
  bool set = false;
  T value{};
  std::string raw;
};

struct EnvParams {
#define QC_PARAM_FIELD(field, name, type, ctype, parser, def, allowed, doc) EnvValue<ctype> field;
  QC_PARAM_LIST(QC_PARAM_FIELD)
#undef QC_PARAM_FIELD
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads every variable through `lookup` (a fake environment in tests). Unset
// and empty variables keep their defaults. Every bad value is reported, in
// one QC_ERROR_INVALID_ARGUMENT whose message names each variable, its text
// and what it allows; *out is filled with the good ones either way.
Status read_params(const EnvLookup& lookup, EnvParams* out);
// read_params over the process environment (getenv).
Status read_env_params(EnvParams* out);

// Parses `text` as the variable `name` into its field of *out. Unknown names
// are QC_ERROR_INVALID_ARGUMENT too.
Status parse_env_value(const char* name, const char* text, EnvParams* out);

// Overwrites the fields of *star_policy whose variable is set: codec, bits,
// bucket_size, algorithm, error_feedback, min_compress_bytes. The result
// still needs validate_policy (QC_CODEC=qsgd with QC_BITS=1, for one).
void apply_env_to_policy(const EnvParams& env, qc_policy_t* star_policy);
// QC_TIMEOUT when set, `configured` otherwise.
double env_timeout(const EnvParams& env, double configured);
// QC_DEVICE_CODEC: whether device calls may run the codec on the device.
bool env_device_codec(const EnvParams& env);
// QC_PROGRESS_THREAD: whether non-blocking calls may run on a thread of qc's.
bool env_progress_thread(const EnvParams& env);
// QC_PIPELINE_CHUNK's default ("128K" in the table).
constexpr size_t kDefaultPipelineChunkBytes = 128 * 1024;
// QC_PIPELINE_CHUNK in bytes (its default when unset).
size_t env_pipeline_chunk(const EnvParams& env);
// QC_EMULATION_KEEP's default ("256M" in the table).
constexpr size_t kDefaultEmulationKeepBytes = size_t{256} << 20;
// QC_EMULATION_KEEP in bytes (its default when unset).
size_t env_emulation_keep(const EnvParams& env);
// QC_SPARSE_SCHEDULE (a SparseSchedule; kAuto when unset).
int env_sparse_schedule(const EnvParams& env);
// QC_DEBUG when set, else QC_LOG_LEVEL when set, else warn.
LogLevel env_log_level(const EnvParams& env);

struct ParamInfo {
  const char* name;
  const char* type;
  const char* default_text;
  const char* allowed;
  const char* doc;
};
const ParamInfo* param_table(size_t* count);

// docs/parameters.md, byte for byte.
std::string params_markdown();

// What this build of the library includes ("mpi cuda", "mpi", or "none"):
// the QC_HAVE_* definitions are private to qc_objects, so tools ask here.
const char* build_features();

}  // namespace qc
