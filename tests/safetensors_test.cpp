// The safetensors weight source: zero-copy reads of a generated checkpoint, and header validation
// whose errors name the file and the tensor.
#include <wt/services/checkpoint_gen.hpp>
#include <wt/services/safetensors.hpp>
#include <wt/wt.hpp>

#include "support/shm.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using ::testing::HasSubstr;

namespace wt {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("wt-st-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A file with the given header and `data_bytes` bytes of data.
std::string write_file(const fs::path& dir, const std::string& header, std::size_t data_bytes) {
  auto p = (dir / "bad.safetensors").string();
  std::ofstream f(p, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(data_bytes, '\x01');
  return p;
}

std::string load_error(const std::string& path) {
  try {
    SafetensorsSource s({path});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, GeneratedLayoutLoadsInLayerOrderZeroCopy) {
  auto dir = temp_dir("gen");
  auto layout = model_layout("tiny", {kDLBfloat, 16, 1});
  auto files = write_synthetic_checkpoint(dir.string(), layout, 5, 3);
  ASSERT_EQ(files.size(), 3u);
  SafetensorsSource s({dir.string()});
  ASSERT_EQ(s.size(), layout.params.size());
  EXPECT_EQ(s.total_bytes(), layout.total_bytes());
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s.metadata()[i].name, layout.params[i].name);  // layout order survives sharding
    EXPECT_EQ(s.metadata()[i].shape, layout.params[i].shape);
  }
  s.begin();
  wt_tensor t{};
  ASSERT_TRUE(s.next(t));
  EXPECT_EQ(t.tensor.data, s.bytes(0).data()) << "served straight from the mapping";
  // The same seed writes the same bytes.
  auto dir2 = temp_dir("gen2");
  write_synthetic_checkpoint(dir2.string(), layout, 5, 1);
  SafetensorsSource s2({dir2.string()});
  for (std::size_t i = 0; i < s.size(); ++i)
    ASSERT_TRUE(std::equal(s.bytes(i).begin(), s.bytes(i).end(), s2.bytes(i).begin())) << i;
  fs::remove_all(dir);
  fs::remove_all(dir2);
}

TEST(Safetensors, SharedMemoryHoldsTheSameBytesInWtSegmentsRemovedWithTheSource) {
  auto dir = temp_dir("shm");
  auto layout = model_layout("tiny", {kDLBfloat, 16, 1});
  write_synthetic_checkpoint(dir.string(), layout, 5, 2);
  SafetensorsSource mapped({dir.string()});
  const auto before = test::wt_segments_of();
  {
    SafetensorsSource shared({dir.string()}, SafetensorsSource::Memory::shared);
    EXPECT_EQ(test::wt_segments_of().size(), before.size() + 2) << "one segment per file";
    ASSERT_EQ(shared.size(), mapped.size());
    for (std::size_t i = 0; i < shared.size(); ++i)
      ASSERT_TRUE(
          std::equal(shared.bytes(i).begin(), shared.bytes(i).end(), mapped.bytes(i).begin()))
          << i;
    // Writes (a training step) go to the segment, not to the file.
    shared.bytes(0)[0] ^= 0xff;
    EXPECT_NE(shared.bytes(0)[0], mapped.bytes(0)[0]);
  }
  EXPECT_EQ(test::wt_segments_of(), before);
  // A file that fails validation leaves no segment behind either.
  auto bad =
      write_file(dir, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 99]}})", 16);
  try {
    SafetensorsSource s({bad}, SafetensorsSource::Memory::shared);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("outside the data section"));
  }
  EXPECT_EQ(test::wt_segments_of(), before);
  fs::remove_all(dir);
}

TEST(Safetensors, QwenLayoutIsHalfABillionParameters) {
  auto l = model_layout("qwen2.5-0.5b", {kDLBfloat, 16, 1});
  EXPECT_EQ(l.params.size(), 290u);
  EXPECT_NEAR(static_cast<double>(l.total_params()), 494e6, 1e6);
  EXPECT_EQ(l.params[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(l.params[0].shape, (std::vector<int64_t>{151936, 896}));
}

TEST(Safetensors, HeaderErrorsNameFileAndTensor) {
  auto dir = temp_dir("bad");
  struct Case {
    std::string header;
    std::size_t data;
    std::string expected;
  } cases[] = {
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "tensor 'w': data_offsets [0, 16] are outside the data section (8 bytes)"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16,
       "tensor 'w': shape [4] of F32 needs 16 bytes, but data_offsets span 12"},
      {R"({"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", 4,
       "tensor 'w': dtype 'F8_E5M2' is not one wt knows"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensors 'a' and 'b' overlap"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "tensor 'w': shape has a negative"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", 4,
       "tensor 'w': needs dtype, shape and data_offsets"},
      {R"({"w": nope})", 0, "header is not valid JSON"},
  };
  for (const auto& c : cases) {
    auto p = write_file(dir, c.header, c.data);
    EXPECT_THAT(load_error(p), HasSubstr(p + ": " + c.expected)) << c.header;
  }
  {
    auto p = (dir / "short.safetensors").string();
    std::ofstream(p) << "abc";
    EXPECT_THAT(load_error(p), HasSubstr("too short for a safetensors file"));
  }
  {
    auto p = (dir / "huge.safetensors").string();
    std::ofstream f(p, std::ios::binary);
    uint64_t n = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
    f.close();
    EXPECT_THAT(load_error(p),
                HasSubstr("header length 1099511627776 runs past the end of the file"));
  }
  EXPECT_THAT(load_error((dir / "missing.safetensors").string()), HasSubstr("cannot open"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace wt
