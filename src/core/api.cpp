// Entry points for versions, errors, policies and communicators. Every
// function validates its arguments and delegates; QC_API_CALL keeps
// exceptions inside and records failures for qc_last_error().
#include <cstring>
#include <iterator>
#include <cmath>
#include <string>

#include "core/api_checks.h"
#include "core/api_guard.h"
#include "core/communicator.h"
#include "core/policy.h"
#include "core/struct_io.h"

using namespace qc;

namespace {

#define QC_STATUS_NAME_CASE_(name, value, text) \
  case QC_##name:                               \
    return "QC_" #name;

Status read_comm_config(const qc_comm_config_t* user, qc_comm_config_t* out) {
  QC_RETURN_IF_ERROR(read_struct(user, kCommConfigV0Size, default_comm_config(), "config",
                                 "qc_comm_config_t", out));
  const int transport = static_cast<int>(out->transport);
  if (transport < QC_TRANSPORT_LOCAL || transport > QC_TRANSPORT_CALLBACKS) {
    return invalid_argument("argument 'config': field 'transport' is " + std::to_string(transport) +
                            "; expected a qc_transport_t value (0..3)");
  }
  if (!(out->timeout_seconds > 0.0) || !std::isfinite(out->timeout_seconds)) {
    return invalid_argument("argument 'config': field 'timeout_seconds' is " +
                            std::to_string(out->timeout_seconds) +
                            "; expected a finite number of seconds > 0");
  }
  return Status::ok();
}

// The first released layout of qc_transport_callbacks_t.
constexpr size_t kTransportCallbacksV0Size = sizeof(qc_transport_callbacks_t);

qc_transport_callbacks_t default_transport_callbacks() {
  const qc_transport_callbacks_t defaults = QC_TRANSPORT_CALLBACKS_INIT;
  return defaults;
}

Status read_transport_callbacks(const qc_transport_callbacks_t* user,
                                qc_transport_callbacks_t* out) {
  QC_RETURN_IF_ERROR(require(user, "callbacks"));
  QC_RETURN_IF_ERROR(read_struct(user, kTransportCallbacksV0Size, default_transport_callbacks(),
                                 "callbacks", "qc_transport_callbacks_t", out));
  const auto field = [](const char* name) {
    return std::string("argument 'callbacks': field '") + name + "'";
  };
  if (out->size < 1) {
    return invalid_argument(field("size") + " is " + std::to_string(out->size) +
                            "; expected the number of ranks, >= 1");
  }
  if (out->rank < 0 || out->rank >= out->size) {
    return invalid_argument(field("rank") + " is " + std::to_string(out->rank) + "; expected 0.." +
                            std::to_string(out->size - 1) + " (size is " +
                            std::to_string(out->size) + ")");
  }
  if (out->any_thread != 0 && out->any_thread != 1) {
    return invalid_argument(field("any_thread") + " is " + std::to_string(out->any_thread) +
                            "; expected 0 or 1");
  }
  if (out->post_send == nullptr) return invalid_argument(field("post_send") + " is NULL; it is required");
  if (out->post_recv == nullptr) return invalid_argument(field("post_recv") + " is NULL; it is required");
  if (out->test == nullptr) return invalid_argument(field("test") + " is NULL; it is required");
  return Status::ok();
}

// The presets of qc_comm_apply_preset: each is the list of qc_comm_set_layer_policy
// calls that qc.h spells out, in that order; keep the two in step (the test
// tests/unit/test_policy_preset.cpp checks every pattern listed there).
constexpr size_t kCgxMinCompressBytes = 16384;
constexpr const char* kCgxFullPrecisionPatterns[] = {"*bias*", "*norm*", "*Norm*", "*.bn*",
                                                     "bn*",    "*.ln*",  "ln*"};

Status apply_cgx_preset(Communicator* comm, const qc_policy_t& base) {
  qc_policy_t compressed = base;
  if (compressed.min_compress_bytes < kCgxMinCompressBytes) {
    compressed.min_compress_bytes = kCgxMinCompressBytes;
  }
  QC_RETURN_IF_ERROR(validate_policy(compressed, "base"));
  const qc_policy_t full = default_policy();
  warn_if_error_feedback_diverges(compressed, "preset \"cgx\", layer pattern \"*\"");
  comm->policies.set("*", compressed);
  for (const char* pattern : kCgxFullPrecisionPatterns) comm->policies.set(pattern, full);
  return Status::ok();
}

Status check_nranks(int nranks, const qc_comm_t* comms) {
  if (nranks < 1 || nranks > kMaxLocalRanks) {
    return invalid_argument("argument 'nranks' is " + std::to_string(nranks) + "; expected 1.." +
                            std::to_string(kMaxLocalRanks));
  }
  return require(comms, "comms");
}

// Hands new communicators to the handle table and writes their handles.
void publish(std::vector<std::unique_ptr<Communicator>>* made, qc_comm_t* handles) {
  for (size_t r = 0; r < made->size(); ++r) {
    handles[r] = reinterpret_cast<qc_comm_t>(live_communicators().add(std::move((*made)[r])));
  }
}

// `create` fills its argument with the communicator it makes.
template <typename Create>
Status create_published(Create&& create, qc_comm_t* handle) {
  std::vector<std::unique_ptr<Communicator>> one(1);
  QC_RETURN_IF_ERROR(create(&one[0]));
  publish(&one, handle);
  return Status::ok();
}

Status create_published_local_group(int nranks, double timeout_seconds, qc_comm_t* comms) {
  std::vector<std::unique_ptr<Communicator>> made;
  QC_RETURN_IF_ERROR(create_local_group(nranks, timeout_seconds, &made));
  publish(&made, comms);
  return Status::ok();
}

}  // namespace

