// Freezes the layout of every ABI-version-1 and version-2 struct (x86-64 / LP64). A failing assert
// here means a shipped struct changed: append new fields instead, and bump WT_ABI_VERSION.
#include <wt/wt_plugin.h>
#include <wt/wt_plugin_v1.h>
#include <wt/dlpack_ops.hpp>

#include "abi2_sizes.hpp"  // libwt internal (wt::private)

#include <gtest/gtest.h>

#include <cstddef>

#define WT_PIN(type, field, off) static_assert(offsetof(type, field) == (off), #type "." #field)

// Every struct starts with its size and ABI version.
WT_PIN(wt_host_api, struct_size, 0);
WT_PIN(wt_host_api, abi_version, 4);
WT_PIN(wt_host_api, user_data, 8);
WT_PIN(wt_host_api, log_level, 16);
WT_PIN(wt_host_api, log, 24);
static_assert(sizeof(wt_host_api) == 32);

WT_PIN(wt_tensor_v1, name, 0);
WT_PIN(wt_tensor_v1, tensor, 8);
static_assert(sizeof(DLTensor) == 48);
static_assert(sizeof(wt_tensor_v1) == 56);

WT_PIN(wt_param_meta_v1, name, 0);
WT_PIN(wt_param_meta_v1, dtype, 8);
WT_PIN(wt_param_meta_v1, ndim, 12);
WT_PIN(wt_param_meta_v1, shape, 16);
static_assert(sizeof(wt_param_meta_v1) == 24);

WT_PIN(wt_client_v1, ctx, 8);
WT_PIN(wt_client_v1, init_weight_transfer_engine, 16);
WT_PIN(wt_client_v1, start_weight_update, 24);
WT_PIN(wt_client_v1, update_weights, 32);
WT_PIN(wt_client_v1, finish_weight_update, 40);
static_assert(sizeof(wt_client_v1) == 48);

WT_PIN(wt_weight_source_v1, ctx, 8);
WT_PIN(wt_weight_source_v1, metadata, 16);
WT_PIN(wt_weight_source_v1, begin, 24);
WT_PIN(wt_weight_source_v1, next, 32);
WT_PIN(wt_weight_source_v1, end, 40);
static_assert(sizeof(wt_weight_source_v1) == 48);

WT_PIN(wt_trainer_group, ctx, 8);
WT_PIN(wt_trainer_group, rank, 16);
WT_PIN(wt_trainer_group, size, 20);
WT_PIN(wt_trainer_group, all_gather, 24);
WT_PIN(wt_trainer_group, barrier, 32);
static_assert(sizeof(wt_trainer_group) == 40);

WT_PIN(wt_sparse_patch_v1, name, 0);
WT_PIN(wt_sparse_patch_v1, indices, 8);
WT_PIN(wt_sparse_patch_v1, values, 56);
WT_PIN(wt_sparse_patch_v1, full_ndim, 104);
WT_PIN(wt_sparse_patch_v1, full_shape, 112);
static_assert(sizeof(wt_sparse_patch_v1) == 120);

WT_PIN(wt_send_args_v1, weight_version, 8);
WT_PIN(wt_send_args_v1, patches, 16);
WT_PIN(wt_send_args_v1, num_patches, 24);
static_assert(sizeof(wt_send_args_v1) == 32);

WT_PIN(wt_worker_options_v1, device, 8);
static_assert(sizeof(wt_worker_options_v1) == 16);

WT_PIN(wt_init_info_vtable_v1, parse_json, 8);
WT_PIN(wt_init_info_vtable_v1, to_json, 16);
WT_PIN(wt_init_info_vtable_v1, rank, 24);
WT_PIN(wt_init_info_vtable_v1, is_sender, 32);
WT_PIN(wt_init_info_vtable_v1, destroy, 40);
static_assert(sizeof(wt_init_info_vtable_v1) == 48);

WT_PIN(wt_trainer_vtable_v1, create, 8);
WT_PIN(wt_trainer_vtable_v1, send_weights, 16);
WT_PIN(wt_trainer_vtable_v1, abort, 24);
WT_PIN(wt_trainer_vtable_v1, last_error, 32);
WT_PIN(wt_trainer_vtable_v1, destroy, 40);
static_assert(sizeof(wt_trainer_vtable_v1) == 48);

WT_PIN(wt_worker_vtable_v1, create, 8);
WT_PIN(wt_worker_vtable_v1, start, 16);
WT_PIN(wt_worker_vtable_v1, receive, 24);
WT_PIN(wt_worker_vtable_v1, finish, 32);
WT_PIN(wt_worker_vtable_v1, abort, 40);
WT_PIN(wt_worker_vtable_v1, last_error, 48);
WT_PIN(wt_worker_vtable_v1, destroy, 56);
static_assert(sizeof(wt_worker_vtable_v1) == 64);

