// A Gloo TCP device whose pairs prove the session secret on the bare socket before Gloo reads or
// writes a byte of it (compiled into each plugin that forms a Gloo mesh: plugins/common).
//
// Why: each Gloo pair listens on a port of its own while the mesh forms and takes the first
// connection that arrives. Gloo then parses whatever comes in on its loop thread and enforces its
// framing there by throwing, which ends the process. A stranger who races the real peer to that
// port (local ports are easy to list) could therefore kill the receiving process with one
// malformed frame, and Debian's Gloo has neither TLS nor a connection hook.
//
// What: once a pair's socket connects, each side sends a fresh nonce and answers the other's with
// an HMAC under the secret that binds both ranks (a MAC made for one pair cannot be replayed on
// another); Gloo sees the socket only after the peer's answer checked out. A connection that does
// not prove the secret by the rendezvous deadline, closes, or answers wrongly fails that pair with
// an sdk::Error (WT_ERR_REMOTE) naming the peer's rank, before any frame was parsed. And whatever
// Gloo throws on its loop thread for a pair afterwards fails that pair (its waits get the error)
// instead of reaching std::terminate.
#pragma once

#include "session_secret.hpp"

#include <gloo/transport/device.h>

#include <chrono>
#include <memory>
#include <string>

namespace wt::plugins {

// A device on `address` (the local address the pairs listen on and advertise) for one mesh;
// `until` is the rendezvous deadline the proofs must meet.
std::shared_ptr<gloo::transport::Device> make_proving_device(
    const std::string& address, const SessionSecret& secret,
    std::chrono::steady_clock::time_point until);

}  // namespace wt::plugins
