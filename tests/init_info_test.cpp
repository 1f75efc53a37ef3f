// Init infos from JSON and YAML, parsed strictly by the backend's own plugin.
#include <wt/log.hpp>
#include <wt/wt.hpp>

#include "support/recording_client.hpp"
#include "support/vector_source.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using ::testing::HasSubstr;

namespace wt {
namespace {

void expect_invalid(const InitInfo& info, const std::string& part) {
  try {
    info.rank();
    FAIL() << "accepted " << info.fields().dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

const char* kNccl = R"({"backend": "nccl", "master_address": "127.0.0.1", "master_port": 29500,
                        "world_size": 3, "rank": 0})";

TEST(InitInfo, BackendIsRequired) {
  try {
    InitInfo::from_json(R"({"rank": 0})", "trainer.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("trainer.yaml: missing field 'backend'"));
  }
  EXPECT_THROW(InitInfo::from_json(R"({"backend": 3})"), Error);
  EXPECT_THROW(InitInfo::from_json("{not json"), Error);
}

TEST(InitInfo, PluginFillsDefaultsInCanonicalJson) {
  auto info = InitInfo::from_json(kNccl);
  EXPECT_EQ(info.rank(), 0);
  EXPECT_TRUE(info.is_sender());
  auto j = info.to_json();
  EXPECT_EQ(j["backend"], "nccl");
  EXPECT_EQ(j["packed"], true);
  EXPECT_EQ(j["packed_buffer_size_bytes"], 1073741824);
  EXPECT_EQ(j["packed_num_buffers"], 2);
  EXPECT_EQ(j["rendezvous_timeout_s"], 60);
  EXPECT_EQ(j["transfer_timeout_s"], 300);
  EXPECT_EQ(j["stall_timeout_s"], 60);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j.size(), 12u);
}

TEST(InitInfo, UnknownKeyIsNamed) {
  auto j = nlohmann::json::parse(kNccl);
  j["pakced"] = true;
  expect_invalid(InitInfo::from_object(j), "unknown field 'pakced'");
}

TEST(InitInfo, WrongTypeIsNamed) {
  auto j = nlohmann::json::parse(kNccl);
  j["master_port"] = "29500";
  expect_invalid(InitInfo::from_object(j), "field 'master_port' must be an integer, got a string");
  j = nlohmann::json::parse(kNccl);
  j["packed"] = 1;
  expect_invalid(InitInfo::from_object(j), "field 'packed' must be a boolean, got an integer");
}

TEST(InitInfo, MissingFieldIsNamed) {
  auto j = nlohmann::json::parse(kNccl);
  j.erase("world_size");
  expect_invalid(InitInfo::from_object(j), "missing field 'world_size'");
}

TEST(InitInfo, OutOfRangeValueIsNamed) {
  auto j = nlohmann::json::parse(kNccl);
  j["master_port"] = 70000;
  expect_invalid(InitInfo::from_object(j), "'master_port' must be in 1..65535, got 70000");
}

TEST(InitInfo, FromYamlKeepsTypes) {
  auto info = InitInfo::from_yaml(R"(
backend: sparse_nccl
master_address: "10.0.0.1"
master_port: 29501
world_size: 2
rank: 1
)");
  EXPECT_EQ(info.rank(), 1);
  EXPECT_FALSE(info.is_sender());
  EXPECT_EQ(info.to_json()["master_address"], "10.0.0.1");
}

TEST(InitInfo, YamlQuotedNumberIsAString) {
  auto info = InitInfo::from_yaml(
      "backend: nccl\nmaster_address: a\nmaster_port: '29500'\nworld_size: 2\nrank: 0\n",
      "cfg.yaml");
  expect_invalid(info, "field 'master_port' must be an integer, got a string");
}

TEST(InitInfo, ErrorsNameTheOrigin) {
  auto info = InitInfo::from_json(R"({"backend": "nccl"})", "configs/x.yaml");
  try {
    info.rank();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("configs/x.yaml: invalid init_info for backend 'nccl'"));
  }
}

// sparse_nccl is a delta backend: the host refuses a weight source for it, naming the
// capability, before the plugin or the inference side is called.
TEST(InitInfo, TheSparseBackendTakesNoSource) {
  test::RecordingClient client;
  test::VectorSource source;
  try {
    auto j = nlohmann::json::parse(kNccl);
    j["backend"] = "sparse_nccl";
    j.erase("packed");
    trainer_init(InitInfo::from_object(j), client, &source);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
    EXPECT_THAT(e.what(), HasSubstr("backend 'sparse_nccl'"));
    EXPECT_THAT(e.what(), HasSubstr("WT_CAP_SPARSE"));
  }
  EXPECT_TRUE(client.calls().empty());
}

// What a log line may show of a JSON body: secrets at any depth hidden, the rest kept, anything
// that is not JSON not shown at all, and the result bounded.
TEST(RedactedJson, HidesSecretsAtAnyDepthAndKeepsTheRest) {
  const std::string secret(64, 'a');
  const std::string text = R"({"session_secret":")" + secret +
                           R"(","master_port":29500,"replicas":[{"token":"t0k","url":"u"}],)"
                           R"("nested":{"trainer_secret":"s","nccl_unique_id_b64":"AAAA"},)"
                           R"("rank_keys":{"1":")" +
                           std::string(64, 'c') +
                           R"("},)"
                           R"("secretive":"kept"})";
  const std::string out = redacted_json(text, 4096);
  EXPECT_EQ(out.find(secret), std::string::npos);
  EXPECT_EQ(out.find("t0k"), std::string::npos);
  EXPECT_EQ(out.find("AAAA"), std::string::npos);
  EXPECT_EQ(out.find(R"("s")"), std::string::npos);
  EXPECT_THAT(out, HasSubstr(R"("session_secret":"<redacted>")"));
  EXPECT_THAT(out, HasSubstr(R"("rank_keys":"<redacted>")"));
  EXPECT_EQ(out.find(std::string(64, 'c')), std::string::npos);
  EXPECT_THAT(out, HasSubstr(R"("master_port":29500)"));
  EXPECT_THAT(out, HasSubstr(R"("url":"u")"));
  EXPECT_THAT(out, HasSubstr(R"("secretive":"kept")"));
  EXPECT_EQ(redacted_json(R"({"session_secret": "x")"), "<not JSON: 22 bytes>");
  EXPECT_EQ(redacted_json(std::string(100000, '[')), "<not JSON: 100000 bytes>");
  EXPECT_EQ(redacted_json(R"({"k":")" + std::string(600, 'v') + R"("})").size(), 512u + 3);
}

}  // namespace
}  // namespace wt