WT_PIN(wt_plugin_api_v1, backend, 8);
WT_PIN(wt_plugin_api_v1, plugin_version, 16);
WT_PIN(wt_plugin_api_v1, capabilities, 24);
WT_PIN(wt_plugin_api_v1, init_info, 32);
WT_PIN(wt_plugin_api_v1, trainer, 40);
WT_PIN(wt_plugin_api_v1, worker, 48);
static_assert(sizeof(wt_plugin_api_v1) == 56);

// ---- Version 2 (wt 0.2.0). Unchanged since version 1: wt_host_api, wt_trainer_group. ----
WT_PIN(wt_tensor, struct_size, 0);
WT_PIN(wt_tensor, abi_version, 4);
WT_PIN(wt_tensor, name, 8);
WT_PIN(wt_tensor, tensor, 16);
static_assert(sizeof(wt_tensor) == 64);

WT_PIN(wt_param_meta, name, 8);
WT_PIN(wt_param_meta, dtype, 16);
WT_PIN(wt_param_meta, ndim, 20);
WT_PIN(wt_param_meta, shape, 24);
// grown in wt 0.4 (the shard tail): ABI 2 plugins and hosts of wt 0.2-0.3 hand 32-byte elements
WT_PIN(wt_param_meta, sharded, 32);
WT_PIN(wt_param_meta, shard_dim, 36);
WT_PIN(wt_param_meta, shard_offset, 40);
WT_PIN(wt_param_meta, shard_length, 48);
static_assert(sizeof(wt_param_meta) == 56);

WT_PIN(wt_sparse_patch, name, 8);
WT_PIN(wt_sparse_patch, indices, 16);
WT_PIN(wt_sparse_patch, values, 64);
WT_PIN(wt_sparse_patch, full_ndim, 112);
WT_PIN(wt_sparse_patch, full_shape, 120);
static_assert(sizeof(wt_sparse_patch) == 128);

WT_PIN(wt_client, ctx, 8);
WT_PIN(wt_client, init_weight_transfer_engine, 16);
WT_PIN(wt_client, start_weight_update, 24);
WT_PIN(wt_client, update_weights, 32);
WT_PIN(wt_client, finish_weight_update, 40);
WT_PIN(wt_client, end_weight_update, 48);
WT_PIN(wt_client, abandon_calls,
       56);  // appended in wt 0.3: ABI 2 plugins read up to end_weight_update
static_assert(sizeof(wt_client) == 64);

WT_PIN(wt_weight_source, ctx, 8);
WT_PIN(wt_weight_source, metadata, 16);
WT_PIN(wt_weight_source, begin, 24);
WT_PIN(wt_weight_source, next, 32);
WT_PIN(wt_weight_source, end, 40);
WT_PIN(wt_weight_source, flags, 48);  // grown in wt 0.3: ABI 2 plugins read up to `end`
static_assert(sizeof(wt_weight_source) == 56);

WT_PIN(wt_trainer_create_args, host, 8);
WT_PIN(wt_trainer_create_args, info, 16);
WT_PIN(wt_trainer_create_args, client, 24);
WT_PIN(wt_trainer_create_args, source, 32);
WT_PIN(wt_trainer_create_args, group, 40);
static_assert(sizeof(wt_trainer_create_args) == 48);

WT_PIN(wt_send_args, weight_version, 8);
WT_PIN(wt_send_args, patches, 16);
WT_PIN(wt_send_args, num_patches, 24);
WT_PIN(wt_send_args, stream, 32);
static_assert(sizeof(wt_send_args) == 40);

WT_PIN(wt_worker_create_args, host, 8);
WT_PIN(wt_worker_create_args, init_info_json, 16);
WT_PIN(wt_worker_create_args, device, 24);
WT_PIN(wt_worker_create_args, stream, 32);
WT_PIN(wt_worker_create_args, backend_options_json, 40);
WT_PIN(wt_worker_create_args, held, 48);  // appended within ABI 2 (wt 0.4)
WT_PIN(wt_worker_create_args, held_count, 56);
static_assert(sizeof(wt_worker_create_args) == 64);

WT_PIN(wt_loader, ctx, 8);
WT_PIN(wt_loader, load, 16);
WT_PIN(wt_loader, load_patches, 24);
WT_PIN(wt_loader, destination, 32);
WT_PIN(wt_loader, written, 40);
static_assert(sizeof(wt_loader) == 48);