extern "C" {

QC_API int qc_version_number(void) { return QC_VERSION_NUMBER; }

QC_API const char* qc_version_string(void) { return QC_VERSION_STRING_FOR_MESSAGES; }

QC_API const char* qc_status_string(qc_status_t status) {
  switch (status) {
    QC_STATUS_MAP(QC_STATUS_NAME_CASE_)
  }
  return "QC_UNKNOWN_STATUS";
}

QC_API const char* qc_last_error(void) { return qc::last_error(); }

QC_API qc_status_t qc_policy_init_sized(qc_policy_t* policy, size_t struct_size) {
  return QC_API_CALL({
    return init_struct_sized(default_policy(), kPolicyV0Size, "policy", "qc_policy_t", policy,
                             struct_size);
  });
}

QC_API qc_status_t qc_comm_config_init_sized(qc_comm_config_t* config, size_t struct_size) {
  return QC_API_CALL({
    return init_struct_sized(default_comm_config(), kCommConfigV0Size, "config",
                             "qc_comm_config_t", config, struct_size);
  });
}

QC_API qc_status_t qc_stats_init_sized(qc_stats_t* stats, size_t struct_size) {
  return QC_API_CALL({
    const qc_stats_t zero = QC_STATS_INIT;
    return init_struct_sized(zero, kStatsV0Size, "stats", "qc_stats_t", stats, struct_size);
  });
}

QC_API qc_status_t qc_layer_stats_init_sized(qc_layer_stats_t* stats, size_t struct_size) {
  return QC_API_CALL({
    const qc_layer_stats_t zero = QC_LAYER_STATS_INIT;
    return init_struct_sized(zero, sizeof(qc_layer_stats_t), "stats", "qc_layer_stats_t", stats,
                             struct_size);
  });
}

QC_API qc_status_t qc_adapt_config_init_sized(qc_adapt_config_t* config, size_t struct_size) {
  return QC_API_CALL({
    const qc_adapt_config_t defaults = QC_ADAPT_CONFIG_INIT;
    return init_struct_sized(defaults, sizeof(qc_adapt_config_t), "config", "qc_adapt_config_t",
                             config, struct_size);
  });
}

QC_API qc_status_t qc_adapt_report_init_sized(qc_adapt_report_t* report, size_t struct_size) {
  return QC_API_CALL({
    const qc_adapt_report_t zero = QC_ADAPT_REPORT_INIT;
    return init_struct_sized(zero, sizeof(qc_adapt_report_t), "report", "qc_adapt_report_t",
                             report, struct_size);
  });
}

QC_API qc_status_t qc_comm_create(const qc_comm_config_t* config, qc_comm_t* comm) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(comm, "comm"));
    qc_comm_config_t c;
    QC_RETURN_IF_ERROR(read_comm_config(config, &c));
    switch (c.transport) {
      case QC_TRANSPORT_LOCAL:
        return invalid_argument(
            "argument 'config': transport QC_TRANSPORT_LOCAL needs all ranks created at once; "
            "use qc_comm_create_local or qc_comm_create_local_with_config");
      case QC_TRANSPORT_MPI:
        return create_published(
            [&](std::unique_ptr<Communicator>* made) {
              return create_mpi_comm(c.mpi_comm, c.timeout_seconds, made);
            },
            comm);
      case QC_TRANSPORT_NCCL:
        return create_published(
            [&](std::unique_ptr<Communicator>* made) {
              return create_nccl_comm(c.nccl_comm, c.timeout_seconds, made);
            },
            comm);
      case QC_TRANSPORT_CALLBACKS:
        return invalid_argument(
            "argument 'config': transport QC_TRANSPORT_CALLBACKS needs the callbacks; use "
            "qc_comm_create_callbacks");
    }
    return internal_error("unreachable transport");
  });
}

