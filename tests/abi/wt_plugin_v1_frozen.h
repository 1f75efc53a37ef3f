/*
 * wt_plugin.h — the stable C ABI between libwt (the host) and a weight-transfer backend plugin.
 *
 * Read this first if you write a backend. It is plain C99 and needs only <stdint.h>, <stddef.h>
 * and DLPack's <dlpack/dlpack.h>, so you may copy it into your own tree.
 *
 * ------------------------------------------------------------------------------------------------
 * What a plugin is
 * ------------------------------------------------------------------------------------------------
 * A backend is a shared library named  libwt_<backend>.so  that exports exactly ONE symbol:
 *
 *     wt_status wt_plugin_get(uint32_t host_abi_version,
 *                             uint32_t* plugin_abi_version,
 *                             const wt_plugin_api** api);
 *
 * libwt loads it lazily, the first time a trainer or worker engine of that backend is created,
 * with RTLD_NOW | RTLD_LOCAL, and never unloads it while an engine exists. Everything else the
 * plugin offers is reached through the table it returns.
 *
 * ------------------------------------------------------------------------------------------------
 * Version negotiation (both ways)
 * ------------------------------------------------------------------------------------------------
 * The host passes the newest ABI version it speaks (WT_ABI_VERSION of its headers). The plugin
 *   - always writes the ABI version it will speak to *plugin_abi_version: the newest one it
 *     implements that is <= host_abi_version, or its oldest one if even that is newer;
 *   - returns WT_OK and sets *api when it can speak a version <= host_abi_version, otherwise
 *     returns WT_ERR_INCOMPATIBLE and leaves *api untouched.
 * The host then rejects the plugin if that version is below WT_ABI_MIN_SUPPORTED. Both version
 * numbers appear in the error a user sees.
 *
 * ------------------------------------------------------------------------------------------------
 * Rules every struct and call follows
 * ------------------------------------------------------------------------------------------------
 * 1. Every struct that crosses the boundary starts with  uint32_t struct_size; uint32_t
 *    abi_version;  set by whoever fills it (sizeof of its own build, WT_ABI_VERSION of its own
 *    headers). A reader looks only at fields that lie inside struct_size and calls a function slot
 *    only if it lies inside struct_size AND is non-NULL. Structs only ever grow at the end; the
 *    layout of every shipped version is frozen by tests (see tests/abi_layout_test.c).
 * 2. No C++ types and no exceptions cross this boundary. Every fallible call returns a wt_status.
 *    The human-readable detail is either a message owned by the object (xxx_last_error, valid
 *    until the next call on that object) or, for calls that create an object, written into a
 *    caller-provided buffer (char* err, size_t err_cap; always NUL-terminated, truncated to fit).
 * 3. Whoever creates an object destroys it. destroy(NULL) is a no-op. On failure, out-parameters
 *    are left untouched.
 * 4. Memory the caller passes in (strings, arrays, tensors) is borrowed for the duration of the
 *    call unless a comment says otherwise. Copy what you keep.
 * 5. Plugins keep no global mutable state: all state hangs off the objects they create, and
 *    services such as logging come from the wt_host_api passed to every create call.
 * 6. Every blocking wait has a deadline, and the abort slots are safe to call from another thread
 *    while a call on the same engine is blocked; that call then returns WT_ERR_ABORTED.
 * 7. Strings are UTF-8 and NUL-terminated. JSON payloads are UTF-8 JSON text.
 */
#ifndef WT_PLUGIN_H
#define WT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version these headers describe, and the oldest plugin ABI this host still accepts. */
#define WT_ABI_VERSION 1u
#define WT_ABI_MIN_SUPPORTED 1u

/* The only symbol a plugin exports. */
#define WT_PLUGIN_ENTRY_SYMBOL "wt_plugin_get"

#if defined(__GNUC__)
#define WT_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define WT_PLUGIN_EXPORT
#endif

