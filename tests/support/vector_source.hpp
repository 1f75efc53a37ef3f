// A weight source over tensors it owns in host memory, with helpers to build and perturb them.
#pragma once

#include <wt/dtype.hpp>
#include <wt/weight_source.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace wt::test {

struct OwnedTensor {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

class VectorSource : public WeightSource {
 public:
  void add(std::string name, DLDataType dtype, std::vector<int64_t> shape, uint32_t seed) {
    uint64_t n = 1;
    for (auto d : shape) n *= static_cast<uint64_t>(d);
    OwnedTensor t{std::move(name), dtype, std::move(shape),
                  std::vector<unsigned char>(n * element_size(dtype))};
    std::mt19937 rng(seed);
    for (auto& b : t.bytes) b = static_cast<unsigned char>(rng());
    tensors_.push_back(std::move(t));
    meta_.push_back({tensors_.back().name, dtype, tensors_.back().shape});
  }
  std::vector<OwnedTensor>& tensors() { return tensors_; }
  std::size_t total_bytes() const {
    std::size_t n = 0;
    for (const auto& t : tensors_) n += t.bytes.size();
    return n;
  }
  // Flips bytes of a fraction of the tensors, as a training step would.
  void perturb(uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto& t : tensors_)
      for (std::size_t i = rng() % 7; i < t.bytes.size(); i += 1 + rng() % 97) t.bytes[i] ^= 0x5a;
  }

  const std::vector<ParamMeta>& metadata() override { return meta_; }
  const ParamMeta& metadata_of(std::size_t i) const { return meta_.at(i); }
  void begin() override {
    next_ = 0;
    ++passes_;
  }
  bool next(wt_tensor& out) override {
    if (next_ >= tensors_.size()) return false;
    auto& t = tensors_[next_++];
    out.name = t.name.c_str();
    out.tensor = DLTensor{t.bytes.data(),
                          {kDLCPU, 0},
                          static_cast<int32_t>(t.shape.size()),
                          t.dtype,
                          t.shape.data(),
                          nullptr,
                          0};
    return true;
  }
  void end() override { ++ends_; }
  int passes() const { return passes_; }
  int ends() const { return ends_; }

 private:
  std::vector<OwnedTensor> tensors_;
  std::vector<ParamMeta> meta_;
  std::size_t next_ = 0;
  int passes_ = 0, ends_ = 0;
};

}  // namespace wt::test
