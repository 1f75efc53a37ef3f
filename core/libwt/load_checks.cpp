// The checks libwt makes on a plugin around dlopen (see include/wt/registry.hpp for the rules):
// before dlopen, check_plugin_file() (file type, permissions, owner of the file and its
// directory); after it, detail::validate_api() on the table wt_plugin_get returned. Kept apart
// from registry.cpp because every read of plugin memory here goes through the fault-free
// safe_copy()/safe_cstring() and the /proc/self/maps code check, and must stay that way.
#include "load_checks.hpp"

#include <wt/error.hpp>
#include <wt/registry.hpp>
#include <wt/sdk/host_objects.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace wt {
namespace {

// ---- Reading memory a plugin points at, without ever faulting ---------------------------------
// process_vm_readv() on our own pid copies through the kernel, which answers EFAULT for an address
// that is not readable instead of delivering SIGSEGV. Where it is not allowed (a seccomp filter),
// write() of the bytes into a pipe does the same job. Both are raw syscalls, so no sanitizer
// interceptor looks at the plugin's address first.
bool pipe_copy(const void* addr, void* out, std::size_t n) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  const auto* src = static_cast<const char*>(addr);
  auto* dst = static_cast<char*>(out);
  bool ok = true;
  while (n > 0) {
    std::size_t chunk = std::min<std::size_t>(n, 4096);  // always fits an empty pipe
    if (::syscall(SYS_write, fds[1], src, chunk) != static_cast<long>(chunk) ||
        ::read(fds[0], dst, chunk) != static_cast<ssize_t>(chunk)) {
      ok = false;
      break;
    }
    src += chunk;
    dst += chunk;
    n -= chunk;
  }
  ::close(fds[0]);
  ::close(fds[1]);
  return ok;
}

// Copies n bytes from addr into out; false when any of them is not readable.
bool safe_copy(const void* addr, void* out, std::size_t n) {
  if (n == 0) return true;
  if (addr == nullptr) return false;
  iovec local{out, n};
  iovec remote{const_cast<void*>(addr), n};
  long r = ::syscall(SYS_process_vm_readv, ::getpid(), &local, 1UL, &remote, 1UL, 0UL);
  if (r == static_cast<long>(n)) return true;
  if (r >= 0 || errno == EFAULT) return false;
  return pipe_copy(addr, out, n);  // ENOSYS, EPERM: the syscall is filtered
}

enum class CString { ok, unreadable, runs_off, unterminated };

// Reads a NUL-terminated string of at most `bound` bytes (NUL included), one page at a time so
// that a string ending just before an unmapped page still reads.
CString safe_cstring(const char* p, std::size_t bound, std::string& out) {
  out.clear();
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto addr = reinterpret_cast<std::uintptr_t>(p);
  char buf[256];
  while (out.size() < bound) {
    std::size_t chunk = std::min({page - addr % page, bound - out.size(), sizeof buf});
    if (!safe_copy(reinterpret_cast<const void*>(addr), buf, chunk))
      return out.empty() ? CString::unreadable : CString::runs_off;
    if (const void* nul = std::memchr(buf, 0, chunk)) {
      out.append(buf, static_cast<const char*>(nul) - buf);
      return CString::ok;
    }
    out.append(buf, chunk);
    addr += chunk;
  }
  return CString::unterminated;
}

// Text from a plugin, shown in a message: printable ASCII as is, every other byte as \xNN.
std::string shown(const std::string& s, std::size_t max = 64) {
  std::string r;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\')
      r += static_cast<char>(c);
    else
      r += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > max) r += "...";
  return r;
}

std::string hex(const void* p) {
  return fmt::format("{:#x}", reinterpret_cast<std::uintptr_t>(p));
}

// The process's mappings, for "does this slot point at code?". Empty when /proc is not there.
struct Mapping {
  std::uintptr_t lo = 0, hi = 0;
  bool exec = false;
};
std::vector<Mapping> read_maps() {
  std::vector<Mapping> out;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {0};
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3)
      out.push_back({lo, hi, std::strchr(perms, 'x') != nullptr});
    if (std::strchr(line, '\n') == nullptr) {  // an over-long line (a long path): skip its rest
      int c;
      while ((c = std::fgetc(f)) != EOF && c != '\n') {
      }
    }
  }
  std::fclose(f);
  return out;
}

bool in_code(const std::vector<Mapping>& maps, std::uintptr_t a) {
  return std::any_of(maps.begin(), maps.end(),
                     [a](const Mapping& m) { return m.exec && a >= m.lo && a < m.hi; });
}

constexpr uint32_t kMaxStructSize = 64 * 1024;  // far above any wt ABI struct
constexpr uint32_t kMaxAbiVersion = 0xffff;
constexpr std::size_t kBackendBound = 64;   // NUL included
constexpr std::size_t kVersionBound = 128;  // NUL included

[[noreturn]] void unusable(const std::string& path, const std::string& why) {
  throw Error(WT_ERR_INCOMPATIBLE, fmt::format("plugin {} is unusable: {}", path, why));
}

