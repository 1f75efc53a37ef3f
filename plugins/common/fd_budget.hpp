// File descriptors for a mesh, checked before it forms: a Gloo mesh holds one socket per pair
// (and rank 0's store one per client while the mesh forms), so a large world, or several worker
// ranks of one process, runs past the usual soft limit of 1,024. Gloo
// then fails somewhere in the middle of the rendezvous with "Too many open files", or a peer
// waits out its deadline. Here the need is counted first: the soft limit is raised towards the
// hard one when that is enough (as servers holding many sockets do; wt uses poll and epoll,
// never select), and otherwise the mesh is refused at once, naming the numbers.
#pragma once

#include <cstddef>
#include <string>

namespace wt::plugins {

// Descriptors open in this process now (the entries of /proc/self/fd).
std::size_t open_descriptors();

// Makes room for `needed` more descriptors, raising RLIMIT_NOFILE's soft limit up to the hard
// limit when that is what it takes; throws sdk::Error (WT_ERR_SYSTEM) naming `what`, the need,
// the open count and both limits when even the hard limit is short. Returns the soft limit that
// now holds.
std::size_t ensure_descriptors(std::size_t needed, const std::string& what);

// What a mesh needs on a rank with `peers` pairs: a socket per pair, the listener, the store's
// connection, and on rank 0 (which hosts the store) the server side of its `store_clients`.
std::size_t mesh_descriptors(std::size_t peers, std::size_t store_clients);

}  // namespace wt::plugins
