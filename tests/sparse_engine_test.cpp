// The sparse_nccl engines on their own, from the plugin's sources, with a recording client and a
// spy communicator (the reference suite's sparse cases): the worker init payload, the call order,
// a host round as one packed broadcast and vLLM's wire (two broadcasts per patch: indices, then
// values), an empty round that does nothing, and every malformed patch rejected before any call
// or collective.
#include "packed_round.hpp"
#include "sparse_trainer.hpp"
#include "sparse_worker.hpp"

#include "support/recording_client.hpp"
#include "support/spy_communicator.hpp"

#include <wt/delta.hpp>
#include <wt/error.hpp>
#include <wt/weight_source.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

namespace wt {
namespace {

using test::Spy;

sparse::SparseInitInfo info(int rank = 0) {
  auto parsed = sparse::SparseInitInfo::parse(
      {{"master_address", "10.0.0.1"}, {"master_port", 29500}, {"world_size", 2}, {"rank", rank}});
  return static_cast<sparse::SparseInitInfo&>(*parsed);
}

sdk::TrainerContext context(Client& client) {
  sdk::TrainerContext c;
  c.client = sdk::ClientRef(client.c_client());
  return c;
}

// A patch over its own storage.
struct Patch {
  std::string name = "w";
  std::vector<int32_t> indices{1, 7};
  std::vector<float> values{10, 20};
  std::vector<int64_t> full{4, 4};
  int64_t n[1] = {2}, nv[1] = {2};
  DLDataType index_type{kDLInt, 32, 1};
  DLDataType value_type{kDLFloat, 32, 1};
  int32_t index_ndim = 1;
  std::optional<int64_t> length;  // what both shapes say, whatever the vectors hold

  wt_sparse_patch view() {
    n[0] = length.value_or(static_cast<int64_t>(indices.size()));
    nv[0] = length.value_or(static_cast<int64_t>(values.size()));
    wt_sparse_patch p{};
    p.struct_size = sizeof p;
    p.abi_version = WT_ABI_VERSION;
    p.name = name.c_str();
    p.indices = DLTensor{indices.data(), {kDLCPU, 0}, index_ndim, index_type, n, nullptr, 0};
    p.values = DLTensor{values.data(), {kDLCPU, 0}, 1, value_type, nv, nullptr, 0};
    p.full_ndim = static_cast<int32_t>(full.size());
    p.full_shape = full.data();
    return p;
  }
};

TEST(SparseTrainerSpy, InitShipsVllmsSevenKeysWithTheUnpackedDefaultsAndTheHostRoundFormat) {
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory());
  ASSERT_THAT(client.methods(), ElementsAre("init"));
  EXPECT_EQ(json::parse(client.calls()[0].payload), json({{"master_address", "10.0.0.1"},
                                                          {"master_port", 29500},
                                                          {"rank_offset", 1},
                                                          {"world_size", 2},
                                                          {"packed", false},
                                                          {"packed_buffer_size_bytes", 1 << 30},
                                                          {"packed_num_buffers", 2},
                                                          {"host_round_format", "packed"}}));
}

// Two patches: w (2 float32 values in a 4x4 tensor) and v (3 in a 6-element one).
struct TwoPatches {
  Patch a, b;
  TwoPatches() {
    b.name = "v";
    b.indices = {0, 3, 5};
    b.values = {1, 2, 3};
    b.full = {6};
  }
  sdk::SendArgs args() {
    sdk::SendArgs args;
    args.weight_version = "step-1";
    args.patches = {a.view(), b.view()};
    return args;
  }
};

void expect_vllms_update_info(const test::RecordingClient& client) {
  EXPECT_THAT(client.methods(), ElementsAre("init", "start", "update", "finish"));
  EXPECT_EQ(json::parse(client.calls()[2].payload), json({{"names", {"w", "v"}},
                                                          {"dtype_names", {"float32", "float32"}},
                                                          {"shapes", {{4, 4}, {6}}},
                                                          {"num_updates_list", {2, 3}}}));
}

TEST(SparseTrainerSpy, AHostRoundIsOnePackedBroadcastIndicesThenValues) {
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory());
  TwoPatches round;
  trainer.send_weights(round.args());
  expect_vllms_update_info(client);
  ASSERT_EQ(spy.log->size(), 1u) << "the round in one broadcast";
  const auto& wire = (*spy.log)[0].data;
  ASSERT_EQ(wire.size(), 4u * 5 + 4 * 5) << "5 int32 indices, then 5 float32 values";
  std::vector<int32_t> indices(5);
  std::vector<float> values(5);
  std::memcpy(indices.data(), wire.data(), 20);
  std::memcpy(values.data(), wire.data() + 20, 20);
  EXPECT_THAT(indices, ElementsAre(1, 7, 0, 3, 5));
  EXPECT_THAT(values, ElementsAre(10, 20, 1, 2, 3));
}

