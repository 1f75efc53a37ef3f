// The ipc backend's wire format: the worker init info and the per-round update_info, both JSON.
//
// init_info (shipped by the sender through init_weight_transfer_engine):
//   {"packed": <bool>}, plus "packed_alignment": <A> when packed and A != 1
//
// update_info, unpacked (one update per round, one handle per tensor):
//   {"names": [...], "dtype_names": ["bfloat16", ...], "shapes": [[4096, 4096], ...],
//    "ipc_handles": [{"<key>": <handle>, ...}, ...]}
// update_info, packed (one update per buffer; each tensor at the next multiple of A, the first at
// offset 0; A = 1, vLLM's layout, when the init info has no packed_alignment):
//   {"names": [...], "dtype_names": [...], "shapes": [...], "tensor_sizes": [<bytes>, ...],
//    "ipc_handles": {"<key>": <handle>, ...}}
// Keys say where a worker may map the memory from: "cpu" for host memory, the GPU UUID
// ("GPU-xxxxxxxx-...") for CUDA memory, so each worker takes its own GPU's handle. Handles:
//   {"kind": "shm",  "name": "/wt-...", "size": <segment bytes>, "offset": <bytes>}
//   {"kind": "cuda", "handle": "<base64 of cudaIpcMemHandle_t>", "size": <allocation bytes>,
//    "offset": <bytes>}
// Never pickle: vLLM's ipc_handles_pickled is refused.
#pragma once

#include <wt/sdk/base64.hpp>

#include <wt/tensor.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wt::ipc {

inline constexpr const char* kHostKey = "cpu";

struct Handle {
  std::string kind;         // "shm" | "cuda"
  std::string name;         // shm segment name
  std::string cuda_handle;  // base64
  uint64_t size = 0;
  uint64_t offset = 0;
  nlohmann::json to_json() const;
};

struct UpdateInfo {
  std::vector<ParamMeta> params;
  std::vector<uint64_t> nbytes;  // per param, from dtype and shape
  bool packed = false;
  // packed: one handle map; unpacked: one per param. Each maps key -> handle JSON.
  std::vector<nlohmann::json> handle_maps;
};

// Strict parse; every error names the field. `packed` is what the trainer said at init.
UpdateInfo parse_update_info(const nlohmann::json& j, bool packed);

// The handle for `key` in one handle map; WT_ERR_NOT_FOUND lists the keys present.
Handle select_handle(const nlohmann::json& handle_map, const std::string& key,
                     const std::string& what);

// The fields every update carries, built from metadata.
nlohmann::json describe(const std::vector<ParamMeta>& params);

// Base64 (RFC 4648, standard alphabet) for CUDA handles.
using sdk::base64_decode;
using sdk::base64_encode;

}  // namespace wt::ipc