/* ------------------------------------------------------------------------------------------------
 * Status codes. Values are stable forever; a host treats an unknown value like WT_ERR_INTERNAL.
 * --------------------------------------------------------------------------------------------- */
typedef int32_t wt_status;

#define WT_OK 0
#define WT_ERR_INVALID_ARGUMENT \
  1                           /* bad input: a field, a payload, a tensor; the message names it */
#define WT_ERR_INCOMPATIBLE 2 /* ABI version, capability or wire-format mismatch */
#define WT_ERR_UNSUPPORTED 3  /* not built in, or not possible here (e.g. CUDA without a GPU) */
#define WT_ERR_STATE 4        /* called out of order (e.g. receive before start) */
#define WT_ERR_SYSTEM 5       /* an operating-system call failed (shared memory, sockets) */
#define WT_ERR_DEVICE 6       /* a CUDA or NCCL call failed */
#define WT_ERR_TIMEOUT 7      /* a deadline passed */
#define WT_ERR_ABORTED 8      /* abort() was called */
#define WT_ERR_REMOTE 9       /* the other side (a client RPC, a peer) reported a failure */
#define WT_ERR_NOT_FOUND 10   /* a named thing (backend, tensor, handle) does not exist */
#define WT_ERR_INTERNAL 11    /* a bug, or an unexpected exception inside the plugin */

/* ------------------------------------------------------------------------------------------------
 * Capability bits a plugin declares in wt_plugin_api.capabilities. The host checks them before use.
 * --------------------------------------------------------------------------------------------- */
#define WT_CAP_TRAINER (1ull << 0)     /* implements the trainer engine vtable */
#define WT_CAP_WORKER (1ull << 1)      /* implements the worker engine vtable */
#define WT_CAP_HOST_MEMORY (1ull << 2) /* moves tensors in host memory (kDLCPU) */
#define WT_CAP_CUDA_MEMORY (1ull << 3) /* moves tensors in CUDA memory (kDLCUDA); built with CUDA \
                                        */
#define WT_CAP_SPARSE (1ull << 4)      /* delta backend: send_weights takes patches, no source */
#define WT_CAP_PACKED (1ull << 5)      /* supports packed (bucketed) transfer */

/* ------------------------------------------------------------------------------------------------
 * Log levels, for wt_host_api.log.
 * --------------------------------------------------------------------------------------------- */
#define WT_LOG_TRACE 0
#define WT_LOG_DEBUG 1
#define WT_LOG_INFO 2
#define WT_LOG_WARN 3
#define WT_LOG_ERROR 4
#define WT_LOG_OFF 6

/* ------------------------------------------------------------------------------------------------
 * Services the host gives the plugin, passed to every create call. Valid for the lifetime of the
 * object created with it.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_host_api {
  uint32_t struct_size;
  uint32_t abi_version;
  void* user_data;
  /* Messages below this level are not wanted; skip formatting them. */
  int32_t log_level;
  /* Thread-safe. `message` is borrowed for the call. May be NULL: then log nothing. */
  void (*log)(void* user_data, int32_t level, const char* message);
} wt_host_api;

/* ------------------------------------------------------------------------------------------------
 * Tensors: a name plus a DLPack DLTensor. strides == NULL means compact row-major. The data is
 * borrowed: see each call for how long it stays valid.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_tensor {
  const char* name;
  DLTensor tensor;
} wt_tensor;

/* What metadata() declares about one parameter: the wire dtype and the full shape. */
typedef struct wt_param_meta {
  const char* name;
  DLDataType dtype;
  int32_t ndim;
  const int64_t* shape; /* ndim entries; ndim == 0 is a scalar */
} wt_param_meta;