TEST(SparseTrainerSpy, VllmsWireIsTwoBroadcastsPerPatchIndicesThenValues) {
  // The wire of CUDA rounds (NCCL peers may be vLLM's workers), here on host memory.
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory(), false);
  TwoPatches round;
  trainer.send_weights(round.args());
  expect_vllms_update_info(client);
  ASSERT_EQ(spy.log->size(), 4u) << "indices then values, per patch";
  EXPECT_EQ((*spy.log)[0].bytes, 8u);
  EXPECT_EQ((*spy.log)[0].dtype.code, kDLInt);
  EXPECT_EQ(std::memcmp((*spy.log)[0].data.data(), round.a.indices.data(), 8), 0);
  EXPECT_EQ(std::memcmp((*spy.log)[1].data.data(), round.a.values.data(), 8), 0);
  EXPECT_EQ((*spy.log)[2].bytes, 12u);
  EXPECT_EQ(std::memcmp((*spy.log)[3].data.data(), round.b.values.data(), 12), 0);
}

TEST(SparsePackedRound, ValuesAreAlignedToTheirElementSize) {
  // 3 + 1 int32 indices (16 bytes); the 3 float64 values at 16 (to 40); the bfloat16 one at 40.
  auto layout = sparse::packed_round_layout({3, 1}, {8, 2});
  EXPECT_THAT(layout.indices_at, ElementsAre(0u, 12u));
  EXPECT_THAT(layout.values_at, ElementsAre(16u, 40u));
  EXPECT_EQ(layout.bytes, 42u);
  try {
    sparse::packed_round_layout({int64_t{1} << 62}, {2});
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("more bytes than 64 bits can count"));
  }
}

TEST(SparseTrainerSpy, AnEmptyRoundDoesNothingAtAll) {
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory());
  trainer.send_weights({});
  EXPECT_THAT(client.methods(), ElementsAre("init"));
  EXPECT_TRUE(spy.log->empty());
}

TEST(SparseTrainerSpy, ANonSenderMakesNoCalls) {
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(1), spy.factory());
  Patch a;
  sdk::SendArgs args;
  args.patches = {a.view()};
  trainer.send_weights(args);
  EXPECT_TRUE(client.calls().empty());
  EXPECT_EQ(spy.made, 0);
}

TEST(SparseTrainerSpy, ASourceIsRefused) {
  test::RecordingClient client;
  struct Empty : WeightSource {
    std::vector<ParamMeta> m;
    const std::vector<ParamMeta>& metadata() override { return m; }
    void begin() override {}
    bool next(wt_tensor&) override { return false; }
    void end() override {}
  } source;
  auto c = context(client);
  c.source = sdk::SourceRef(source.c_source());
  try {
    sparse::SparseTrainer trainer(c, info());
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("takes no WeightSource"));
  }
}

