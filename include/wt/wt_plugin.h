/*
 * wt_plugin.h — the stable C ABI between libwt (the host) and a weight-transfer backend plugin.
 * This is ABI version 2. Version 1 (wt 0.1.0) is described in <wt/wt_plugin_v1.h>; plugins built
 * against it keep loading, through an adapter inside the host.
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
 * with RTLD_NOW | RTLD_LOCAL, and never unloads it. Everything else the plugin offers is reached
 * through the table it returns. Deploying a plugin is copying that one file into a directory on
 * the plugin search path (WT_PLUGIN_PATH, a config's plugin_dirs, or <libdir>/wt/plugins).
 * `wt conformance libwt_<backend>.so` checks a plugin against everything this header says, and
 * plugin-authoring.md (installed with the docs, <prefix>/share/doc/wt) walks through writing one;
 * <prefix>/share/doc/wt/examples/file_backend is a complete one.
 *
 * ------------------------------------------------------------------------------------------------
 * Version negotiation (both ways)
 * ------------------------------------------------------------------------------------------------
 * The host passes the newest ABI version it speaks (WT_ABI_VERSION of its headers). The plugin
 *   - always writes the ABI version it will speak to *plugin_abi_version: the newest one it
 *     implements that is <= host_abi_version, or its oldest one if even that is newer;
 *   - returns WT_OK and sets *api when it can speak a version <= host_abi_version, otherwise
 *     returns WT_ERR_INCOMPATIBLE and leaves *api untouched.
 * The table it returns is the one of the version it wrote (a version-1 plugin returns the table of
 * <wt/wt_plugin_v1.h>). The host rejects a version below WT_ABI_MIN_SUPPORTED or above its own,
 * naming both. A host turns every accepted version into its current one, so a plugin never needs
 * to serve more than one version — but it may (the C++ SDK can serve versions 1 and 2).
 *
 * ------------------------------------------------------------------------------------------------
 * Rules every struct and call follows
 * ------------------------------------------------------------------------------------------------
 * 1. Every struct that crosses the boundary starts with  uint32_t struct_size; uint32_t
 *    abi_version;  set by whoever fills it (sizeof of its own build, WT_ABI_VERSION of its own
 *    headers). A reader looks only at fields that lie inside struct_size and calls a function slot
 *    only if it lies inside struct_size AND is non-NULL. Structs only ever grow at the end; the
 *    layout of every shipped version is frozen by tests (tests/abi_layout_test.cpp).
 * 2. Arrays of structs (wt_tensor, wt_param_meta, wt_sparse_patch) are stepped by the struct_size
 *    of their elements, never by the reader's own sizeof: every element of one array has the same
 *    struct_size, and WT_ELEMENT() below does the stepping. A struct filled through an
 *    out-parameter is sized by the caller: the caller sets out->struct_size to the size of the
 *    struct it allocated, and the callee writes no byte beyond it (and leaves struct_size as the
 *    number of bytes it filled).
 * 3. No C++ types and no exceptions cross this boundary. Every fallible call returns a wt_status.
 *    The human-readable detail is either a message owned by the object (xxx_last_error, valid
 *    until the next call on that object other than abort) or, for calls that create an object,
 *    written into a caller-provided buffer (char* err, size_t err_cap; always NUL-terminated,
 *    truncated to fit).
 * 4. Whoever creates an object destroys it. destroy(NULL) is a no-op. On failure, out-parameters
 *    are left untouched.
 * 5. Memory the caller passes in (strings, arrays, tensors) is borrowed for the duration of the
 *    call unless a comment says otherwise. Copy what you keep.
 * 6. Plugins keep no global mutable state: all state hangs off the objects they create, and
 *    services such as logging come from the wt_host_api passed to every create call.
 * 7. Every blocking wait has a deadline, and the abort slots are safe to call from another thread
 *    while a call on the same engine is blocked; that call then returns WT_ERR_ABORTED. abort
 *    never changes what last_error returns.
 * 8. Strings are UTF-8 and NUL-terminated. JSON payloads are UTF-8 JSON text.
 * 9. The host enforces the capability bits before it calls a plugin: it never hands patches to a
 *    dense backend, a source to a delta backend, a CUDA worker or CUDA tensor to a backend without
 *    WT_CAP_CUDA_MEMORY, nor host memory to one without WT_CAP_HOST_MEMORY.
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
#define WT_ABI_VERSION 2u
#define WT_ABI_MIN_SUPPORTED 1u

/* The only symbol a plugin exports. */
#define WT_PLUGIN_ENTRY_SYMBOL "wt_plugin_get"