QC_API qc_status_t qc_comm_create_local(int nranks, qc_comm_t* comms) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(check_nranks(nranks, comms));
    return create_published_local_group(nranks, default_comm_config().timeout_seconds, comms);
  });
}

QC_API qc_status_t qc_comm_create_local_with_config(int nranks, const qc_comm_config_t* config,
                                                    qc_comm_t* comms) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(check_nranks(nranks, comms));
    qc_comm_config_t c = default_comm_config();
    if (config != nullptr) QC_RETURN_IF_ERROR(read_comm_config(config, &c));
    if (c.transport != QC_TRANSPORT_LOCAL) {
      return invalid_argument("argument 'config': field 'transport' must be QC_TRANSPORT_LOCAL "
                              "for a local group");
    }
    return create_published_local_group(nranks, c.timeout_seconds, comms);
  });
}

QC_API qc_status_t qc_transport_callbacks_init_sized(qc_transport_callbacks_t* callbacks,
                                                     size_t struct_size) {
  return QC_API_CALL({
    return init_struct_sized(default_transport_callbacks(), kTransportCallbacksV0Size,
                             "callbacks", "qc_transport_callbacks_t", callbacks, struct_size);
  });
}

namespace {

// The config of a creation function made for one transport: NULL gives the
// defaults, else it must name that transport.
Status read_config_of(const qc_comm_config_t* config, qc_transport_t transport,
                      const char* transport_name, const char* function, qc_comm_config_t* out) {
  *out = default_comm_config();
  if (config == nullptr) return Status::ok();
  QC_RETURN_IF_ERROR(read_comm_config(config, out));
  if (out->transport != transport) {
    return invalid_argument(std::string("argument 'config': field 'transport' must be ") +
                            transport_name + " for " + function + " (it is " +
                            qc_transport_name(out->transport) + ")");
  }
  return Status::ok();
}

}  // namespace

QC_API qc_status_t qc_comm_create_callbacks(const qc_transport_callbacks_t* callbacks,
                                            const qc_comm_config_t* config, qc_comm_t* comm) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(comm, "comm"));
    qc_transport_callbacks_t table;
    QC_RETURN_IF_ERROR(read_transport_callbacks(callbacks, &table));
    qc_comm_config_t c;
    QC_RETURN_IF_ERROR(read_config_of(config, QC_TRANSPORT_CALLBACKS, "QC_TRANSPORT_CALLBACKS",
                                      "qc_comm_create_callbacks", &c));
    return create_published(
        [&](std::unique_ptr<Communicator>* made) {
          return create_callback_comm(table, c.timeout_seconds, made);
        },
        comm);
  });
}

