#include "device_option.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>

namespace wt::cli {

DLDevice parse_device(const std::string& text) {
  if (text == "cpu") return {kDLCPU, 0};
  if (text.rfind("cuda:", 0) == 0) {
    try {
      std::size_t used = 0;
      int id = std::stoi(text.substr(5), &used);
      if (used == text.size() - 5 && id >= 0) return {kDLCUDA, id};
    } catch (...) {
    }
  }
  throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("device '{}' must be 'cpu' or 'cuda:N'", text));
}

}  // namespace wt::cli
