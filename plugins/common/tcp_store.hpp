// The rendezvous store the nccl and sparse_nccl backends form their Gloo group with: the sender
// hosts it at master_address:master_port (the Debian Gloo has no TCP store), every rank reaches
// it as a gloo::rendezvous::Store. Compiled into each plugin that uses it (plugins/common).
//
// Only the session's ranks take part, each as itself (session_keys.hpp): a client proves its
// rank's key, and may set only its own rank's keys. Wire, one TCP connection per client, integers
// little-endian, K the connecting rank's key:
//   server -> client  "WTS3" snonce:16                                  on accept
//   client -> server  cnonce:16 rank:u32 HMAC_K("wt store hello", snonce cnonce rank)
//   server -> client  0 HMAC_K("wt store welcome", snonce cnonce rank)   the server proves it too
//                  or 1                                                  refused: not the rank's
//                  key
//   request  = op:u8 key_len:u32 key [value_len:u32 value]  mac:32     (value only for SET)
//   answer   = status:u8 [value_len:u32 value]               mac:32     (value: GET hit, PAIR_KEYS)
// where a request's MAC is HMAC_K("wt store request", snonce cnonce seq:u64 request) and an
// answer's HMAC_K("wt store answer", snonce cnonce seq:u64 answer), seq counting the connection's
// requests from 0 (no request or answer can be replayed, reordered or moved to another
// connection). Ops: 1 SET, 2 GET, 3 PAIR_KEYS (no key: the keys of the pairs this rank is the
// lower rank of, in the mesh's shape (Limits::pairs), in increasing order of the peer, each XOR
// HMAC_K("wt pair key wrap", snonce cnonce peer), once per rank), 4 RAISE and 5 FATE (the round
// signal, round_signal.hpp: the key is a round number, u32; RAISE's value why the connecting rank
// ended that round, at most 1 KiB, the first RAISE of a round wins; FATE answers rank:u32 and that
// reason, or missing; the fates of the 64 rounds raised last are kept). Status: 0 done / found, 1
// missing, 2 refused: the key exists (a key is set once), 3 refused: the store is full, 4 refused:
// the key is another rank's. A rank sets only its own keys: the addresses of its own pairs in the
// mesh's shape, "pair_<rank>_<peer>" (pair_address_key; at most 192 bytes, a Gloo address), and
// those Gloo's full mesh has it publish, "<rank>" and "rank_<rank>". A connection that does not
// prove a rank's key within the auth deadline, sends a bad MAC or a malformed request is dropped
// and reported through `warn`; a connection the server closes before its welcome (a flood made
// room) is retried by the client, never read as another session's store.
//
// Bounds, whatever a client sends: keys up to 256 bytes; values up to 1 MiB; keys and stored
// bytes for the session as a whole; ranks below the world size; connections enough for the world
// (when full, the oldest connection that has not authenticated makes room); a request must arrive
// whole within the request deadline, an authenticated connection may idle for the idle deadline;
// answers pile up unread to 2 MiB at most. The server never blocks on one client, and an error
// in its thread ends serving with a message (failure()), never the process.
#pragma once