// Copies the table `p` points at into `out` (zero beyond the plugin's struct_size), after checking
// that the pointer is aligned, points into readable memory and the size it claims is plausible.
// out.struct_size stays what the plugin wrote, so sdk::has_slot() works on the copy.
template <typename T>
void copy_table(const T* p, T& out, const char* what, const std::string& path) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0)
    unusable(path,
             fmt::format("its {} pointer {} is not aligned to {} bytes", what, hex(p), alignof(T)));
  uint32_t header[2] = {0, 0};  // struct_size, abi_version
  if (!safe_copy(p, header, sizeof header))
    unusable(path,
             fmt::format("its {} pointer {} does not point into readable memory", what, hex(p)));
  if (header[0] > kMaxStructSize)
    unusable(path, fmt::format("its {} claims a size of {} bytes (struct_size), more than any wt "
                               "ABI table can have ({} at most)",
                               what, header[0], kMaxStructSize));
  out = T{};
  std::size_t n = std::min<std::size_t>(header[0], sizeof(T));
  if (!safe_copy(p, &out, n))
    unusable(path, fmt::format("its {} at {} claims {} bytes but runs into unreadable memory", what,
                               hex(p), header[0]));
  out.struct_size = header[0];
}

// A string the table points at, read safely and checked character by character.
std::string table_string(const char* p, const char* what, std::size_t bound, bool (*allowed)(char),
                         const char* allowed_text, const std::string& path) {
  std::string s;
  switch (safe_cstring(p, bound, s)) {
    case CString::ok:
      break;
    case CString::unreadable:
      unusable(path, fmt::format("its {} string pointer {} does not point into readable memory",
                                 what, hex(p)));
    case CString::runs_off:
      unusable(path, fmt::format("its {} string at {} ('{}') runs into unreadable memory before "
                                 "its NUL terminator",
                                 what, hex(p), shown(s)));
    case CString::unterminated:
      unusable(path, fmt::format("its {} string at {} is not NUL-terminated within {} bytes "
                                 "(it starts '{}')",
                                 what, hex(p), bound, shown(s, 32)));
  }
  if (s.empty() || !std::all_of(s.begin(), s.end(), allowed))
    unusable(path, fmt::format("its {} string '{}' is not valid: it must be non-empty and made of "
                               "{}",
                               what, shown(s), allowed_text));
  return s;
}

// As loose as ABI v1 promised (a backend equal to its file name, a version "e.g. 1.2.0"), so that
// no plugin that loaded before is refused: only what cannot be a file name or be shown is.
bool printable(char c) {
  return c >= 0x20 && c < 0x7f;
}
bool backend_char(char c) {
  return printable(c) && c != '/';
}

// What validate_api() found about the slots of the vtables.
struct SlotCheck {
  std::vector<std::string> missing;   // NULL or outside the table's struct_size
  std::vector<std::string> not_code;  // pointing outside every executable mapping
  const std::vector<Mapping>* maps = nullptr;
};

// One mandatory slot of a (copied) vtable, checked by name.
template <typename T, typename M>
void require_slot(const T& table, M T::*slot, const char* name, SlotCheck& c) {
  if (!sdk::has_slot(&table, slot)) {
    c.missing.push_back(name);
    return;
  }
  auto fn = reinterpret_cast<std::uintptr_t>(table.*slot);
  if (c.maps != nullptr && !c.maps->empty() && !in_code(*c.maps, fn))
    c.not_code.push_back(fmt::format("{} ({:#x})", name, fn));
}

// Copies and checks one vtable; false when the plugin gave none.
template <typename T>
bool copy_vtable(const T* p, T& out, const char* what, const std::string& path) {
  if (p == nullptr) return false;
  copy_table(p, out, what, path);
  // 0 is tolerated: the v1 host never read a vtable's abi_version, so some plugins leave it 0.
  if (out.struct_size >= 2 * sizeof(uint32_t) && out.abi_version > kMaxAbiVersion)
    unusable(path, fmt::format("its {} claims ABI version {}, which no wt ABI has", what,
                               out.abi_version));
  return true;
}

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

// Refuses what a user other than root or us could have written: `what` is "plugin <path>" or
// "plugin directory <dir>", `refusal` ends the sentence.
void check_owner_and_mode(const std::string& what, const struct stat& st,
                          const std::string& refusal) {
  unsigned mode = st.st_mode & 07777;
  if (st.st_mode & S_IWOTH)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("{} is writable by others (mode {:04o}): {}", what, mode, refusal));
  // Group-writable is fine when the group is this process's own (umask 002 with a private group
  // per user is common); a shared group lets its other members swap the code.
  if ((st.st_mode & S_IWGRP) && st.st_gid != ::getegid())
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("{} is writable by its group, gid {} (mode {:04o}): {}", what,
                            st.st_gid, mode, refusal));
  uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("{} is owned by uid {}, neither root nor this process's user (uid "
                            "{}): {}",
                            what, st.st_uid, me, refusal));
}

}  // namespace

