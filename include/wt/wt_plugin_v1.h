/*
 * wt_plugin_v1.h — ABI version 1 (wt 0.1.0), as the structs of the current header name it with a
 * _v1 suffix. A host uses it to adapt version-1 plugins to the current ABI; the C++ SDK uses it
 * to serve version 1 too. New plugins are written against <wt/wt_plugin.h> alone.
 *
 * Frozen: nothing here ever changes (tests/abi_layout_test.cpp pins every offset). The structs
 * that did not change in version 2 (wt_host_api, wt_trainer_group, the opaque objects) are shared
 * with the current header. What version 2 changed, slot by slot, is listed in docs/abi-policy.md.
 */
#ifndef WT_PLUGIN_V1_H
#define WT_PLUGIN_V1_H

#include <wt/wt_plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wt_tensor_v1 {
  const char* name;
  DLTensor tensor;
} wt_tensor_v1;

typedef struct wt_param_meta_v1 {
  const char* name;
  DLDataType dtype;
  int32_t ndim;
  const int64_t* shape;
} wt_param_meta_v1;

typedef struct wt_client_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  wt_status (*init_weight_transfer_engine)(void* ctx, const char* init_info_json, char* err,
                                           size_t err_cap);
  wt_status (*start_weight_update)(void* ctx, char* err, size_t err_cap);
  wt_status (*update_weights)(void* ctx, const char* update_info_json, char* err, size_t err_cap);
  wt_status (*finish_weight_update)(void* ctx, const char* weight_version, char* err,
                                    size_t err_cap);
} wt_client_v1;

typedef struct wt_weight_source_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  wt_status (*metadata)(void* ctx, const wt_param_meta_v1** params, size_t* count, char* err,
                        size_t err_cap);
  wt_status (*begin)(void* ctx, char* err, size_t err_cap);
  wt_status (*next)(void* ctx, wt_tensor_v1* out, int32_t* done, char* err, size_t err_cap);
  void (*end)(void* ctx);
} wt_weight_source_v1;

typedef struct wt_sparse_patch_v1 {
  const char* name;
  DLTensor indices;
  DLTensor values;
  int32_t full_ndim;
  const int64_t* full_shape;
} wt_sparse_patch_v1;

typedef struct wt_send_args_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* weight_version;
  const wt_sparse_patch_v1* patches;
  size_t num_patches;
} wt_send_args_v1;

typedef struct wt_worker_options_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  DLDevice device;
} wt_worker_options_v1;

typedef wt_status (*wt_load_fn_v1)(void* load_ctx, const wt_tensor_v1* tensors, size_t count,
                                   char* err, size_t err_cap);

typedef struct wt_init_info_vtable_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  wt_status (*parse_json)(const wt_host_api* host, const char* json, wt_init_info** out, char* err,
                          size_t err_cap);
  /* Version 1 returned WT_ERR_INVALID_ARGUMENT when cap was too small. */
  wt_status (*to_json)(const wt_init_info* info, char* buf, size_t cap, size_t* needed);
  int64_t (*rank)(const wt_init_info* info);
  int32_t (*is_sender)(const wt_init_info* info);
  void (*destroy)(wt_init_info* info);
} wt_init_info_vtable_v1;

typedef struct wt_trainer_vtable_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  wt_status (*create)(const wt_host_api* host, const wt_init_info* info, const wt_client_v1* client,
                      const wt_weight_source_v1* source, const wt_trainer_group* group,
                      wt_trainer** out, char* err, size_t err_cap);
  wt_status (*send_weights)(wt_trainer* engine, const wt_send_args_v1* args);
  wt_status (*abort)(wt_trainer* engine);
  const char* (*last_error)(const wt_trainer* engine);
  void (*destroy)(wt_trainer* engine);
} wt_trainer_vtable_v1;

typedef struct wt_worker_vtable_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  wt_status (*create)(const wt_host_api* host, const char* init_info_json,
                      const wt_worker_options_v1* options, wt_worker** out, char* err,
                      size_t err_cap);
  wt_status (*start)(wt_worker* engine);
  wt_status (*receive)(wt_worker* engine, const char* update_info_json, wt_load_fn_v1 load,
                       void* load_ctx);
  wt_status (*finish)(wt_worker* engine);
  wt_status (*abort)(wt_worker* engine);
  const char* (*last_error)(const wt_worker* engine);
  void (*destroy)(wt_worker* engine);
} wt_worker_vtable_v1;

typedef struct wt_plugin_api_v1 {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* backend;
  const char* plugin_version;
  uint64_t capabilities;
  const wt_init_info_vtable_v1* init_info;
  const wt_trainer_vtable_v1* trainer;
  const wt_worker_vtable_v1* worker;
} wt_plugin_api_v1;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WT_PLUGIN_V1_H */