QC_API qc_status_t qc_nccl_unique_id_create(void* id, size_t size) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(id, "id"));
    if (size < QC_NCCL_UNIQUE_ID_BYTES) {
      return invalid_argument("argument 'size' is " + std::to_string(size) +
                              "; an NCCL unique id needs QC_NCCL_UNIQUE_ID_BYTES (" +
                              std::to_string(QC_NCCL_UNIQUE_ID_BYTES) + ")");
    }
    return create_nccl_unique_id(static_cast<uint8_t*>(id));
  });
}

QC_API qc_status_t qc_comm_create_nccl_id(const void* id, size_t size, int rank, int nranks,
                                          const qc_comm_config_t* config, qc_comm_t* comm) {
  return QC_API_CALL({
    QC_RETURN_IF_ERROR(require(id, "id"));
    QC_RETURN_IF_ERROR(require(comm, "comm"));
    if (size != QC_NCCL_UNIQUE_ID_BYTES) {
      return invalid_argument("argument 'size' is " + std::to_string(size) +
                              "; expected QC_NCCL_UNIQUE_ID_BYTES (" +
                              std::to_string(QC_NCCL_UNIQUE_ID_BYTES) + ")");
    }
    if (nranks < 1) {
      return invalid_argument("argument 'nranks' is " + std::to_string(nranks) +
                              "; expected >= 1");
    }
    if (rank < 0 || rank >= nranks) {
      return invalid_argument("argument 'rank' is " + std::to_string(rank) + "; expected 0.." +
                              std::to_string(nranks - 1));
    }
    qc_comm_config_t c;
    QC_RETURN_IF_ERROR(read_config_of(config, QC_TRANSPORT_NCCL, "QC_TRANSPORT_NCCL",
                                      "qc_comm_create_nccl_id", &c));
    return create_published(
        [&](std::unique_ptr<Communicator>* made) {
          return create_nccl_id_comm(static_cast<const uint8_t*>(id), rank, nranks,
                                     c.timeout_seconds, made);
        },
        comm);
  });
}

QC_API qc_status_t qc_comm_destroy(qc_comm_t comm) {
  return QC_API_CALL({
    if (comm == nullptr) return Status::ok();
    const uintptr_t handle = handle_value(comm);
    Communicator* object = nullptr;
    // Closed first: of two destroys of one handle only one goes on, and no
    // call on another thread can start with it from here on.
    switch (live_communicators().close(handle, &object)) {
      case HandleTable<Communicator>::Use::kNotLive: {
        CommLease none;
        return lease_comm(comm, false, &none);  // the "not live" message
      }
      case HandleTable<Communicator>::Use::kCollectives:
        // A collective on another thread may be waiting for peers: it ends
        // with this status, as if a peer had failed, and the group is broken.
        object->transport->interrupt(transport_error(
            "the communicator was destroyed (qc_comm_destroy on another thread) while this "
            "call was running on it"));
        break;
      case HandleTable<Communicator>::Use::kQueries:
      case HandleTable<Communicator>::Use::kIdle:
        break;
    }
    // Outstanding requests get the timeout to finish, then are interrupted.
    object->requests.shut_down(
        object->timeout_seconds,
        [object] { object->transport->interrupt(Communicator::destroyed()); },
        Communicator::destroyed());
    // Freed here, once the calls using it have returned.
    live_communicators().take_when_unused(handle).reset();
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_rank(qc_comm_t comm, int* rank) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(rank, "rank"));
    *rank = c->transport->rank();
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_size(qc_comm_t comm, int* size) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(size, "size"));
    *size = c->transport->size();
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_get_async_error(qc_comm_t comm, qc_status_t* async_error) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(async_error, "async_error"));
    const Status failure = c->transport->failure();
    *async_error = failure.code();
    // The query succeeded, so the guard records nothing: the message of the
    // failure it reports is set here, as the header promises.
    if (!failure) set_last_error("qc_comm_get_async_error: " + failure.message());
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_get_stats(qc_comm_t comm, qc_stats_t* stats) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    qc_stats_t copy;
    {
      std::lock_guard<std::mutex> lock(c->stats_mutex);
      copy = c->stats;
    }
    copy.struct_size = sizeof(qc_stats_t);
    return write_struct(copy, kStatsV0Size, "stats", "qc_stats_t", stats);
  });
}