// The tables keep version 1's layout; only their slots' arguments changed.
WT_PIN(wt_init_info_vtable, parse_json, 8);
WT_PIN(wt_init_info_vtable, destroy, 40);
static_assert(sizeof(wt_init_info_vtable) == 48);
WT_PIN(wt_trainer_vtable, create, 8);
WT_PIN(wt_trainer_vtable, destroy, 40);
static_assert(sizeof(wt_trainer_vtable) == 48);
WT_PIN(wt_worker_vtable, create, 8);
WT_PIN(wt_worker_vtable, receive, 24);
WT_PIN(wt_worker_vtable, destroy, 56);
static_assert(sizeof(wt_worker_vtable) == 64);
WT_PIN(wt_plugin_api, backend, 8);
WT_PIN(wt_plugin_api, worker, 48);
static_assert(sizeof(wt_plugin_api) == 56);

TEST(AbiLayout, VersionConstants) {
  EXPECT_EQ(WT_ABI_VERSION, 2u);
  EXPECT_EQ(WT_ABI_MIN_SUPPORTED, 1u);
  EXPECT_STREQ(WT_PLUGIN_ENTRY_SYMBOL, "wt_plugin_get");
}

TEST(AbiLayout, StatusCodesAreStable) {
  EXPECT_EQ(WT_OK, 0);
  EXPECT_EQ(WT_ERR_INVALID_ARGUMENT, 1);
  EXPECT_EQ(WT_ERR_INCOMPATIBLE, 2);
  EXPECT_EQ(WT_ERR_UNSUPPORTED, 3);
  EXPECT_EQ(WT_ERR_STATE, 4);
  EXPECT_EQ(WT_ERR_SYSTEM, 5);
  EXPECT_EQ(WT_ERR_DEVICE, 6);
  EXPECT_EQ(WT_ERR_TIMEOUT, 7);
  EXPECT_EQ(WT_ERR_ABORTED, 8);
  EXPECT_EQ(WT_ERR_REMOTE, 9);
  EXPECT_EQ(WT_ERR_NOT_FOUND, 10);
  EXPECT_EQ(WT_ERR_INTERNAL, 11);
  EXPECT_EQ(WT_ERR_BUFFER_TOO_SMALL, 12);
}

TEST(AbiLayout, CapabilityBitsAreStable) {
  EXPECT_EQ(WT_CAP_TRAINER, 1ull);
  EXPECT_EQ(WT_CAP_WORKER, 2ull);
  EXPECT_EQ(WT_CAP_HOST_MEMORY, 4ull);
  EXPECT_EQ(WT_CAP_CUDA_MEMORY, 8ull);
  EXPECT_EQ(WT_CAP_SPARSE, 16ull);
  EXPECT_EQ(WT_CAP_PACKED, 32ull);
}

// DLPack's types compare with == from code outside namespace wt (a plugin's own namespace, an
// anonymous one) without a using-declaration: the operators live where DLPack's types do.
namespace plugin_code {
bool same_dtype(const DLDataType& a, const DLDataType& b) {
  return a == b;
}
bool same_device(const DLDevice& a, const DLDevice& b) {
  return a == b && !(a != b);
}
}  // namespace plugin_code

TEST(DlpackOperators, AreFoundFromPluginCodeWithoutAUsingDeclaration) {
  EXPECT_TRUE(plugin_code::same_dtype({kDLBfloat, 16, 1}, {kDLBfloat, 16, 1}));
  EXPECT_FALSE(plugin_code::same_dtype({kDLBfloat, 16, 1}, {kDLFloat, 16, 1}));
  EXPECT_FALSE(plugin_code::same_dtype({kDLFloat, 32, 1}, {kDLFloat, 32, 2}));
  EXPECT_TRUE(plugin_code::same_device({kDLCPU, 0}, {kDLCPU, 0}));
  EXPECT_FALSE(plugin_code::same_device({kDLCUDA, 0}, {kDLCUDA, 1}));
}

// The smallest element structs the host accepts from a plugin are ABI 2's, pinned: where ABI 2's
// last field ends, which a later ABI appending fields does not move.
TEST(AbiTwoSizes, AreWhereAbiTwosLastFieldsEnd) {
  EXPECT_EQ(wt::abi2::kTensorSize, 64u);
  EXPECT_EQ(wt::abi2::kParamMetaSize, 32u);
  EXPECT_EQ(wt::abi2::kSparsePatchSize, 128u);
  EXPECT_EQ(wt::abi2::kTensorSize, offsetof(wt_tensor, tensor) + sizeof(DLTensor));
}