// Checks the table wt_plugin_get returned, touching the plugin's memory only through
// safe_copy(); `api` is the plugin's pointer, already known to be non-NULL.
void detail::validate_api(const wt_plugin_api* api, uint32_t plugin_abi, const std::string& path,
                          const std::string& backend) {
  wt_plugin_api t;
  copy_table(api, t, "API table", path);
  constexpr std::size_t kMinSize = offsetof(wt_plugin_api, worker) + sizeof(t.worker);
  if (t.struct_size < kMinSize)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} returned an API table of {} bytes, smaller than ABI {} "
                            "allows ({} bytes)",
                            path, t.struct_size, WT_ABI_MIN_SUPPORTED, kMinSize));
  if (t.abi_version != plugin_abi)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} negotiated ABI version {} but its table says {}", path,
                            plugin_abi, t.abi_version));
  if (t.backend == nullptr) unusable(path, "it declares no backend name (its backend is NULL)");
  std::string declared = table_string(t.backend, "backend", kBackendBound, &backend_char,
                                      "printable characters other than /", path);
  if (declared != backend)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} declares backend '{}', but its file name says '{}'; "
                            "rename the file to libwt_{}.so or fix the plugin",
                            path, declared, backend, declared));
  if (t.plugin_version != nullptr)
    table_string(t.plugin_version, "plugin_version", kVersionBound, &printable,
                 "printable characters", path);

  auto maps = read_maps();
  SlotCheck c;
  c.maps = &maps;
  wt_init_info_vtable ii;
  if (!copy_vtable(t.init_info, ii, "init_info table", path))
    c.missing.push_back("init_info");
  else {
    require_slot(ii, &wt_init_info_vtable::parse_json, "init_info.parse_json", c);
    require_slot(ii, &wt_init_info_vtable::to_json, "init_info.to_json", c);
    require_slot(ii, &wt_init_info_vtable::rank, "init_info.rank", c);
    require_slot(ii, &wt_init_info_vtable::is_sender, "init_info.is_sender", c);
    require_slot(ii, &wt_init_info_vtable::destroy, "init_info.destroy", c);
  }
  if (t.capabilities & WT_CAP_TRAINER) {
    wt_trainer_vtable tr;
    if (!copy_vtable(t.trainer, tr, "trainer table", path))
      c.missing.push_back("trainer");
    else {
      require_slot(tr, &wt_trainer_vtable::create, "trainer.create", c);
      require_slot(tr, &wt_trainer_vtable::send_weights, "trainer.send_weights", c);
      require_slot(tr, &wt_trainer_vtable::abort, "trainer.abort", c);
      require_slot(tr, &wt_trainer_vtable::last_error, "trainer.last_error", c);
      require_slot(tr, &wt_trainer_vtable::destroy, "trainer.destroy", c);
    }
  }
  if (t.capabilities & WT_CAP_WORKER) {
    wt_worker_vtable w;
    if (!copy_vtable(t.worker, w, "worker table", path))
      c.missing.push_back("worker");
    else {
      require_slot(w, &wt_worker_vtable::create, "worker.create", c);
      require_slot(w, &wt_worker_vtable::start, "worker.start", c);
      require_slot(w, &wt_worker_vtable::receive, "worker.receive", c);
      require_slot(w, &wt_worker_vtable::finish, "worker.finish", c);
      require_slot(w, &wt_worker_vtable::abort, "worker.abort", c);
      require_slot(w, &wt_worker_vtable::last_error, "worker.last_error", c);
      require_slot(w, &wt_worker_vtable::destroy, "worker.destroy", c);
    }
  }
  if (!c.missing.empty())
    unusable(path,
             fmt::format("mandatory slot(s) missing or NULL: {}", fmt::join(c.missing, ", ")));
  if (!c.not_code.empty())
    unusable(path, fmt::format("slot(s) pointing outside any executable mapping: {}",
                               fmt::join(c.not_code, ", ")));
}

void check_plugin_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)  // stat, never open: a FIFO must not block us
    throw Error(WT_ERR_SYSTEM,
                fmt::format("cannot load plugin {}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} is {}, not a regular file: refusing to load it", path,
                            file_kind(st.st_mode)));
  check_owner_and_mode(fmt::format("plugin {}", path), st, "refusing to load it");

  // The directory it was found in, and the real file's directory when the name is a symlink:
  // whoever may write there may swap the file between this check and dlopen.
  fs::path p(path);
  std::vector<fs::path> dirs{p.has_parent_path() ? p.parent_path() : fs::path(".")};
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    std::error_code ec;
    fs::path real = fs::canonical(p, ec);
    if (!ec && real.has_parent_path()) dirs.push_back(real.parent_path());
  }
  for (const auto& d : dirs) {
    struct stat ds {};
    if (::stat(d.c_str(), &ds) != 0)
      throw Error(WT_ERR_SYSTEM, fmt::format("cannot load plugin {}: cannot stat its directory "
                                             "{}: {}",
                                             path, d.string(), std::strerror(errno)));
    check_owner_and_mode(fmt::format("plugin directory {}", d.string()), ds,
                         fmt::format("refusing to load {} from it", path));
  }
}

}  // namespace wt