// One good patch and one bad one: the round is refused naming the bad patch and the rule, before
// start_weight_update and before any collective.
void expect_refused(Patch bad, const std::string& message) {
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory());
  Patch good;
  good.name = "good";
  sdk::SendArgs args;
  args.patches = {good.view(), bad.view()};
  try {
    trainer.send_weights(args);
    FAIL() << "accepted: " << message;
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr(message));
  }
  EXPECT_THAT(client.methods(), ElementsAre("init")) << message;
  EXPECT_TRUE(spy.log->empty()) << message;
}

TEST(SparseTrainerSpy, EveryMalformedPatchIsRefusedBeforeAnyCall) {
  Patch int64;
  int64.index_type = {kDLInt, 64, 1};
  expect_refused(int64, "Sparse weight updates require int32 indices: w");
  Patch two_d;
  two_d.index_ndim = 2;
  expect_refused(two_d, "Sparse weight patches must be 1D flattened updates: w");
  Patch lengths;
  lengths.values = {1};
  expect_refused(lengths, "`indices` and `values` must have matching lengths for w");
  Patch range;
  range.indices = {3, 16};
  expect_refused(range, "index 16 (at position 1) is outside [0, 16)");
  Patch negative;
  negative.indices = {-1, 2};
  expect_refused(negative, "index -1 (at position 0) is outside [0, 16)");
  Patch duplicate;
  duplicate.indices = {5, 5};
  expect_refused(duplicate, "sparse patch 'w': index 5 appears more than once");
  Patch nan;
  nan.values = {1, std::numeric_limits<float>::quiet_NaN()};
  expect_refused(nan, "sparse patch 'w': values hold NaN");
  Patch zero_dim;
  zero_dim.full = {4, 0};
  expect_refused(zero_dim, "full_shape needs positive dimensions");
  Patch huge;
  huge.full = {65536, 65536};
  expect_refused(huge, "at most 2^31 - 1 elements");
  Patch twice;
  twice.name = "good";
  expect_refused(twice, "sparse patch 'good' appears twice in one round");
  // Lengths that would size copies and the wire wrongly: refused before anything is read.
  Patch negative_length;
  negative_length.length = -1;
  expect_refused(negative_length, "`indices` and `values` must have matching lengths for w");
  Patch more_than_elements;
  more_than_elements.full = {2};
  more_than_elements.indices = {0, 1, 1};
  more_than_elements.values = {1, 2, 3};
  expect_refused(more_than_elements, "sparse patch 'w': 3 indices for a full_shape of 2 elements");
  Patch unnamed_dtype;
  unnamed_dtype.value_type = {kDLFloat, 24, 1};
  expect_refused(unnamed_dtype, "sparse patch 'w': values of dtype (code 2, 24 bits, 1 lanes)");
}

TEST(SparseTrainerSpy, AMissingFullShapeIsRefused) {
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory());
  Patch p;
  auto v = p.view();
  v.full_ndim = -1;
  v.full_shape = nullptr;
  sdk::SendArgs args;
  args.patches = {v};
  try {
    trainer.send_weights(args);
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Sparse patch requires full_shape: w"));
  }
  EXPECT_THAT(client.methods(), ElementsAre("init"));
  EXPECT_TRUE(spy.log->empty());
}

