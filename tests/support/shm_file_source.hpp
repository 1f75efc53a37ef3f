// A weight source whose tensors live in one file in /dev/shm, as a trainer that keeps its weights
// in shared memory has them. Each pass copies the current bytes of a VectorSource into the file
// (standing in for the optimizer step that writes them there); next() yields pointers into it.
//
// By default the file is a wt segment of this process (shm::create_segment, what SafetensorsSource
// with Memory::shared makes): ipc exports its tensors in place. File::foreign makes it a file of
// another name ("/wt_test-..."), as another program's shared memory would be: ipc must copy those.
#pragma once

#include "support/vector_source.hpp"

#include <wt/sdk/shm_segments.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

namespace wt::test {

class ShmFileSource : public WeightSource {
 public:
  enum class File { wt_segment, foreign };

  explicit ShmFileSource(VectorSource& host, File kind = File::wt_segment) : host_(host) {
    std::size_t off = 0;
    for (auto& t : host_.tensors()) {
      offsets_.push_back(off);
      off += (t.bytes.size() + 63) / 64 * 64;
    }
    size_ = off == 0 ? 1 : off;
    if (kind == File::wt_segment) {
      auto c = shm::create_segment(size_);
      if (c.addr == nullptr)
        throw std::runtime_error("cannot " + std::string(c.step) + " " + c.name + ": " +
                                 std::strerror(c.error));
      name_ = c.name;
      base_ = static_cast<unsigned char*>(c.addr);
    } else {
      name_ = "/wt_test-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}());
      map_new_file();
    }
  }
  ~ShmFileSource() override {
    munmap(base_, size_);
    shm_unlink(name_.c_str());
  }
  // The owner replaces its file: same name, a new file (and a new mapping in this process).
  void replace_file() {
    munmap(base_, size_);
    shm_unlink(name_.c_str());
    map_new_file();
  }
  const std::string& name() const { return name_; }
  std::size_t file_size() const { return size_; }
  std::size_t offset_of(std::size_t i) const { return offsets_.at(i); }

  const std::vector<ParamMeta>& metadata() override { return host_.metadata(); }
  void begin() override {
    host_.begin();
    i_ = 0;
    for (std::size_t k = 0; k < offsets_.size(); ++k) {
      auto& b = host_.tensors()[k].bytes;
      std::copy(b.begin(), b.end(), base_ + offsets_[k]);
    }
  }
  bool next(wt_tensor& out) override {
    if (!host_.next(out)) return false;
    out.tensor.data = base_ + offsets_[i_++];
    return true;
  }
  void end() override { host_.end(); }

 private:
  void map_new_file() {
    int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size_)) != 0)
      throw std::runtime_error("cannot create " + name_);
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("cannot map " + name_);
    base_ = static_cast<unsigned char*>(p);
  }

  VectorSource& host_;
  std::vector<std::size_t> offsets_;
  std::size_t size_ = 0, i_ = 0;
  std::string name_;
  unsigned char* base_ = nullptr;
};

}  // namespace wt::test
