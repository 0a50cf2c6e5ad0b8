// Creating communicators: the QC_* environment's defaults, and the local,
// MPI, NCCL and callback transports a communicator is made over.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/log.h"
#include "core/params.h"
#include "core/policy.h"
#include "core/transports/callback_transport.h"
#include "core/transports/local_transport.h"
#include "cpu/codec_kernels.h"
#if QC_HAVE_NCCL
#include "core/transports/nccl_transport.h"
#include "cuda/nccl_backend.h"
#endif
#if QC_HAVE_MPI
#include "core/transports/mpi_transport.h"
#endif

namespace qc {

namespace {

// What the QC_* environment (params.h) gives a new communicator.
struct CommDefaults {
  double timeout_seconds = 300.0;
  qc_policy_t star{};
  bool device_codec = true;
  bool progress_thread = true;
  size_t pipeline_chunk_bytes = 0;
  int sparse_schedule = -1;
};

// Reads the QC_* environment over the configured timeout. A bad value fails
// the creation, before anything is made, so a typo never runs silently with
// defaults.
Status environment_defaults(double configured_timeout, CommDefaults* out) {
  EnvParams env;
  QC_RETURN_IF_ERROR(read_env_params(&env));
  out->star = default_policy();
  apply_env_to_policy(env, &out->star);
  Status valid = validate_policy(out->star, "*");
  if (!valid) {
    return invalid_argument("the QC_* environment variables make an invalid default policy: " +
                            valid.message());
  }
  warn_if_error_feedback_diverges(out->star, "the QC_* environment's default policy");
  out->timeout_seconds = env_timeout(env, configured_timeout);
  out->device_codec = env_device_codec(env);
  out->progress_thread = env_progress_thread(env);
  out->pipeline_chunk_bytes = env_pipeline_chunk(env);
  out->sparse_schedule = env_sparse_schedule(env);
  return Status::ok();
}

// "300", "0.25": a number of seconds as people write it.
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// QC_DEBUG=info: what was created, with what this build of qc can do.
void log_created(const Communicator& comm, const CommDefaults& defaults) {
  if (!log_enabled(LogLevel::kInfo)) return;
  const Transport& t = *comm.transport;
  set_log_rank(t.rank());
  auto yes = [](bool b) { return b ? "yes" : "no"; };
#if QC_HAVE_MPI
  const bool mpi = true;
#else
  const bool mpi = false;
#endif
#if QC_HAVE_NCCL
  const bool nccl = true;
#else
  const bool nccl = false;
#endif
#if QC_HAVE_CUDA
  const bool cuda = true;
#else
  const bool cuda = false;
#endif
  log_info(std::string("communicator created: transport ") + t.name() + ", rank " +
           std::to_string(t.rank()) + " of " + std::to_string(t.size()) + ", timeout " +
           seconds(defaults.timeout_seconds) + " s, progress " +
           (comm.progress_inline ? "inline" : "thread") + ", pipeline chunk " +
           std::to_string(defaults.pipeline_chunk_bytes) + " bytes; qc " + qc_version_string() +
           " built with MPI " + yes(mpi) + ", NCCL " + yes(nccl) + ", CUDA " + yes(cuda) +
           ", CPU kernels " + cpu::kernels().name + "; default policy: " +
           describe_policy(defaults.star));
}

// A communicator around `transport` with the settings every transport starts
// from.
std::unique_ptr<Communicator> make_comm(std::unique_ptr<Transport> transport,
                                     const CommDefaults& defaults) {
  auto comm = std::make_unique<Communicator>();
  comm->transport = std::move(transport);
  comm->timeout_seconds = defaults.timeout_seconds;
  comm->device_codec = defaults.device_codec;
  comm->progress_inline =
      !defaults.progress_thread || !comm->transport->supports_progress_thread();
  comm->pipeline_chunk_values = defaults.pipeline_chunk_bytes / sizeof(float);
  comm->sparse_schedule = defaults.sparse_schedule;
  comm->policies.set("*", defaults.star);
  comm->stats.struct_size = sizeof(qc_stats_t);
  log_created(*comm, defaults);
  return comm;
}

#if !QC_HAVE_NCCL
Status no_nccl() {
  return unsupported("this build of qc has no NCCL transport (it needs a CUDA build with "
                     "NCCL's header: -DQC_WITH_CUDA=ON, NCCL_ROOT)");
}
#endif

}  // namespace

Status create_local_group(int nranks, double timeout_seconds,
                          std::vector<std::unique_ptr<Communicator>>* group,
                          RankScheduler* scheduler) {
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  auto local = std::make_shared<LocalGroup>(nranks, scheduler);
  group->clear();
  group->reserve(nranks);
  for (int r = 0; r < nranks; ++r) {
    group->push_back(make_comm(std::make_unique<LocalTransport>(local, r), defaults));
  }
  return Status::ok();
}

Status create_mpi_comm(int64_t fortran_handle, double timeout_seconds,
                       std::unique_ptr<Communicator>* comm) {
#if QC_HAVE_MPI
  if (fortran_handle < INT32_MIN || fortran_handle > INT32_MAX) {
    return invalid_argument("argument 'config': field 'mpi_comm' is " +
                            std::to_string(fortran_handle) +
                            ", not a Fortran MPI handle (MPI_Comm_c2f gives an int)");
  }
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  std::unique_ptr<Transport> transport;
  QC_RETURN_IF_ERROR(MpiTransport::create(static_cast<MPI_Fint>(fortran_handle), &transport));
  *comm = make_comm(std::move(transport), defaults);
  return Status::ok();
#else
  (void)fortran_handle;
  (void)timeout_seconds;
  (void)comm;
  return unsupported("argument 'config': this build of qc has no MPI transport (configure with "
                     "an MPI library installed, or -DQC_WITH_MPI=ON to require one)");
#endif
}

Status create_nccl_comm(void* nccl_comm, double timeout_seconds,
                        std::unique_ptr<Communicator>* comm) {
#if QC_HAVE_NCCL
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  std::unique_ptr<NcclBackend> backend;
  QC_RETURN_IF_ERROR(cuda::make_nccl_backend(nccl_comm, &backend));
  *comm = make_comm(std::make_unique<NcclTransport>(std::move(backend)), defaults);
  return Status::ok();
#else
  (void)nccl_comm;
  (void)timeout_seconds;
  (void)comm;
  return unsupported("argument 'config': " + no_nccl().message());
#endif
}

Status create_nccl_id_comm(const uint8_t* id, int rank, int nranks, double timeout_seconds,
                           std::unique_ptr<Communicator>* comm) {
#if QC_HAVE_NCCL
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  std::unique_ptr<NcclBackend> backend;
  QC_RETURN_IF_ERROR(cuda::make_nccl_backend_from_id(id, rank, nranks, &backend));
  *comm = make_comm(std::make_unique<NcclTransport>(std::move(backend)), defaults);
  return Status::ok();
#else
  (void)id;
  (void)rank;
  (void)nranks;
  (void)timeout_seconds;
  (void)comm;
  return no_nccl();
#endif
}

Status create_nccl_unique_id(uint8_t* id) {
#if QC_HAVE_NCCL
  return cuda::make_nccl_unique_id(id);
#else
  (void)id;
  return no_nccl();
#endif
}

Status create_callback_comm(const qc_transport_callbacks_t& callbacks, double timeout_seconds,
                            std::unique_ptr<Communicator>* comm) {
  CommDefaults defaults;
  QC_RETURN_IF_ERROR(environment_defaults(timeout_seconds, &defaults));
  *comm = make_comm(std::make_unique<CallbackTransport>(callbacks), defaults);
  return Status::ok();
}

}  // namespace qc
