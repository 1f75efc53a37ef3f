// wt's POSIX shared-memory segments: naming, creation, and the sweep of dead creators' segments.
//
// Every process that creates segments holds, for as long as it lives, an exclusive flock on one
// small liveness file of its own in /dev/shm, and every segment it creates carries that file's
// token in its name:
//
//   liveness file  /dev/shm/wt-<pid>-<token>           empty, 0600, locked while its creator lives
//   segment        /dev/shm/wt-<pid>-<token>-<random>  0600
//
// <token> and <random> are 128 random bits each (32 hex digits): names are unguessable. <pid> is
// the creator's pid in its own PID namespace, for people reading /dev/shm; nothing relies on it.
// A segment's creator is dead when its liveness file can be locked, or is gone. Unlike a pid
// (which means nothing in another PID namespace: a container sharing /dev/shm), a lock on a file
// of the shared /dev/shm means the same thing to every process that sees it, and the kernel
// releases it however its holder ends, SIGKILL included. So the sweep never removes a live
// process's segments, wherever that process runs, and removes a dead one's (and its liveness file)
// the next time any wt process sweeps.
//
// A liveness file is created under a pending name (<name>.new), locked, and only then linked to
// its name, so it is never seen unlocked while its creator lives; a sweep that takes the lock of a
// pending file first removes it, and the creator, whose link then fails, starts over. A process
// that exits normally removes its own liveness file. One file descriptor per process (per copy of
// this header: libwt and each plugin have their own) stays open; nothing is kept open per segment.
// A forked child gets a token of its own at its first segment.
//
// Names from wt versions before liveness files (wt-<pid>-<start time>-<random>) are still
// recognised as segments but never swept: their creator cannot be told dead across PID namespaces.
//
// Header-only: the ipc plugin's segments and libwt's shared-memory weights (SafetensorsSource) are
// created, named and swept alike. `wt launch` calls sweep_orphaned_segments() when its run ends.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace wt::shm {

inline constexpr const char* kPrefix = "wt-";
inline constexpr const char* kDir = "/dev/shm";  // where shm_open names live on Linux
inline constexpr std::size_t kTokenHexDigits = 32, kRandomHexDigits = 32;
inline constexpr std::string_view kPendingSuffix = ".new";

enum class NameKind {
  other,           // not a wt name
  segment,         // wt-<pid>-<token>-<random>
  legacy_segment,  // wt-<pid>-<start time>-<random>: an older wt's; never swept
  liveness,        // wt-<pid>-<token>
  pending,         // wt-<pid>-<token>.new: a liveness file being created
};

struct ParsedName {
  NameKind kind = NameKind::other;
  std::string pid, token;  // segment, liveness, pending
};

namespace detail {

inline bool is_hex(std::string_view s, std::size_t digits) {
  if (s.size() != digits) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

inline bool is_decimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

inline std::string random_hex(std::size_t bytes) {
  unsigned char raw[64];
  if (bytes > sizeof raw) bytes = sizeof raw;
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    out += kHex[raw[i] >> 4];
    out += kHex[raw[i] & 15];
  }
  return out;
}

}  // namespace detail

// `bytes` random bytes (getrandom, at most 64) as hex: the unguessable parts of segment names, and
// any other token that must not be guessed (wt conformance's nonce).
using detail::random_hex;

// What a name in /dev/shm ("wt-..." or "/wt-...") is to wt.
inline ParsedName parse_name(std::string_view name) {
  if (!name.empty() && name[0] == '/') name.remove_prefix(1);
  const std::string_view prefix = kPrefix;
  if (name.substr(0, prefix.size()) != prefix) return {};
  name.remove_prefix(prefix.size());
  std::vector<std::string_view> f;
  for (std::size_t start = 0;;) {
    std::size_t dash = name.find('-', start);
    f.push_back(name.substr(start, dash == std::string_view::npos ? dash : dash - start));
    if (dash == std::string_view::npos) break;
    start = dash + 1;
  }
  if (f.empty() || !detail::is_decimal(f[0])) return {};
  ParsedName p;
  p.pid = std::string(f[0]);
  if (f.size() == 3 && detail::is_hex(f[2], kRandomHexDigits)) {
    if (detail::is_hex(f[1], kTokenHexDigits)) {
      p.kind = NameKind::segment;
      p.token = std::string(f[1]);
      return p;
    }
    if (detail::is_decimal(f[1])) {
      p.kind = NameKind::legacy_segment;
      return p;
    }
    return {};
  }
  if (f.size() == 2) {
    std::string_view token = f[1];
    NameKind kind = NameKind::liveness;
    if (token.size() > kPendingSuffix.size() &&
        token.substr(token.size() - kPendingSuffix.size()) == kPendingSuffix) {
      token.remove_suffix(kPendingSuffix.size());
      kind = NameKind::pending;
    }
    if (!detail::is_hex(token, kTokenHexDigits)) return {};
    p.kind = kind;
    p.token = std::string(token);
    return p;
  }
  return {};
}

