// The packed-transfer fields ipc and nccl share, on the trainer's init info and on the worker's:
// `packed`, `packed_buffer_size_bytes` (each buffer, > 0) and `packed_num_buffers` (1..64). Read
// with the backend's defaults, then checked once the reader finished (unknown keys come first),
// each error naming its field.
#pragma once

#include <wt/sdk/errors.hpp>
#include <wt/sdk/json_fields.hpp>

#include <cstdint>

namespace wt::plugins {

struct PackedOptions {
  bool packed = false;
  int64_t buffer_bytes = int64_t{1} << 30;
  int64_t num_buffers = 2;

  // The fields from `r`, or `defaults` where absent.
  static PackedOptions read(sdk::FieldReader& r, const PackedOptions& defaults) {
    PackedOptions o;
    o.packed = r.opt_bool("packed", defaults.packed);
    o.buffer_bytes = r.opt_int("packed_buffer_size_bytes", defaults.buffer_bytes);
    o.num_buffers = r.opt_int("packed_num_buffers", defaults.num_buffers);
    return o;
  }
  // Throws WT_ERR_INVALID_ARGUMENT naming the first field out of its range; `what` is the
  // reader's ("init_info for backend 'nccl'").
  void check(const std::string& what) const {
    if (buffer_bytes <= 0)
      sdk::fail_field("packed_buffer_size_bytes", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'packed_buffer_size_bytes' must be > 0", what);
    if (num_buffers < 1 || num_buffers > 64)
      sdk::fail_field("packed_num_buffers", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'packed_num_buffers' must be in 1..64", what);
  }
};

}  // namespace wt::plugins
