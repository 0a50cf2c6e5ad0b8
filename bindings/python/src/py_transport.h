// A Python object as qc's transport (qc.Comm.from_transport): the callbacks
// of qc_transport_callbacks_t, each calling one of the object's methods with
// the GIL held.
//
//   post_send(peer, data)  -> handle   data: a read-only memoryview
//   post_recv(peer, data)  -> handle   data: a writable memoryview of the
//                                      message's exact size
//   test(handle)           -> bool     done?
//   wait(handle, timeout)  -> bool     optional: may block up to timeout s
//   cancel(handle)                     optional
//   abort(status, reason)              optional: tell the peers
//
// The memoryviews are qc's staging memory: valid until test/wait has said
// done (or cancel returned), not after. An exception in a method fails the
// call with qc.TransportError carrying its type and text; it never crosses
// the C ABI.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "qc.h"

namespace qcpy {

// Fills *callbacks for `transport`, its methods looked up now; "" on
// success, else what is missing (no table is made then). On success the
// table owns a reference to the transport, released by the destroy
// callback, i.e. by qc_comm_destroy; if the communicator is never created,
// call release_transport_callbacks(callbacks). With the GIL held.
std::string make_transport_callbacks(pybind11::handle transport, int rank, int size,
                                     bool any_thread, qc_transport_callbacks_t* callbacks);
void release_transport_callbacks(qc_transport_callbacks_t* callbacks);

}  // namespace qcpy
