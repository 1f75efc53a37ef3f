#include "shared_mappings.hpp"

#include <wt/sdk/shm_segments.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

namespace wt::ipc {
namespace {

constexpr std::string_view kShmDir = "/dev/shm/";
constexpr std::string_view kDeleted = " (deleted)";

}  // namespace

SharedMappings SharedMappings::snapshot() {
  std::ifstream f("/proc/self/maps");
  std::stringstream text;
  text << f.rdbuf();
  SharedMappings out = parse(text.str());
  // Only wt segments of this user are shared by name: a worker maps nothing else (see
  // ShmSegment::open), so anything else is copied. One lstat per file, not per tensor; ranges
  // whose name now means another file (or no regular file) are dropped.
  std::map<std::string, std::optional<struct stat>> files;
  const uid_t self = geteuid();
  std::erase_if(out.ranges_, [&files, self](Range& r) {
    auto [it, fresh] = files.try_emplace(r.name);
    if (fresh && shm::is_segment_name(r.name)) {
      struct stat st {};
      if (lstat((std::string(shm::kDir) + r.name).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          st.st_uid == self)
        it->second = st;
    }
    if (!it->second || it->second->st_ino != r.inode || it->second->st_size <= 0) return true;
    r.file_size = static_cast<uint64_t>(it->second->st_size);
    return false;
  });
  return out;
}

SharedMappings SharedMappings::parse(const std::string& maps_text) {
  SharedMappings out;
  std::istringstream lines(maps_text);
  std::string line;
  while (std::getline(lines, line)) {
    // begin-end perms offset dev inode [path]; the path may contain spaces.
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode;
    if (!(fields >> range >> perms >> offset >> dev >> inode)) continue;
    if (perms.size() < 4 || perms[0] != 'r' || perms[3] != 's') continue;
    std::string path;
    std::getline(fields >> std::ws, path);
    if (path.compare(0, kShmDir.size(), kShmDir) != 0) continue;
    if (path.size() >= kDeleted.size() &&
        path.compare(path.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)
      continue;
    std::string file = path.substr(kShmDir.size());
    if (file.empty() || file.find('/') != std::string::npos) continue;  // not an shm_open name
    auto dash = range.find('-');
    if (dash == std::string::npos) continue;
    Range r{};
    try {
      r.begin = std::stoull(range.substr(0, dash), nullptr, 16);
      r.end = std::stoull(range.substr(dash + 1), nullptr, 16);
      r.file_offset = std::stoull(offset, nullptr, 16);
      r.inode = std::stoull(inode);
    } catch (const std::exception&) {
      continue;
    }
    if (r.end <= r.begin) continue;
    r.name = "/" + file;
    auto& v = out.ranges_;
    if (!v.empty() && v.back().end == r.begin && v.back().inode == r.inode &&
        v.back().name == r.name &&
        v.back().file_offset + (v.back().end - v.back().begin) == r.file_offset)
      v.back().end = r.end;  // one mapping the kernel keeps as several areas
    else
      v.push_back(std::move(r));
  }
  std::sort(out.ranges_.begin(), out.ranges_.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  return out;
}

const SharedMappings::Range* SharedMappings::range_of(const void* p, std::size_t n) const {
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), addr,
                             [](uintptr_t a, const Range& r) { return a < r.begin; });
  if (it == ranges_.begin()) return nullptr;
  const Range& r = *std::prev(it);
  if (addr >= r.end || n > r.end - addr) return nullptr;
  return &r;
}

std::optional<SharedLocation> SharedMappings::find(const void* p, std::size_t n) const {
  const Range* r = range_of(p, n);
  if (r == nullptr) return std::nullopt;
  return SharedLocation{r->name, r->inode, r->file_offset + (r->end - r->begin),
                        r->file_offset + (reinterpret_cast<uintptr_t>(p) - r->begin)};
}

std::optional<SharedLocation> SharedMappings::locate(const void* p, std::size_t n) const {
  const Range* r = range_of(p, n);
  if (r == nullptr || r->file_size == 0) return std::nullopt;
  auto loc = find(p, n);
  if (loc->offset > r->file_size || n > r->file_size - loc->offset) return std::nullopt;
  loc->extent = std::min(loc->extent, r->file_size);
  return loc;
}

}  // namespace wt::ipc
