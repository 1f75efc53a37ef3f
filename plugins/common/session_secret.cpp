#include "session_secret.hpp"

#include <wt/sdk/errors.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace wt::plugins {

namespace {
constexpr char kHex[] = "0123456789abcdef";
}

SessionSecret SessionSecret::mint() {
  SessionSecret s;
  s.bytes_.resize(kBytes);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.bytes_.data()), kBytes) != 1)
    sdk::fail(WT_ERR_SYSTEM, "cannot mint a session secret: the system's random source failed");
  return s;
}

SessionSecret SessionSecret::from_hex(std::string_view hex, std::string_view field) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  bool ok = hex.size() == kHexDigits;
  SessionSecret s;
  for (std::size_t i = 0; ok && i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    ok = hi >= 0 && lo >= 0;
    s.bytes_.push_back(static_cast<char>(hi * 16 + lo));
  }
  if (!ok)
    sdk::fail_field(std::string(field), WT_ERR_INVALID_ARGUMENT,
                    "field '{}' must be the session secret the trainer minted ({} lowercase hex "
                    "digits), got {} characters",
                    field, kHexDigits, hex.size());
  return s;
}

SessionSecret SessionSecret::from_bytes(std::string_view bytes) {
  if (bytes.size() != kBytes)
    sdk::fail(WT_ERR_REMOTE, "a key of {} bytes (keys have {})", bytes.size(), kBytes);
  SessionSecret s;
  s.bytes_.assign(bytes);
  return s;
}

std::string SessionSecret::hex() const {
  std::string out;
  for (unsigned char c : bytes_) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

SessionSecret SessionSecret::derive(std::string_view purpose, std::string_view message) const {
  const Mac m = mac(purpose, message);
  SessionSecret s;
  s.bytes_.assign(reinterpret_cast<const char*>(m.data()), m.size());
  return s;
}

SessionSecret SessionSecret::masked(const Mac& pad) const {
  SessionSecret s = *this;
  for (std::size_t i = 0; i < s.bytes_.size() && i < pad.size(); ++i)
    s.bytes_[i] = static_cast<char>(s.bytes_[i] ^ static_cast<char>(pad[i]));
  return s;
}

bool SessionSecret::operator==(const SessionSecret& other) const {
  return bytes_.size() == other.bytes_.size() &&
         CRYPTO_memcmp(bytes_.data(), other.bytes_.data(), bytes_.size()) == 0;
}

Mac SessionSecret::mac(std::string_view purpose, std::string_view message) const {
  std::string data;
  data.reserve(purpose.size() + 1 + message.size());
  data.append(purpose);
  data.push_back('\0');
  data.append(message);
  Mac out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), bytes_.data(), static_cast<int>(bytes_.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(),
           &len) == nullptr ||
      len != out.size())
    sdk::fail(WT_ERR_SYSTEM, "HMAC-SHA256 failed");
  return out;
}

bool same_mac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    sdk::fail(WT_ERR_SYSTEM, "cannot make a challenge: the system's random source failed");
  return n;
}

}  // namespace wt::plugins
