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
  std::vector<int64_t> shape;  // the full shape
  // What this trainer rank holds (a sharded source, WT_CAP_SHARDED_SOURCE): the slice
  // [shard_offset, shard_offset + shard_length) along shard_dim; -1: the whole tensor.
  int shard_dim = -1;
  int64_t shard_offset = 0;
  int64_t shard_length = 0;

  bool sharded() const { return shard_dim >= 0; }
  // The shape of what this rank holds: the full shape, or the slice's.
  std::vector<int64_t> local_shape() const {
    auto s = shape;
    if (sharded() && static_cast<std::size_t>(shard_dim) < s.size())
      s[static_cast<std::size_t>(shard_dim)] = shard_length;
    return s;
  }
};

}  // namespace wt