QC_API qc_status_t qc_comm_get_layer_stats(qc_comm_t comm, const char* layer,
                                           qc_layer_stats_t* stats) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    qc_layer_stats_t copy{};
    {
      std::lock_guard<std::mutex> lock(c->stats_mutex);
      auto it = c->layer_stats.find(layer != nullptr ? layer : "*");
      if (it != c->layer_stats.end()) copy = it->second;
    }
    copy.struct_size = sizeof(qc_layer_stats_t);
    return write_struct(copy, sizeof(qc_layer_stats_t), "stats", "qc_layer_stats_t", stats);
  });
}

QC_API qc_status_t qc_comm_layer_count(qc_comm_t comm, size_t* count) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(count, "count"));
    std::lock_guard<std::mutex> lock(c->stats_mutex);
    *count = c->layer_stats.size();
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_layer_name(qc_comm_t comm, size_t index, char* name, size_t capacity,
                                      size_t* length) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    QC_RETURN_IF_ERROR(require(length, "length"));
    if (capacity > 0) QC_RETURN_IF_ERROR(require(name, "name"));
    std::string found;
    {
      std::lock_guard<std::mutex> lock(c->stats_mutex);
      if (index >= c->layer_stats.size()) {
        return invalid_argument("argument 'index' is " + std::to_string(index) + " but " +
                                std::to_string(c->layer_stats.size()) + " layers were seen");
      }
      found = std::next(c->layer_stats.begin(), static_cast<std::ptrdiff_t>(index))->first;
    }
    *length = found.size();
    if (capacity == 0) return Status::ok();
    if (capacity < found.size() + 1) {
      return invalid_argument("argument 'capacity' is " + std::to_string(capacity) +
                              " but layer " + std::to_string(index) + "'s name needs " +
                              std::to_string(found.size() + 1) + " bytes with its NUL");
    }
    std::memcpy(name, found.c_str(), found.size() + 1);
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_set_layer_policy(qc_comm_t comm, const char* pattern,
                                       const qc_policy_t* policy) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    // Requests started before take the policies they were started with.
    c->requests.drain();
    QC_RETURN_IF_ERROR(require(pattern, "pattern"));
    if (pattern[0] == '\0') return invalid_argument("argument 'pattern' is an empty string");
    qc_policy_t p;
    QC_RETURN_IF_ERROR(read_policy(policy, "policy", &p));
    warn_if_error_feedback_diverges(p, std::string("layer pattern \"") + pattern + "\"");
    c->policies.set(pattern, p);
    return Status::ok();
  });
}

QC_API qc_status_t qc_comm_get_layer_policy(qc_comm_t comm, const char* layer, qc_policy_t* policy) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    return write_struct(c->policies.resolve(layer), kPolicyV0Size, "policy", "qc_policy_t",
                        policy);
  });
}

QC_API qc_status_t qc_comm_apply_preset(qc_comm_t comm, const char* name, const qc_policy_t* base) {
  return QC_API_CALL({
    CommLease c;
    QC_RETURN_IF_ERROR(lease_comm(comm, false, &c));
    // Requests started before take the policies they were started with.
    c->requests.drain();
    QC_RETURN_IF_ERROR(require(name, "name"));
    if (std::strcmp(name, "cgx") != 0) {
      return invalid_argument(std::string("argument 'name' is \"") + name +
                              "\", not a preset; known presets: cgx");
    }
    // Everything is checked before the first policy is set: a failure
    // changes nothing.
    qc_policy_t b;
    if (base != nullptr) {
      QC_RETURN_IF_ERROR(read_policy(base, "base", &b));
    } else {
      // The entry of the pattern "*" itself: resolving the name "*" could
      // pick a glob set later that also matches it ("?", "**").
      b = c->policies.resolve(nullptr);
    }
    return apply_cgx_preset(c.get(), b);
  });
}

}  // extern "C"