#if defined(__GNUC__)
#define WT_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define WT_PLUGIN_EXPORT
#endif

/* Element i of an array of growable structs (rule 2): steps by the elements' own struct_size. */
#define WT_ELEMENT(type, array, i) \
  ((const type*)((const char*)(array) + (size_t)(i) * (size_t)(array)->struct_size))

/* ------------------------------------------------------------------------------------------------
 * Status codes. Values are stable forever; a host treats an unknown value like WT_ERR_INTERNAL.
 * --------------------------------------------------------------------------------------------- */
typedef int32_t wt_status;

#define WT_OK 0
#define WT_ERR_INVALID_ARGUMENT \
  1                           /* bad input: a field, a payload, a tensor; the message names it */
#define WT_ERR_INCOMPATIBLE 2 /* ABI version, capability or wire-format mismatch */
#define WT_ERR_UNSUPPORTED 3  /* not built in, or not possible here (CUDA without a GPU) */
#define WT_ERR_STATE 4        /* called out of order (e.g. receive before start) */
#define WT_ERR_SYSTEM 5       /* an operating-system call failed (shared memory, sockets) */
#define WT_ERR_DEVICE 6       /* a CUDA or NCCL call failed */
#define WT_ERR_TIMEOUT 7      /* a deadline passed */
#define WT_ERR_ABORTED 8      /* abort() was called */
#define WT_ERR_REMOTE 9       /* the other side (a client RPC, a peer) reported a failure */
#define WT_ERR_NOT_FOUND 10   /* a named thing (backend, tensor, handle) does not exist */
#define WT_ERR_INTERNAL 11    /* a bug, or an unexpected exception inside the plugin */
#define WT_ERR_BUFFER_TOO_SMALL                                    \
  12 /* since ABI 2: a caller's buffer cannot hold the answer; the \
        size needed was written where the call says */

/* ------------------------------------------------------------------------------------------------
 * Capability bits a plugin declares in wt_plugin_api.capabilities. The host enforces them (rule 9).
 * --------------------------------------------------------------------------------------------- */
#define WT_CAP_TRAINER (1ull << 0)     /* implements the trainer engine vtable */
#define WT_CAP_WORKER (1ull << 1)      /* implements the worker engine vtable */
#define WT_CAP_HOST_MEMORY (1ull << 2) /* moves tensors in host memory (kDLCPU, kDLCUDAHost) */
#define WT_CAP_CUDA_MEMORY (1ull << 3) /* moves tensors in CUDA memory (kDLCUDA) */
#define WT_CAP_SPARSE (1ull << 4)      /* delta backend: send_weights takes patches, no source */
#define WT_CAP_PACKED (1ull << 5)      /* supports packed (bucketed) transfer */
/* since wt 0.3 (ABI 2): the trainer honours WT_SOURCE_RELEASES_EACH_TENSOR (below): it has read
 * (or copied, any asynchronous copy completed) each tensor from next() before it calls next()
 * again or end(). A host gives such a source only to a plugin declaring this bit. */
#define WT_CAP_STREAMING_SOURCE (1ull << 6)
/* since wt 0.3 (ABI 2): the trainer takes sources whose ranks each hold a slice of a parameter
 * (wt_param_meta.sharded, below) and moves each rank's share itself (m2n). A host refuses a
 * sharded source to a plugin without this bit, naming the parameter. */
#define WT_CAP_SHARDED_SOURCE (1ull << 7)

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
 * object created with it. (Unchanged since ABI 1.)
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
 * borrowed: see each call for how long it stays valid. Growable (rule 2) since ABI 2.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_tensor {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;
  DLTensor tensor;
} wt_tensor;

/* What metadata() declares about one parameter, and what a destination query asks for: the
 * dtype and the full shape. Growable (rule 2) since ABI 2. */
