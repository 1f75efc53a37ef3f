// Standard base64 (RFC 4648, with padding; the URL-safe alphabet is refused), as CUDA IPC
// handles and NCCL unique ids travel in JSON.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/sdk/errors.hpp>

#include <cstdint>
#include <cstring>
#include <string>

namespace wt::sdk {

inline constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

inline std::string base64_encode(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    uint32_t v = p[i] << 16;
    if (i + 1 < n) v |= p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += i + 1 < n ? kBase64Alphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kBase64Alphabet[v & 63] : '=';
  }
  return out;
}

inline std::string base64_decode(const std::string& text, const std::string& what) {
  if (text.size() % 4 != 0) fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: not standard base64", what);
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text[i + k];
      const char* pos = c == '=' ? nullptr : std::strchr(kBase64Alphabet, c);
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (pos == nullptr || c == '\0' || pad)
        fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: not standard base64", what);
      v = (v << 6) | static_cast<uint32_t>(pos - kBase64Alphabet);
    }
    out += static_cast<char>((v >> 16) & 255);
    if (pad < 2) out += static_cast<char>((v >> 8) & 255);
    if (pad < 1) out += static_cast<char>(v & 255);
  }
  return out;
}

}  // namespace wt::sdk