#include "mesh_pairs.hpp"
#include "session_keys.hpp"
#include "session_secret.hpp"

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace wt::plugins {

class TcpStoreServer {
 public:
  struct Limits {
    std::size_t max_key = 256;
    std::size_t max_value = std::size_t{1} << 20;
    std::size_t max_keys = 4096;
    std::size_t max_stored_bytes = std::size_t{64} << 20;
    std::size_t max_connections = 64;
    std::chrono::milliseconds auth_deadline{2'000};
    std::chrono::milliseconds request_deadline{10'000};
    std::chrono::milliseconds idle_deadline{10'000};
    int world_size = 1 << 16;  // ranks 0..world_size-1 may connect
    // The pairs of the mesh being formed: a rank sets the addresses of these pairs only, and is
    // handed the keys of these pairs only.
    MeshPairs pairs = MeshPairs::full();
    // What a Gloo group of `world_size` ranks needs (two keys per rank, a few KiB each for a
    // large world), with room for the ranks' reconnects and a few strangers.
    static Limits for_world(int world_size);
    // What a mesh of `world_size` ranks and the pairs `pairs` names needs (mesh_pairs.hpp): two
    // addresses per pair, each under its own key, besides what for_world allows.
    static Limits for_mesh(int world_size, const MeshPairs& pairs);
  };
  using Warn = std::function<void(const std::string&)>;

  // Listens on address:port (port 0: any free port, see port()) before returning. Throws
  // sdk::Error (WT_ERR_SYSTEM) naming the address when it cannot.
  TcpStoreServer(const std::string& address, int port, const SessionSecret& secret, Limits limits,
                 Warn warn = {});
  ~TcpStoreServer();  // stops serving and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  std::size_t connections_dropped() const { return dropped_.load(); }
  std::size_t rejected() const { return rejected_.load(); }  // failed authentication
  // Why serving stopped, when an error ended it (empty while serving).
  std::string failure() const;

 private:
  struct Conn;
  void serve();
  void serve_loop();
  void drop(std::vector<std::unique_ptr<Conn>>& conns, std::size_t i);
  bool serve_connection(Conn& c, short ev, std::size_t max_request,
                        std::chrono::steady_clock::time_point now);
  void accept_connection(std::vector<std::unique_ptr<Conn>>& conns,
                         std::chrono::steady_clock::time_point now);
  bool handle_input(Conn& c, std::chrono::steady_clock::time_point now);
  bool authenticate(Conn& c, std::chrono::steady_clock::time_point now);
  bool serve_request(Conn& c, uint8_t op, uint32_t klen, uint32_t vlen, std::size_t body,
                     std::chrono::steady_clock::time_point now);
  std::string answer_request(const Conn& c, uint8_t op, const std::string& key,
                             std::string_view value);
  std::string answer_pair_keys(const Conn& c);
  std::string answer_raise(const Conn& c, const std::string& key, std::string_view value);
  std::string answer_fate(const std::string& key);
  std::string answer_set(const Conn& c, const std::string& key, std::string_view value);
  std::string answer_get(const std::string& key);
  void refuse(const Conn& c, const std::string& why);

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to stop serve()
  int port_ = 0;
  SessionSecret secret_;
  Limits limits_;
  Warn warn_;
  std::map<std::string, std::vector<char>> data_;  // only serve() touches it
  std::size_t stored_bytes_ = 0;
  std::set<int> pair_keys_served_;  // the ranks given their pair keys (once each)
  std::map<uint32_t, std::pair<int, std::string>> fates_;  // round -> who ended it first, why
  std::deque<uint32_t> fate_order_;                        // fates_'s rounds, as raised
  std::atomic<std::size_t> dropped_{0}, rejected_{0};
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::thread thread_;
};

// The key under which rank `from` publishes the address of its pair with rank `to`, in a mesh of
// chosen pairs (gloo_mesh.hpp); only `from` may set it.
std::string pair_address_key(int from, int to);

// What a RAISE may say of a round, and how many rounds' fates the store keeps.
inline constexpr std::size_t kMaxFateReason = 1024;
inline constexpr std::size_t kFatesKept = 64;

class TcpStoreClient final : public gloo::rendezvous::Store {
 public:
  // Connects and authenticates as `keys.rank()`, retrying until `until` (the server may not be up
  // yet). Every later call also ends by `until`: the rendezvous as a whole has one deadline.
  // `give_up`, polled while waiting (for the server, for a key): true ends the wait at once
  // (WT_ERR_ABORTED).
  TcpStoreClient(const std::string& address, int port, const SessionKeys& keys,
                 std::chrono::steady_clock::time_point until, std::function<bool()> give_up = {});
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;  // waits for the key
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // The keys of this rank's pairs with higher ranks, from the store, into `keys` (a worker
  // derives only the others: session_keys.hpp). The store hands them once, for the pairs of its
  // Limits::pairs: `higher_peers` are those peers, in increasing order.
  void learn_pair_keys(SessionKeys& keys, const std::vector<int>& higher_peers);

  // The round signal (round_signal.hpp). raise_fate: this rank ended round `round`, because `why`
  // (cut to kMaxFateReason bytes); false when another rank ended it first. fate: who ended round
  // `round` first, and why, if anyone did (asked once, not waited for).
  struct Fate {
    int rank = -1;
    std::string why;
  };
  bool raise_fate(uint32_t round, const std::string& why);
  std::optional<Fate> fate(uint32_t round,
                           std::chrono::milliseconds within = std::chrono::seconds(5));

 private:
  // The handshake; `foreign`: what answered is not this session's store.
  bool try_connect(std::string* why, bool* foreign);
  // Asks for `key` every 10 ms until it is there (its value into `value`), `until` passes
  // (WT_ERR_TIMEOUT naming the key) or give_up says so (WT_ERR_ABORTED).
  void poll(const std::string& key, std::chrono::steady_clock::time_point until,
            std::vector<char>* value);
  // One request and its answer: the status. `by`: its own deadline, else the client's.
  uint8_t request(uint8_t op, const std::string& key, const std::vector<char>* value,
                  std::vector<char>* out,
                  std::optional<std::chrono::steady_clock::time_point> by = std::nullopt);
  std::string where_;
  int rank_;
  SessionSecret key_;
  std::chrono::steady_clock::time_point until_;
  std::function<bool()> give_up_;
  int fd_ = -1;
  Nonce snonce_{}, cnonce_{};
  uint64_t seq_ = 0;
  std::mutex mu_;  // one request at a time on the connection
};

}  // namespace wt::plugins
