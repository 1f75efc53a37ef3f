// sparse_nccl across real processes on CPU (Gloo): two `wt serve --load-checkpoint` receivers
// start from the same base checkpoint as the trainer (this process); 20 rounds of ~1 % changed
// elements, sent as delta patches only, leave both receivers bit-identical to the trainer after
// every round. A round with one patch the receivers must refuse (a full_shape that is not the
// tensor's) among good ones changes nothing anywhere.
#include <wt/delta.hpp>
#include <wt/services/checkpoint_gen.hpp>
#include <wt/checksum.hpp>
#include <wt/services/fan_out_client.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/safetensors.hpp>
#include <wt/wt.hpp>

#include "subprocess.hpp"
#include "support/free_port.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>

using ::testing::HasSubstr;
using json = nlohmann::json;

namespace wt {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  fs::path dir;
  std::vector<std::string> files;
  std::vector<std::unique_ptr<cli::Child>> servers;
  std::vector<std::string> urls;

  Fixture() {
    dir = fs::temp_directory_path() / ("wt-sparse-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    files = write_synthetic_checkpoint((dir / "base").string(),
                                       model_layout("tiny", {kDLBfloat, 16, 1}), 7);
    const json config = {
        {"backend", "sparse_nccl"}, {"rendezvous_timeout_s", 20}, {"transfer_timeout_s", 20}};
    for (int k = 0; k < 2; ++k) {
      auto [child, url] =
          cli::start_server(WT_CLI_PATH, {"--weight-transfer-config", config.dump(),
                                          "--load-checkpoint", (dir / "base").string()});
      servers.push_back(std::move(child));
      urls.push_back(url);
    }
  }
  ~Fixture() {
    servers.clear();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::map<std::string, std::string> checksums_of(SafetensorsSource& model) {
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < model.size(); ++i) {
    auto b = model.bytes(i);
    out[model.metadata()[i].name] = checksum_bytes(b.data(), b.size());
  }
  return out;
}

TEST(SparseProcesses, TwentyRoundsOfOnePercentKeepBothReceiversBitIdentical) {
  Fixture f;
  SafetensorsSource model(f.files);  // private copy-on-write: changed here only
  for (const auto& url : f.urls) ASSERT_EQ(HttpClient(url).weight_checksums(), checksums_of(model));
  HttpClient a(f.urls[0]), b(f.urls[1]);
  FanOutClient client({{&a, 1, f.urls[0]}, {&b, 1, f.urls[1]}});
  auto engine = trainer_init(InitInfo::from_object({{"backend", "sparse_nccl"},
                                                    {"master_address", "127.0.0.1"},
                                                    {"master_port", test::free_port()},
                                                    {"world_size", 3},
                                                    {"rank", 0},
                                                    {"transfer_timeout_s", 20}}),
                             client, nullptr);
  std::vector<std::vector<unsigned char>> previous;
  for (std::size_t i = 0; i < model.size(); ++i) {
    auto s = model.bytes(i);
    previous.emplace_back(s.begin(), s.end());
  }
  std::mt19937 rng(11);
  std::size_t changed = 0, elements = 0;
  for (int round = 0; round < 20; ++round) {
    // A training step: ~1 % of every tensor's bfloat16 elements get their lowest mantissa bit
    // flipped (finite stays finite: no NaN appears).
    std::vector<Delta> deltas;
    for (std::size_t i = 0; i < model.size(); ++i) {
      auto bytes = model.bytes(i);
      const std::size_t n = bytes.size() / 2;
      for (std::size_t k = 0; k < n / 100 + 1; ++k) bytes[2 * (rng() % n)] ^= 1;
      const auto& meta = model.metadata()[i];
      std::vector<int64_t> shape = meta.shape;
      DLTensor before{previous[i].data(),
                      {kDLCPU, 0},
                      static_cast<int32_t>(shape.size()),
                      meta.dtype,
                      shape.data(),
                      nullptr,
                      0};
      DLTensor after{bytes.data(),
                     {kDLCPU, 0},
                     static_cast<int32_t>(shape.size()),
                     meta.dtype,
                     shape.data(),
                     nullptr,
                     0};
      deltas.push_back(make_delta(meta.name, before, after));
      if (deltas.back().count == 0) deltas.pop_back();
      previous[i].assign(bytes.begin(), bytes.end());
      elements += n;
    }
    SendOptions o;
    o.weight_version = "round-" + std::to_string(round);
    for (const auto& d : deltas) {
      o.patches.push_back(d.patch());
      changed += static_cast<std::size_t>(d.count);
    }
    engine->send_weights(o);
    const auto expected = checksums_of(model);
    ASSERT_EQ(a.weight_checksums(), expected) << "receiver 1 after round " << round;
    ASSERT_EQ(b.weight_checksums(), expected) << "receiver 2 after round " << round;
  }
  std::cout << "20 rounds: " << changed << " of " << elements << " elements sent as patches ("
            << 100.0 * static_cast<double>(changed) / static_cast<double>(elements) << " %)\n";

  // One good patch and one whose full_shape is not the tensor's: the receivers refuse the batch
  // whole, and nothing changes on either.
  const auto before = checksums_of(model);
  std::vector<int32_t> idx{0, 1};
  std::vector<uint16_t> vals{0x3f80, 0x4000};
  int64_t count = 2;
  std::vector<int64_t> wrong{2, 2};
  wt_sparse_patch good{}, bad{};
  Delta keep;
  keep.name = model.metadata()[0].name;
  keep.dtype = model.metadata()[0].dtype;
  keep.full_shape = model.metadata()[0].shape;
  keep.indices = idx;
  keep.values.assign(reinterpret_cast<unsigned char*>(vals.data()),
                     reinterpret_cast<unsigned char*>(vals.data()) + 4);
  keep.count = count;
  good = keep.patch();
  bad = good;
  bad.name = model.metadata()[1].name.c_str();
  bad.full_shape = wrong.data();
  bad.full_ndim = 2;
  SendOptions o;
  o.patches = {good, bad};
  try {
    engine->send_weights(o);
    FAIL() << "a round the receivers must refuse went through";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(model.metadata()[1].name));
  }
  EXPECT_EQ(a.weight_checksums(), before);
  EXPECT_EQ(b.weight_checksums(), before);
}

}  // namespace
}  // namespace wt
