// Host memory that is already shareable: a MAP_SHARED mapping of a wt segment in /dev/shm (what
// shm::create_segment gives, e.g. SafetensorsSource's Memory::shared weights). A tensor that lives
// in such a mapping is exported in place — the worker maps the same file — instead of being
// copied into a wt segment first, as CUDA tensors are exported in place. Other files in /dev/shm
// (another program's, or a framework's own shared memory) are not: the worker maps only wt
// segments of its own user, so their tensors are copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wt::ipc {

struct SharedLocation {
  std::string name;     // shm_open name, "/<file in /dev/shm>"
  uint64_t inode = 0;   // of the mapped file
  uint64_t extent = 0;  // bytes of the file from offset 0 up to the mapping's (page-rounded) end
  uint64_t offset = 0;  // of the queried pointer within the file
};

class SharedMappings {
 public:
  // A snapshot of this process's shared mappings of wt segments (parsed from /proc/self/maps),
  // each file checked once: its name must be a wt segment's, still mean the mapped file (same
  // inode, a regular file, no symbolic link) and belong to this process's user.
  static SharedMappings snapshot();
  // Parses text in /proc/<pid>/maps format; for tests.
  static SharedMappings parse(const std::string& maps_text);

  // Where [p, p + n) lives, if the whole range is inside one shared mapping of one named file
  // (adjacent mappings of the same file at consecutive offsets count as one). Unlinked files
  // ("(deleted)") and files outside /dev/shm are not shareable by name.
  std::optional<SharedLocation> find(const void* p, std::size_t n) const;

  // find() in a snapshot(), and the file must hold the whole range; `extent` is clamped to the
  // file's size, which is what a worker maps. Nothing is found in a parse()d text.
  std::optional<SharedLocation> locate(const void* p, std::size_t n) const;

  std::size_t size() const { return ranges_.size(); }

 private:
  struct Range {
    uintptr_t begin, end;
    uint64_t file_offset;
    uint64_t inode;
    std::string name;
    uint64_t file_size = 0;  // set by snapshot(): 0 means not checked against the file
  };
  const Range* range_of(const void* p, std::size_t n) const;
  std::vector<Range> ranges_;  // sorted by begin, adjacent pieces merged
};

}  // namespace wt::ipc