/* ------------------------------------------------------------------------------------------------
 * Client (implemented by the host): the four control-plane calls to the inference side, with
 * vLLM's JSON payloads. Each call reaches every inference replica and returns only when all of
 * them are done. On failure it returns a non-OK status and writes the reason into err.
 * update_weights may be called from a thread other than the one that called start.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_client {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  /* init_info_json: the worker init info object, e.g. {"packed":true}. */
  wt_status (*init_weight_transfer_engine)(void* ctx, const char* init_info_json, char* err,
                                           size_t err_cap);
  wt_status (*start_weight_update)(void* ctx, char* err, size_t err_cap);
  /* update_info_json: one update_info object, or a JSON array of per-worker objects. */
  wt_status (*update_weights)(void* ctx, const char* update_info_json, char* err, size_t err_cap);
  /* weight_version may be NULL: no version. */
  wt_status (*finish_weight_update)(void* ctx, const char* weight_version, char* err,
                                    size_t err_cap);
} wt_client;

/* ------------------------------------------------------------------------------------------------
 * Weight source (implemented by the host, trainer side): what to send.
 *   metadata() declares every parameter without moving data; begin()/next()/end() iterate a fresh
 *   pass. The two must agree item for item: same names, order, dtypes and shapes.
 * Only one pass is open at a time. Tensors returned by next() stay valid until end(): an engine
 * calls end() only after the inference side has loaded them.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_weight_source {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  /* *params is owned by the source and valid until the next metadata() call or end(). */
  wt_status (*metadata)(void* ctx, const wt_param_meta** params, size_t* count, char* err,
                        size_t err_cap);
  wt_status (*begin)(void* ctx, char* err, size_t err_cap);
  /* Sets *done = 1 (and leaves *out untouched) when the pass is exhausted. */
  wt_status (*next)(void* ctx, wt_tensor* out, int32_t* done, char* err, size_t err_cap);
  void (*end)(void* ctx);
} wt_weight_source;

/* ------------------------------------------------------------------------------------------------
 * Trainer group (implemented by the host): the trainer ranks that call trainer_init together,
 * e.g. the FSDP ranks colocated with one inference engine. Collectives have a deadline.
 * --------------------------------------------------------------------------------------------- */
typedef void (*wt_bytes_sink)(void* sink_ctx, int32_t rank, const void* data, size_t len);

typedef struct wt_trainer_group {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  int32_t rank; /* this process's rank in the group, 0 .. size-1 */
  int32_t size;
  /* Every rank contributes `len` bytes (lengths may differ); `sink` is called once per rank, in
   * rank order, with that rank's bytes (borrowed for the call), on every rank. */
  wt_status (*all_gather)(void* ctx, const void* data, size_t len, wt_bytes_sink sink,
                          void* sink_ctx, char* err, size_t err_cap);
  wt_status (*barrier)(void* ctx, char* err, size_t err_cap);
} wt_trainer_group;

/* ------------------------------------------------------------------------------------------------
 * Per-round input to send_weights.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_sparse_patch {
  const char* name;
  DLTensor indices;          /* 1-D int32 flat indices into the full tensor */
  DLTensor values;           /* 1-D, same length as indices, the parameter's dtype */
  int32_t full_ndim;         /* -1: not given (an error for every sparse backend) */
  const int64_t* full_shape; /* full_ndim entries */
} wt_sparse_patch;

typedef struct wt_send_args {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* weight_version; /* passed to finish_weight_update; may be NULL */
  /* Delta backends (WT_CAP_SPARSE) only: this round's patches. Dense backends reject them. */
  const wt_sparse_patch* patches;
  size_t num_patches;
} wt_send_args;

/* ------------------------------------------------------------------------------------------------
 * Worker side: the options a worker is created with, and the callback that loads what arrived.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_worker_options {
  uint32_t struct_size;
  uint32_t abi_version;
  DLDevice device; /* where this worker keeps its weights: kDLCPU, or kDLCUDA with its index */
} wt_worker_options;

/* Called by receive with a batch of received tensors. The tensors are valid only during the call:
 * copy them into the model. Return WT_OK, or an error with a reason in err. */
typedef wt_status (*wt_load_fn)(void* load_ctx, const wt_tensor* tensors, size_t count, char* err,
                                size_t err_cap);