// A wt segment's name (either format), with or without the leading '/'. Liveness files are not.
inline bool is_segment_name(std::string_view name) {
  auto k = parse_name(name).kind;
  return k == NameKind::segment || k == NameKind::legacy_segment;
}

// "/wt-<pid>-<token>": the liveness file of the process with that token.
inline std::string liveness_name(std::string_view pid, std::string_view token) {
  return "/" + std::string(kPrefix) + std::string(pid) + "-" + std::string(token);
}

// "/wt-<pid>-<token>-<random>".
inline std::string segment_name(std::string_view pid, std::string_view token,
                                std::string_view random) {
  return liveness_name(pid, token) + "-" + std::string(random);
}

namespace detail {

struct Liveness {
  std::mutex mu;
  int fd = -1;    // holds the flock
  pid_t pid = 0;  // the process that took it (a forked child must take its own)
  std::string token;
};

// Never destroyed, so a segment created while the process exits still finds it.
inline Liveness& liveness() {
  static auto* state = new Liveness;
  return *state;
}

inline std::string liveness_path(const Liveness& s) {
  return std::string(kDir) + liveness_name(std::to_string(s.pid), s.token);
}

// Closes the liveness file; removes it if this process took it (not a forked child's copy).
inline void drop_liveness(Liveness& s) {
  if (s.fd < 0) return;
  if (s.pid == getpid()) unlink(liveness_path(s).c_str());
  close(s.fd);
  s.fd = -1;
  s.token.clear();
}

// At normal exit (or when the image holding this copy of the header is unloaded).
struct LivenessCleanup {
  ~LivenessCleanup() {
    Liveness& s = liveness();
    std::lock_guard<std::mutex> l(s.mu);
    drop_liveness(s);
  }
};

// Creates, locks and publishes a new liveness file. Returns 0 or an errno value.
inline int create_liveness(Liveness& s) {
  const std::string pid = std::to_string(getpid());
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string token = random_hex(kTokenHexDigits / 2);
    const std::string path = std::string(kDir) + liveness_name(pid, token);
    const std::string pending = path + std::string(kPendingSuffix);
    int fd = open(pending.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return errno;
    }
    // A sweep that locked the pending file first removes it: start over with another token.
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      continue;
    }
    if (link(pending.c_str(), path.c_str()) != 0) {
      const int err = errno;
      close(fd);
      if (err == ENOENT) continue;  // swept before the lock was taken
      unlink(pending.c_str());
      if (err == EEXIST) continue;
      return err;
    }
    unlink(pending.c_str());
    s.fd = fd;
    s.pid = getpid();
    s.token = token;
    return 0;
  }
  return EAGAIN;
}

// This process's token, taking a liveness file first if it has none (or lost it: a forked
// child, or a file someone removed). Returns 0 or an errno value.
inline int current_token(std::string& pid, std::string& token) {
  Liveness& s = liveness();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.fd >= 0) {
    struct stat st {};
    if (s.pid != getpid()) {
      close(s.fd);  // the parent's: its lock stays with the parent's descriptor
      s.fd = -1;
    } else if (fstat(s.fd, &st) != 0 || st.st_nlink == 0) {
      drop_liveness(s);
    }
  }
  if (s.fd < 0) {
    if (int err = create_liveness(s)) return err;
    static LivenessCleanup cleanup;  // registered once, after the first liveness file exists
    (void)cleanup;
  }
  pid = std::to_string(s.pid);
  token = s.token;
  return 0;
}

enum class Creator { alive, dead, unknown };

// Whether the process behind a liveness (or pending) file lives. dead: the file is gone (fd -1)
// or this call took its lock (fd holds it: remove what the creator left, then close it). alive:
// the lock is held. unknown: not for this process to judge (another user's file, not a regular
// file, an error). Never blocks and never follows a symbolic link.
inline Creator probe(const std::string& path, int* locked_fd) {
  *locked_fd = -1;
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Creator::dead : Creator::unknown;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    close(fd);
    return Creator::unknown;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const bool held = errno == EWOULDBLOCK;
    close(fd);
    return held ? Creator::alive : Creator::unknown;
  }
  *locked_fd = fd;
  return Creator::dead;
}

