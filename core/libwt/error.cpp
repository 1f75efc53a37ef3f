#include <wt/error.hpp>

#include <string>

namespace wt {

std::string status_name(wt_status code) {
  switch (code) {
    case WT_OK:
      return "WT_OK";
    case WT_ERR_INVALID_ARGUMENT:
      return "WT_ERR_INVALID_ARGUMENT";
    case WT_ERR_INCOMPATIBLE:
      return "WT_ERR_INCOMPATIBLE";
    case WT_ERR_UNSUPPORTED:
      return "WT_ERR_UNSUPPORTED";
    case WT_ERR_STATE:
      return "WT_ERR_STATE";
    case WT_ERR_SYSTEM:
      return "WT_ERR_SYSTEM";
    case WT_ERR_DEVICE:
      return "WT_ERR_DEVICE";
    case WT_ERR_TIMEOUT:
      return "WT_ERR_TIMEOUT";
    case WT_ERR_ABORTED:
      return "WT_ERR_ABORTED";
    case WT_ERR_REMOTE:
      return "WT_ERR_REMOTE";
    case WT_ERR_NOT_FOUND:
      return "WT_ERR_NOT_FOUND";
    case WT_ERR_INTERNAL:
      return "WT_ERR_INTERNAL";
    case WT_ERR_BUFFER_TOO_SMALL:
      return "WT_ERR_BUFFER_TOO_SMALL";
    default:
      return "WT_ERR_UNKNOWN(" + std::to_string(code) + ")";
  }
}

}  // namespace wt
