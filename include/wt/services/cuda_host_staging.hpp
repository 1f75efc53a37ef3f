// The CUDA device staging of a Receiver (wt serve --device cuda:N): pinned host slots, copies from
// the device queued on a non-blocking stream of device N, waited for once per round.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/services/receiver.hpp>

#include <memory>

namespace wt {

// Checks at once that the driver and the device can be used, and throws wt::Error saying why not
// (WT_ERR_UNSUPPORTED: no driver, one too old, no device, or wt built without the CUDA toolkit;
// WT_ERR_INVALID_ARGUMENT: no device `device`).
std::shared_ptr<Receiver::DeviceStaging> make_cuda_host_staging(int device);

}  // namespace wt