// Unlinks /dev/shm/<name> if it is this user's.
inline bool unlink_if_owned(const std::string& name) {
  const std::string path = std::string(kDir) + "/" + name;
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && st.st_uid == geteuid() && unlink(path.c_str()) == 0;
}

}  // namespace detail

// A fresh segment name for this process ("/wt-...", ready for shm_open). Throws
// std::system_error when no liveness file can be created.
inline std::string new_segment_name() {
  std::string pid, token;
  if (int err = detail::current_token(pid, token))
    throw std::system_error(err, std::generic_category(),
                            "cannot create a shared-memory liveness file in /dev/shm");
  return segment_name(pid, token, detail::random_hex(kRandomHexDigits / 2));
}

// This process's liveness token (creating its liveness file if needed); empty if that fails.
inline std::string process_token() {
  std::string pid, token;
  return detail::current_token(pid, token) == 0 ? token : std::string();
}

// A new segment (O_CREAT | O_EXCL, mode 0600) of `size` bytes, mapped read-write and shared. On
// failure nothing is left behind: `addr` is null, `step` says what failed and `error` is errno.
struct Created {
  std::string name;
  void* addr = nullptr;
  const char* step = nullptr;  // "create a liveness file for" | "create" | "size" | "map"
  int error = 0;
};
inline Created create_segment(std::size_t size) {
  std::string pid, token;
  if (int err = detail::current_token(pid, token))
    return {"in " + std::string(kDir), nullptr, "create a liveness file for", err};
  Created c{segment_name(pid, token, detail::random_hex(kRandomHexDigits / 2))};
  int fd = shm_open(c.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return {c.name, nullptr, "create", errno};
  void* addr = MAP_FAILED;
  const char* step = "size";
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    step = "map";
    addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    shm_unlink(c.name.c_str());
    return {c.name, nullptr, step, err};
  }
  c.addr = addr;
  return c;
}

// True when `name` ("[/]wt-<pid>-<token>-<random>") is a segment whose creating process has
// ended: its liveness file can be locked, or is gone. False for a live creator, for a name that is
// not a segment's, for another user's and for older wt versions' names.
inline bool segment_creator_dead(std::string_view name) {
  ParsedName p = parse_name(name);
  if (p.kind != NameKind::segment) return false;
  int fd = -1;
  auto c = detail::probe(std::string(kDir) + liveness_name(p.pid, p.token), &fd);
  if (fd >= 0) close(fd);
  return c == detail::Creator::dead;
}

// The wt segments currently in /dev/shm (names without the leading '/'; liveness files are not
// segments).
inline std::vector<std::string> list_wt_segments() {
  std::vector<std::string> out;
  if (DIR* d = opendir(kDir)) {
    while (dirent* e = readdir(d))
      if (is_segment_name(e->d_name)) out.emplace_back(e->d_name);
    closedir(d);
  }
  return out;
}

// Removes every segment in /dev/shm whose creator has ended (see the top of this file), and the
// liveness files of ended processes. Only this user's files; never blocks on what it finds (a
// FIFO named like a liveness file is left alone). One descriptor open at a time. Returns how many
// segments were removed. Public: `wt launch` calls it when its processes have ended.
inline int sweep_orphaned_segments() {
  struct Group {
    std::vector<std::string> segments;
    bool pending = false;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;  // by (pid, token)
  if (DIR* d = opendir(kDir)) {
    while (dirent* e = readdir(d)) {
      ParsedName p = parse_name(e->d_name);
      if (p.kind == NameKind::other || p.kind == NameKind::legacy_segment) continue;
      Group& g = groups[{p.pid, p.token}];
      if (p.kind == NameKind::segment) g.segments.emplace_back(e->d_name);
      if (p.kind == NameKind::pending) g.pending = true;
    }
    closedir(d);
  }
  int removed = 0;
  for (auto& [key, g] : groups) {
    const std::string live = std::string(kDir) + liveness_name(key.first, key.second);
    const std::string pending = live + std::string(kPendingSuffix);
    int fd = -1;
    auto c = detail::probe(live, &fd);
    if (c == detail::Creator::dead && fd < 0 && g.pending) {
      // No liveness file, but a pending one: its creator is publishing it, or died doing so.
      c = detail::probe(pending, &fd);
      if (c == detail::Creator::dead && fd < 0) c = detail::Creator::unknown;  // gone meanwhile
    }
    if (c != detail::Creator::dead) {
      if (fd >= 0) close(fd);
      continue;
    }
    for (const auto& s : g.segments)
      if (detail::unlink_if_owned(s)) ++removed;
    if (fd >= 0) {  // the lock is ours: the liveness files go last, under it
      unlink(live.c_str());
      unlink(pending.c_str());
      close(fd);
    }
  }
  return removed;
}

}  // namespace wt::shm