typedef struct wt_param_meta {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;
  DLDataType dtype;
  int32_t ndim;
  const int64_t* shape; /* ndim entries; ndim == 0 is a scalar */
  /* ---- since wt 0.3 (ABI 2; read them only when struct_size covers shard_length) ----
   * What this trainer rank holds of the parameter, in a source's metadata. A zero-filled tail
   * (or one struct_size leaves out) means the whole tensor. sharded == 1: this rank holds the
   * slice [shard_offset, shard_offset + shard_length) along dimension shard_dim, as FSDP or TP
   * ranks do; `shape` stays the FULL shape, and next() yields the slice (shape with
   * shape[shard_dim] = shard_length; shard_length 0: the rank holds none of it). A host hands a
   * source with a sharded parameter only to a plugin declaring WT_CAP_SHARDED_SOURCE, and checks
   * dim, offset and length against the shape first. Destination queries leave the tail zero. */
  int32_t sharded;
  int32_t shard_dim;
  int64_t shard_offset;
  int64_t shard_length;
} wt_param_meta;

/* One delta patch: values to write at flat indices of a full parameter. Growable since ABI 2. */
typedef struct wt_sparse_patch {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;
  DLTensor indices;          /* 1-D int32 flat (row-major) indices into the full tensor */
  DLTensor values;           /* 1-D, as many elements as indices, the parameter's dtype */
  int32_t full_ndim;         /* -1: not given (every sparse backend refuses that) */
  const int64_t* full_shape; /* full_ndim entries */
} wt_sparse_patch;

/* ------------------------------------------------------------------------------------------------
 * Client (implemented by the host): the control-plane calls to the inference side, with vLLM's
 * JSON payloads. Each call reaches every inference replica and returns only when all of them are
 * done. On failure it returns a non-OK status and writes the reason into err. Every slot may be
 * called from any thread, and a call blocked when the engine is aborted returns WT_ERR_ABORTED.
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
  /* ---- ABI 2 ---- */
  /* Ends the current update after a trainer-side failure: the inference side drops what the round
   * delivered, keeps the weights it had, and its session ends, so the next start is accepted.
   * `reason` (may be NULL) is logged there. Ending when no update is active is not an error. */
  wt_status (*end_weight_update)(void* ctx, const char* reason, char* err, size_t err_cap);
  /* ---- ABI 2, appended in wt 0.3: absent when struct_size ends before it (an older host) ---- */
  /* Makes every call in progress on this client return at once (WT_ERR_ABORTED), from any thread;
   * calls made afterwards are not affected. For an engine that gives up while a call it started is
   * still blocked on the inference side: a trainer_init whose rendezvous failed while its init
   * call waits on a receiver that stopped answering need not wait out that call's own deadline
   * before it returns its error. Never fails. */
  void (*abandon_calls)(void* ctx);
} wt_client;

/* ------------------------------------------------------------------------------------------------
 * Weight source (implemented by the host, trainer side): what to send.
 *   metadata() declares every parameter without moving data; begin()/next()/end() iterate a fresh
 *   pass. The two must agree item for item: same names, order, dtypes and shapes. The host checks
 *   it: an item that disagrees, or a pass that ends early or runs long, makes next() fail with
 *   WT_ERR_INVALID_ARGUMENT naming the item, so an engine never delivers an unannounced model.
 * Only one pass is open at a time. Tensors returned by next() stay valid until end(): an engine
 * calls end() only after the inference side has loaded them -- unless `flags` (when struct_size
 * covers it) holds WT_SOURCE_RELEASES_EACH_TENSOR: then a tensor is valid only until the next
 * call to next() or end(), as a source that gathers one full tensor at a time needs (an FSDP
 * model's full_tensor() per parameter). Hosts set it only for plugins declaring
 * WT_CAP_STREAMING_SOURCE.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_weight_source {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  /* *params is an array of growable elements (step with WT_ELEMENT), owned by the source and
   * valid until the next metadata() call or end(). */
  wt_status (*metadata)(void* ctx, const wt_param_meta** params, size_t* count, char* err,
                        size_t err_cap);
  wt_status (*begin)(void* ctx, char* err, size_t err_cap);
  /* The caller sets out->struct_size first (rule 2). Sets *done = 1 (and leaves *out untouched)
   * when the pass is exhausted. */
  wt_status (*next)(void* ctx, wt_tensor* out, int32_t* done, char* err, size_t err_cap);
  void (*end)(void* ctx);
  /* ---- since wt 0.3 (read it only when struct_size covers it) ---- */
  uint64_t flags; /* WT_SOURCE_* bits */
} wt_weight_source;