// What the trainer sent for TwoPatches, as each wire has it, received by a worker whose loader
// records the patches it is handed.
void expect_worker_reads(bool packed_wire) {
  TwoPatches round;
  test::RecordingClient client;
  Spy spy;
  sparse::SparseTrainer trainer(context(client), info(), spy.factory(), packed_wire);
  trainer.send_weights(round.args());
  std::vector<unsigned char> stream;
  for (const auto& b : *spy.log) stream.insert(stream.end(), b.data.begin(), b.data.end());
  std::vector<const void*> into;
  sparse::SparseWorker worker(sdk::WorkerContext{},
                              json::parse(client.calls()[0].payload),  // the init the trainer sent
                              [&](const plugins::CommunicatorOptions&) {
                                return std::make_unique<test::FeedingCommunicator>(stream, into);
                              });
  worker.start();
  struct Seen {
    std::string name;
    std::vector<int32_t> indices;
    std::vector<float> values;
    std::vector<int64_t> full;
  };
  std::vector<Seen> seen;
  wt_loader l{};
  l.struct_size = sizeof l;
  l.abi_version = WT_ABI_VERSION;
  l.ctx = &seen;
  l.load_patches = [](void* ctx, const wt_sparse_patch* p, size_t n, char*, size_t) {
    for (size_t i = 0; i < n; ++i) {
      const auto count = static_cast<std::size_t>(p[i].indices.shape[0]);
      const auto* idx = static_cast<const int32_t*>(p[i].indices.data);
      const auto* val = static_cast<const float*>(p[i].values.data);
      static_cast<std::vector<Seen>*>(ctx)->push_back(
          {p[i].name,
           {idx, idx + count},
           {val, val + count},
           {p[i].full_shape, p[i].full_shape + p[i].full_ndim}});
    }
    return WT_OK;
  };
  worker.receive(json::parse(client.calls()[2].payload), sdk::LoaderRef(&l));
  EXPECT_EQ(into.size(), packed_wire ? 1u : 4u);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].name, "w");
  EXPECT_EQ(seen[0].indices, round.a.indices);
  EXPECT_EQ(seen[0].values, round.a.values);
  EXPECT_EQ(seen[0].full, round.a.full);
  EXPECT_EQ(seen[1].name, "v");
  EXPECT_EQ(seen[1].indices, round.b.indices);
  EXPECT_EQ(seen[1].values, round.b.values);
  EXPECT_EQ(seen[1].full, round.b.full);
}

TEST(SparseWorkerSpy, ReadsAPackedHostRoundIntoEveryPatch) {
  expect_worker_reads(true);
}

TEST(SparseWorkerSpy, ReadsVllmsWireIntoEveryPatch) {
  expect_worker_reads(false);
}

// The host round's format is said at init: a worker that cannot read it (an older one, which
// reads only per-patch rounds) refuses then, naming the field, as does one told no format.
TEST(SparseWorkerSpy, AHostRoundFormatTheWorkerCannotReadIsRefusedAtInit) {
  Spy spy;
  const json base = {
      {"master_address", "h"}, {"master_port", 1}, {"rank_offset", 1}, {"world_size", 2}};
  json packed = base;
  packed["host_round_format"] = "packed";
  try {
    sparse::SparseWorker older(sdk::WorkerContext{}, packed, spy.factory(), false);
    FAIL() << "an older worker took a packed round format";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INCOMPATIBLE);
    EXPECT_THAT(e.what(), HasSubstr("field 'host_round_format' is \"packed\", a format this "
                                    "worker cannot read"));
  }
  try {
    sparse::SparseWorker worker(sdk::WorkerContext{}, base, spy.factory());
    FAIL() << "a worker took an init without the host round format";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("did not say its host round format (field "
                                    "'host_round_format')"));
  }
  EXPECT_TRUE(spy.log->empty());
}

TEST(SparseWorkerSpy, UpdateInfoIsCheckedAsVllmChecksIt) {
  Spy spy;
  sparse::SparseWorker worker(sdk::WorkerContext{},
                              {{"master_address", "h"},
                               {"master_port", 1},
                               {"rank_offset", 1},
                               {"world_size", 2},
                               {"host_round_format", "per_patch"}},
                              spy.factory());
  worker.start();
  auto refused = [&](json update, const std::string& message) {
    try {
      worker.receive(update, sdk::LoaderRef());
      FAIL() << update.dump();
    } catch (const sdk::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(message)) << update.dump();
    }
  };
  refused({{"names", json::array()},
           {"dtype_names", json::array()},
           {"shapes", json::array()},
           {"num_updates_list", json::array()}},
          "'num_updates_list' cannot be empty for sparse updates");
  refused({{"names", {"w"}},
           {"dtype_names", {"float32"}},
           {"shapes", {{4}}},
           {"num_updates_list", {1, 2}}},
          "'num_updates_list' has 2 entries but 'names' has 1");
  refused({{"names", {"w"}},
           {"dtype_names", {"float32"}},
           {"shapes", {{4}}},
           {"num_updates_list", {-1}}},
          "must be non-negative");
  refused({{"names", {"w"}},
           {"dtype_names", {"float32"}},
           {"shapes", {{4, 4}}},
           {"num_updates_list", {2147483647}}},
          "'num_updates_list[0]' is 2147483647, but 'w' has 16 elements");
  EXPECT_TRUE(spy.log->empty());
}

