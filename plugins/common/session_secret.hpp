// The secret of one broadcast session (host memory, Gloo): minted by the sender at init, shipped
// only inside the worker init info (which travels over the token-guarded control plane), and
// proven, never sent, on the data plane: every rendezvous-store request and answer carries an
// HMAC-SHA256 under it, and every Gloo pair answers a challenge with it before a weight byte
// moves. Compiled into each plugin that uses it (plugins/common); the MACs are OpenSSL's.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace wt::plugins {

using Mac = std::array<unsigned char, 32>;  // HMAC-SHA256
using Nonce = std::array<unsigned char, 16>;

class SessionSecret {
 public:
  static constexpr std::size_t kBytes = 32;
  static constexpr std::size_t kHexDigits = 2 * kBytes;

  // A fresh secret from the system's random source (throws sdk::Error WT_ERR_SYSTEM without one).
  static SessionSecret mint();
  // From the hex the init info carries; `field` names it in the error (WT_ERR_INVALID_ARGUMENT)
  // when it is not kHexDigits lowercase hex digits.
  static SessionSecret from_hex(std::string_view hex, std::string_view field);

  // From kBytes raw bytes (a key the store unwrapped); WT_ERR_REMOTE for another length.
  static SessionSecret from_bytes(std::string_view bytes);

  std::string hex() const;
  std::string_view bytes() const { return bytes_; }
  // HMAC-SHA256 of `message` under the secret, with `purpose` (what the MAC vouches for) first,
  // so that a MAC made for one step cannot be replayed as another.
  Mac mac(std::string_view purpose, std::string_view message) const;
  // A key of its own, derived from this one for `purpose` and `message` (HMAC-SHA256 as the key):
  // whoever holds this one can derive it, whoever holds only the derived one cannot go back.
  SessionSecret derive(std::string_view purpose, std::string_view message) const;
  // This key XOR `pad` (a key wrapped under a pad only both ends can derive, and unwrapped).
  SessionSecret masked(const Mac& pad) const;
  bool empty() const { return bytes_.empty(); }
  bool operator==(const SessionSecret& other) const;

 private:
  std::string bytes_;
};

// Equal in constant time.
bool same_mac(const Mac& a, const Mac& b);
// Random bytes for a challenge (throws sdk::Error WT_ERR_SYSTEM without a random source).
Nonce random_nonce();

inline std::string_view as_view(const Nonce& n) {
  return {reinterpret_cast<const char*>(n.data()), n.size()};
}

}  // namespace wt::plugins