/* wt_weight_source.flags */
#define WT_SOURCE_RELEASES_EACH_TENSOR (1ull << 0) /* next()'s tensor is valid until the next call */

/* ------------------------------------------------------------------------------------------------
 * Trainer group (implemented by the host): the trainer ranks that call trainer_init together,
 * e.g. the FSDP ranks colocated with one inference engine. Collectives have a deadline.
 * (Unchanged since ABI 1.)
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
 * Trainer side: what create and each round get.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_init_info wt_init_info;
typedef struct wt_trainer wt_trainer;
typedef struct wt_worker wt_worker;

typedef struct wt_trainer_create_args {
  uint32_t struct_size;
  uint32_t abi_version;
  const wt_host_api* host;
  const wt_init_info* info;       /* made by this plugin's init_info.parse_json */
  const wt_client* client;        /* always given */
  const wt_weight_source* source; /* full-resync backends: always given; delta backends: NULL */
  const wt_trainer_group* group;  /* NULL for a one-rank trainer */
} wt_trainer_create_args;

typedef struct wt_send_args {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* weight_version; /* passed to finish_weight_update; may be NULL */
  /* Delta backends (WT_CAP_SPARSE) only: this round's patches (growable elements). */
  const wt_sparse_patch* patches;
  size_t num_patches;
  /* ---- ABI 2 ---- */
  /* The cudaStream_t that produced this round's CUDA tensors (NULL: the legacy default stream).
   * The backend orders its reads after the work queued there instead of synchronising the whole
   * device. */
  void* stream;
} wt_send_args;

/* ------------------------------------------------------------------------------------------------
 * Worker side: create arguments, and the loader that takes what arrived.
 * --------------------------------------------------------------------------------------------- */
typedef struct wt_worker_create_args {
  uint32_t struct_size;
  uint32_t abi_version;
  const wt_host_api* host;
  const char* init_info_json; /* what the trainer shipped through init_weight_transfer_engine */
  DLDevice device;            /* where this worker keeps its weights: kDLCPU, or kDLCUDA + index */
  void* stream;               /* the cudaStream_t the model uses (NULL: legacy default stream) */
  /* Receiver-side backend options as a JSON object ("{}" or NULL: none), e.g. the backend keys of
   * `wt serve --weight-transfer-config`. Parsed as strictly as the init info. */
  const char* backend_options_json;
  /* ---- since wt 0.3 (ABI 2; read them only when struct_size covers held_count) ----
   * The model this worker holds, when the host knows it (a base checkpoint it loaded, the weights
   * it serves): held_count growable elements (step with WT_ELEMENT), each a parameter's name,
   * dtype and shape as this worker keeps it (its shard tail zero). NULL / 0: not known yet (a
   * receiver that has no model before its first round). A backend whose init info fixes what
   * will arrive (m2n's static plan) checks it here and refuses init, naming the first
   * disagreement, instead of failing the first round. Valid only during create. */
  const wt_param_meta* held;
  size_t held_count;
} wt_worker_create_args;

/* The loader: how received weights reach the model. The host implements it; receive() gets one
 * per call. Slots are called from the thread running receive, or from threads receive waits for
 * before it returns, never two at once. Validate the whole update before loading anything: a
 * rejected update must change nothing.
 *
 * Two ways to deliver a tensor:
 *   - load(): hand over a batch of tensors in the backend's own memory; the host copies them.
 *   - destination() then written(): ask for the receiver's own memory for one parameter, write
 *     the bytes straight into it (a broadcast, a copy out of shared memory), then say so. The
 *     memory is compact row-major, exactly the parameter's size, and valid until receive returns.
 *     A destination that is never marked written is dropped. A host that has no destination for a
 *     name answers *found = 0: use load() for it. The reference receiver answers with a staging
 *     area, so a failed round still changes none of the weights the model serves.
 * Delta backends deliver patches with load_patches(); the host validates and applies them. */
