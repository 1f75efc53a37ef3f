// The ipc worker's update_info handling, as `wt serve` drives it: create (packed or not, from the
// first byte), start, receive the rest as update_info, abort. Shared-memory names in the input
// that do not exist are refused like any other bad field.
#include "fuzz_input.hpp"

#include <wt/engine.hpp>
#include <wt/error.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool packed = data[0] & 1;
  const std::string text = wt::fuzz::as_text(data + 1, size - 1);
  try {
    auto w =
        wt::WorkerEngine::create("ipc", packed ? R"({"packed": true})" : R"({"packed": false})");
    w->start();
    try {
      w->receive(text, [](std::span<const wt_tensor> tensors) {
        for (const auto& t : tensors)
          if (t.name == nullptr || t.tensor.ndim < 0) std::abort();
      });
    } catch (const wt::Error&) {
    }
    w->abort();
  } catch (const wt::Error&) {
  }
  return 0;
}