TEST(Delta, IndicesWhereTheBitsDifferAndTheNewValues) {
  std::vector<float> before(3'000'000), after;
  for (std::size_t i = 0; i < before.size(); ++i) before[i] = static_cast<float>(i);
  after = before;
  for (std::size_t i = 5; i < after.size(); i += 997) after[i] += 1;
  after[after.size() - 1] = -0.0f;  // the last element, and a sign bit only
  int64_t shape[2] = {1000, 3000};
  DLTensor a{before.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor b{after.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
  for (unsigned threads : {1u, 4u}) {
    Delta d = make_delta("w", a, b, threads);
    std::vector<int32_t> expected;
    for (std::size_t i = 5; i < after.size(); i += 997) expected.push_back(static_cast<int32_t>(i));
    if (expected.back() != static_cast<int32_t>(after.size() - 1))
      expected.push_back(static_cast<int32_t>(after.size() - 1));
    EXPECT_EQ(d.indices, expected) << threads << " thread(s)";
    ASSERT_EQ(d.values.size(), 4 * expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
      float v;
      std::memcpy(&v, d.values.data() + 4 * k, 4);
      EXPECT_EQ(std::memcmp(&v, &after[expected[k]], 4), 0);
    }
    auto p = d.patch();
    EXPECT_EQ(p.full_ndim, 2);
    EXPECT_EQ(p.indices.shape[0], static_cast<int64_t>(expected.size()));
  }
  int64_t other[1] = {3'000'000};
  DLTensor c{after.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, other, nullptr, 0};
  EXPECT_THROW(make_delta("w", a, c), Error);
}

TEST(Delta, EveryElementSizeGathersItsWholeElements) {
  // 1-byte elements, and 12-byte ones (three float32 lanes: no fixed-size loop for those).
  for (DLDataType dtype : {DLDataType{kDLUInt, 8, 1}, DLDataType{kDLFloat, 32, 3}}) {
    const std::size_t size = dtype.bits / 8 * dtype.lanes, n = 1000;
    std::vector<unsigned char> before(n * size), after;
    for (std::size_t i = 0; i < before.size(); ++i) before[i] = static_cast<unsigned char>(i * 31);
    after = before;
    const std::vector<int32_t> changed = {0, 7, 500, 999};
    for (int32_t i : changed) after[static_cast<std::size_t>(i) * size + size - 1] ^= 0x80;
    int64_t shape[1] = {static_cast<int64_t>(n)};
    DLTensor a{before.data(), {kDLCPU, 0}, 1, dtype, shape, nullptr, 0};
    DLTensor b{after.data(), {kDLCPU, 0}, 1, dtype, shape, nullptr, 0};
    Delta d = make_delta("w", a, b);
    EXPECT_EQ(d.indices, changed) << size << "-byte elements";
    ASSERT_EQ(d.values.size(), changed.size() * size);
    for (std::size_t k = 0; k < changed.size(); ++k)
      EXPECT_EQ(std::memcmp(d.values.data() + k * size,
                            after.data() + static_cast<std::size_t>(changed[k]) * size, size),
                0)
          << size << "-byte element " << changed[k];
  }
}

}  // namespace
}  // namespace wt
