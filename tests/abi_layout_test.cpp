// Freezes the layout of every ABI-version-1 struct (x86-64 / LP64). A failing assert here means a
// shipped struct changed: append new fields instead, and bump WT_ABI_VERSION.
#include <wt/wt_plugin.h>

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

WT_PIN(wt_tensor, name, 0);
WT_PIN(wt_tensor, tensor, 8);
static_assert(sizeof(DLTensor) == 48);
static_assert(sizeof(wt_tensor) == 56);

WT_PIN(wt_param_meta, name, 0);
WT_PIN(wt_param_meta, dtype, 8);
WT_PIN(wt_param_meta, ndim, 12);
WT_PIN(wt_param_meta, shape, 16);
static_assert(sizeof(wt_param_meta) == 24);

WT_PIN(wt_client, ctx, 8);
WT_PIN(wt_client, init_weight_transfer_engine, 16);
WT_PIN(wt_client, start_weight_update, 24);
WT_PIN(wt_client, update_weights, 32);
WT_PIN(wt_client, finish_weight_update, 40);
static_assert(sizeof(wt_client) == 48);

WT_PIN(wt_weight_source, ctx, 8);
WT_PIN(wt_weight_source, metadata, 16);
WT_PIN(wt_weight_source, begin, 24);
WT_PIN(wt_weight_source, next, 32);
WT_PIN(wt_weight_source, end, 40);
static_assert(sizeof(wt_weight_source) == 48);

WT_PIN(wt_trainer_group, ctx, 8);
WT_PIN(wt_trainer_group, rank, 16);
WT_PIN(wt_trainer_group, size, 20);
WT_PIN(wt_trainer_group, all_gather, 24);
WT_PIN(wt_trainer_group, barrier, 32);
static_assert(sizeof(wt_trainer_group) == 40);

WT_PIN(wt_sparse_patch, name, 0);
WT_PIN(wt_sparse_patch, indices, 8);
WT_PIN(wt_sparse_patch, values, 56);
WT_PIN(wt_sparse_patch, full_ndim, 104);
WT_PIN(wt_sparse_patch, full_shape, 112);
static_assert(sizeof(wt_sparse_patch) == 120);

WT_PIN(wt_send_args, weight_version, 8);
WT_PIN(wt_send_args, patches, 16);
WT_PIN(wt_send_args, num_patches, 24);
static_assert(sizeof(wt_send_args) == 32);

WT_PIN(wt_worker_options, device, 8);
static_assert(sizeof(wt_worker_options) == 16);

WT_PIN(wt_init_info_vtable, parse_json, 8);
WT_PIN(wt_init_info_vtable, to_json, 16);
WT_PIN(wt_init_info_vtable, rank, 24);
WT_PIN(wt_init_info_vtable, is_sender, 32);
WT_PIN(wt_init_info_vtable, destroy, 40);
static_assert(sizeof(wt_init_info_vtable) == 48);

WT_PIN(wt_trainer_vtable, create, 8);
WT_PIN(wt_trainer_vtable, send_weights, 16);
WT_PIN(wt_trainer_vtable, abort, 24);
WT_PIN(wt_trainer_vtable, last_error, 32);
WT_PIN(wt_trainer_vtable, destroy, 40);
static_assert(sizeof(wt_trainer_vtable) == 48);

WT_PIN(wt_worker_vtable, create, 8);
WT_PIN(wt_worker_vtable, start, 16);
WT_PIN(wt_worker_vtable, receive, 24);
WT_PIN(wt_worker_vtable, finish, 32);
WT_PIN(wt_worker_vtable, abort, 40);
WT_PIN(wt_worker_vtable, last_error, 48);
WT_PIN(wt_worker_vtable, destroy, 56);
static_assert(sizeof(wt_worker_vtable) == 64);

WT_PIN(wt_plugin_api, backend, 8);
WT_PIN(wt_plugin_api, plugin_version, 16);
WT_PIN(wt_plugin_api, capabilities, 24);
WT_PIN(wt_plugin_api, init_info, 32);
WT_PIN(wt_plugin_api, trainer, 40);
WT_PIN(wt_plugin_api, worker, 48);
static_assert(sizeof(wt_plugin_api) == 56);

TEST(AbiLayout, VersionConstants) {
  EXPECT_EQ(WT_ABI_VERSION, 1u);
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
}

TEST(AbiLayout, CapabilityBitsAreStable) {
  EXPECT_EQ(WT_CAP_TRAINER, 1ull);
  EXPECT_EQ(WT_CAP_WORKER, 2ull);
  EXPECT_EQ(WT_CAP_HOST_MEMORY, 4ull);
  EXPECT_EQ(WT_CAP_CUDA_MEMORY, 8ull);
  EXPECT_EQ(WT_CAP_SPARSE, 16ull);
  EXPECT_EQ(WT_CAP_PACKED, 32ull);
}