/* ------------------------------------------------------------------------------------------------
 * Opaque objects created by the plugin.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_init_info wt_init_info;
typedef struct wt_trainer wt_trainer;
typedef struct wt_worker wt_worker;

/* InitInfo: the trainer-side configuration of one backend (rank, wire parameters, endpoints). */
typedef struct wt_init_info_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  /* Strict parse of a JSON object holding the backend's fields (the "backend" key itself may be
   * present and must then name this backend). Unknown keys and wrong types are errors that name
   * the key. */
  wt_status (*parse_json)(const wt_host_api* host, const char* json, wt_init_info** out, char* err,
                          size_t err_cap);
  /* Writes the canonical JSON (every field, defaults filled in) into buf when it fits, and the
   * needed size including the NUL into *needed; returns WT_ERR_INVALID_ARGUMENT if cap was too
   * small. */
  wt_status (*to_json)(const wt_init_info* info, char* buf, size_t cap, size_t* needed);
  int64_t (*rank)(const wt_init_info* info);
  int32_t (*is_sender)(const wt_init_info* info); /* 1 for the rank that talks to the workers */
  void (*destroy)(wt_init_info* info);
} wt_init_info_vtable;

/* Trainer engine: made once per trainer rank, then send_weights() once per round. */
typedef struct wt_trainer_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  /* Every trainer rank calls create with its own init info. The sender ships the worker init info
   * through client->init_weight_transfer_engine; other ranks make no RPC. source is required by
   * full-resync backends and refused by delta backends; group may be NULL for a one-rank trainer.
   * client, source and group are borrowed for the lifetime of the engine. */
  wt_status (*create)(const wt_host_api* host, const wt_init_info* info, const wt_client* client,
                      const wt_weight_source* source, const wt_trainer_group* group,
                      wt_trainer** out, char* err, size_t err_cap);
  /* One round: start -> update(s) -> finish on the sender. Nothing is in flight on return.
   * args may be NULL (no version, no patches). */
  wt_status (*send_weights)(wt_trainer* engine, const wt_send_args* args);
  wt_status (*abort)(wt_trainer* engine);
  const char* (*last_error)(const wt_trainer* engine);
  void (*destroy)(wt_trainer* engine);
} wt_trainer_vtable;

/* Worker engine: the inference side. init from what the trainer shipped, then per round
 * start -> receive (one or more update_info payloads) -> finish. */
typedef struct wt_worker_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  wt_status (*create)(const wt_host_api* host, const char* init_info_json,
                      const wt_worker_options* options, wt_worker** out, char* err, size_t err_cap);
  wt_status (*start)(wt_worker* engine);
  /* Validates the whole update before calling load at all, so a rejected update loads nothing. */
  wt_status (*receive)(wt_worker* engine, const char* update_info_json, wt_load_fn load,
                       void* load_ctx);
  wt_status (*finish)(wt_worker* engine);
  wt_status (*abort)(wt_worker* engine);
  const char* (*last_error)(const wt_worker* engine);
  void (*destroy)(wt_worker* engine);
} wt_worker_vtable;

/* ------------------------------------------------------------------------------------------------
 * The table wt_plugin_get returns. Static storage in the plugin; valid while it is loaded.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_plugin_api {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* backend;                  /* must equal the <backend> of libwt_<backend>.so */
  const char* plugin_version;           /* the plugin's own semantic version, e.g. "1.2.0" */
  uint64_t capabilities;                /* WT_CAP_* bits */
  const wt_init_info_vtable* init_info; /* mandatory */
  const wt_trainer_vtable* trainer;     /* mandatory with WT_CAP_TRAINER */
  const wt_worker_vtable* worker;       /* mandatory with WT_CAP_WORKER */
} wt_plugin_api;
/* ---- End of ABI version 1. Append new fields and slots below this line only. ---- */

typedef wt_status (*wt_plugin_get_fn)(uint32_t host_abi_version, uint32_t* plugin_abi_version,
                                      const wt_plugin_api** api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WT_PLUGIN_H */
