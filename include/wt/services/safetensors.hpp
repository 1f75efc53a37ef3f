// A weight source over a safetensors checkpoint (one file, several files, or a directory of
// *.safetensors): memory-mapped, zero copy. Headers are validated before anything is served:
// offsets in bounds and non-overlapping, known dtypes, shapes that match byte sizes, names unique
// across files. Every error names the file and the tensor.
//
// By default the mapping is private and writable (copy on write), so a simulated training step can
// modify weights in place without touching the files; untouched pages stay shared with the page
// cache. Memory::shared reads each file into a wt shared-memory segment in /dev/shm instead (a
// trainer whose weights live there: the ipc backend exports them in place, without a copy); the
// segments are removed when the source goes, or by the next wt process if this one is killed.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/weight_source.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace wt {

class SafetensorsSource : public WeightSource {
 public:
  enum class Memory { private_copy_on_write, shared };
  // Files in the given order; a directory means its *.safetensors files sorted by name.
  explicit SafetensorsSource(const std::vector<std::string>& paths);
  SafetensorsSource(const std::vector<std::string>& paths, Memory memory);
  ~SafetensorsSource() override;
  SafetensorsSource(const SafetensorsSource&) = delete;
  SafetensorsSource& operator=(const SafetensorsSource&) = delete;

  // Tensors in file order, then data-offset order (the layout order, i.e. layer order).
  const std::vector<ParamMeta>& metadata() override { return meta_; }
  void begin() override { next_ = 0; }
  bool next(wt_tensor& out) override;
  void end() override {}

  std::size_t size() const { return tensors_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }
  // Writable bytes of tensor i (copy on write).
  std::span<unsigned char> bytes(std::size_t i);
  const std::vector<std::string>& files() const { return files_; }

 private:
  struct Mapping {
    void* addr = nullptr;
    std::size_t size = 0;
    std::string shm_name;  // Memory::shared: the segment, unlinked with the source
  };
  static Mapping load_into_shared_memory(int fd, const std::string& file, std::size_t size);
  void release();
  struct Entry {
    unsigned char* data;
    uint64_t nbytes;
  };
  std::vector<std::string> files_;
  std::vector<Mapping> maps_;
  std::vector<ParamMeta> meta_;
  std::vector<Entry> tensors_;
  std::size_t next_ = 0;
  uint64_t total_bytes_ = 0;
};

// The files a path stands for: itself, or the *.safetensors in a directory, sorted.
std::vector<std::string> expand_checkpoint_paths(const std::vector<std::string>& paths);

}  // namespace wt