typedef struct wt_loader {
  uint32_t struct_size;
  uint32_t abi_version;
  void* ctx;
  /* A batch of tensors, valid only during the call (growable elements). */
  wt_status (*load)(void* ctx, const wt_tensor* tensors, size_t count, char* err, size_t err_cap);
  /* A batch of patches, valid only during the call (growable elements). The host refuses the
   * whole batch (out-of-range or duplicate index, wrong dtype or full_shape) before applying any.
   */
  wt_status (*load_patches)(void* ctx, const wt_sparse_patch* patches, size_t count, char* err,
                            size_t err_cap);
  /* Memory to write `param` into. On WT_OK with *found = 1, *out describes it (data, device,
   * ndim/shape/dtype equal to param's, strides NULL); with *found = 0, *out is untouched.
   * A host that hands out destinations asked one after another back to back lets a backend that
   * moves several tensors as one block (nccl's packed chunks) receive it straight into place. */
  wt_status (*destination)(void* ctx, const wt_param_meta* param, DLTensor* out, int32_t* found,
                           char* err, size_t err_cap);
  /* The destination handed out for `name` now holds its bytes. */
  wt_status (*written)(void* ctx, const char* name, char* err, size_t err_cap);
} wt_loader;

/* ------------------------------------------------------------------------------------------------
 * Vtables of the objects a plugin creates.
 * --------------------------------------------------------------------------------------------- */

/* InitInfo: the trainer-side configuration of one backend (rank, wire parameters, endpoints). */
typedef struct wt_init_info_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  /* Strict parse of a JSON object holding the backend's fields (the "backend" key itself may be
   * present and must then name this backend). Unknown keys and wrong types are errors. When the
   * error is about one field, its name (the top-level key) is written into `field` (NUL-terminated,
   * truncated to field_cap), so a host can point at the line of a config file; otherwise field
   * is set to "". `field` may be NULL. */
  wt_status (*parse_json)(const wt_host_api* host, const char* json, wt_init_info** out, char* err,
                          size_t err_cap, char* field, size_t field_cap);
  /* Writes the canonical JSON (every field, defaults filled in) into buf when it fits, and the
   * needed size including the NUL into *needed; returns WT_ERR_BUFFER_TOO_SMALL if cap was too
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
  /* Every trainer rank calls create. The sender ships the worker init info through
   * client->init_weight_transfer_engine; other ranks make no RPC. Everything args points at is
   * borrowed for the lifetime of the engine (args itself only for the call). */
  wt_status (*create)(const wt_trainer_create_args* args, wt_trainer** out, char* err,
                      size_t err_cap);
  /* One round: start -> update(s) -> finish on the sender. Nothing is in flight on return. After a
   * failure that began on this side, end the inference side's update with
   * client->end_weight_update. args may be NULL (no version, no patches, default stream). */
  wt_status (*send_weights)(wt_trainer* engine, const wt_send_args* args);
  wt_status (*abort)(wt_trainer* engine);
  const char* (*last_error)(const wt_trainer* engine);
  void (*destroy)(wt_trainer* engine);
} wt_trainer_vtable;

/* Worker engine: the inference side. create from what the trainer shipped, then per round
 * start -> receive (one or more update_info payloads) -> finish. */
typedef struct wt_worker_vtable {
  uint32_t struct_size;
  uint32_t abi_version;
  wt_status (*create)(const wt_worker_create_args* args, wt_worker** out, char* err,
                      size_t err_cap);
  wt_status (*start)(wt_worker* engine);
  /* Validates the whole update before loading anything, so a rejected update loads nothing. */
  wt_status (*receive)(wt_worker* engine, const char* update_info_json, const wt_loader* loader);
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
  const char* plugin_version;           /* the plugin's own version, e.g. "1.2.0" */
  uint64_t capabilities;                /* WT_CAP_* bits */
  const wt_init_info_vtable* init_info; /* mandatory */
  const wt_trainer_vtable* trainer;     /* mandatory with WT_CAP_TRAINER */
  const wt_worker_vtable* worker;       /* mandatory with WT_CAP_WORKER */
  /* A later ABI appends fields here, never above. */
} wt_plugin_api;

typedef wt_status (*wt_plugin_get_fn)(uint32_t host_abi_version, uint32_t* plugin_abi_version,
                                      const wt_plugin_api** api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WT_PLUGIN_H */
