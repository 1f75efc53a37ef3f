// `--device cpu | cuda:N`, as wt serve takes it.
#pragma once

#include <dlpack/dlpack.h>

#include <string>

namespace wt::cli {

DLDevice parse_device(const std::string& text);

}  // namespace wt::cli
