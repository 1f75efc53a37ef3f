// Plain C++ descriptions of parameters, shared by libwt and the plugin SDK.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt {

// One parameter as a weight source declares it: wire dtype and full shape.
struct ParamMeta {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
};

}  // namespace wt
