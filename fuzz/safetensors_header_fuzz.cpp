// A safetensors file as SafetensorsSource opens it: header length, JSON header, offsets, shapes.
// Whatever it accepts must be readable end to end.
#include "fuzz_input.hpp"

#include <wt/error.hpp>
#include <wt/services/safetensors.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wt::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  try {
    wt::SafetensorsSource s({file.path()});
    uint64_t sum = 0;
    for (std::size_t i = 0; i < s.size(); ++i)
      for (unsigned char b : s.bytes(i)) sum += b;  // every accepted byte range is mapped
    s.begin();
    wt_tensor t{};
    std::size_t n = 0;
    while (s.next(t)) ++n;
    if (n != s.size()) std::abort();
    (void)sum;
  } catch (const wt::Error&) {
  }
  return 0;
}
