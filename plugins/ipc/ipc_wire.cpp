#include "ipc_wire.hpp"

#include "../common/param_list.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/json_fields.hpp>

#include <fmt/ranges.h>

#include <set>

namespace wt::ipc {

using sdk::fail;

nlohmann::json Handle::to_json() const {
  if (kind == "shm") return {{"kind", kind}, {"name", name}, {"size", size}, {"offset", offset}};
  return {{"kind", kind}, {"handle", cuda_handle}, {"size", size}, {"offset", offset}};
}

nlohmann::json describe(const std::vector<ParamMeta>& params) {
  return plugins::describe_params(params);
}

UpdateInfo parse_update_info(const nlohmann::json& j, bool packed) {
  const std::string what = "update_info for backend 'ipc'";
  // How a client ends a round on a server without an end_weight_update route (the key a
  // wt 0.1.0 trainer sends, and the one a current client sends): refused, which ends the session.
  for (const char* key : {"wt_end_weight_update", "wt_abort_round"})
    if (j.is_object() && j.contains(key))
      fail(WT_ERR_ABORTED, "the trainer abandoned this round: {}",
           j[key].is_string() ? j[key].get<std::string>() : j[key].dump());
  sdk::FieldReader r(j, what);
  if (r.has("ipc_handles_pickled") && !r.raw("ipc_handles_pickled").is_null())
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: field 'ipc_handles_pickled' is refused: wt never unpickles; send JSON "
         "'ipc_handles'",
         what);
  r.allow("ipc_handles_pickled");
  UpdateInfo u;
  u.packed = packed;
  auto list = plugins::read_param_list(r);
  u.params = std::move(list.params);
  u.nbytes = std::move(list.nbytes);
  if (!r.has("ipc_handles") || r.raw("ipc_handles").is_null())
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: missing field 'ipc_handles'", what);
  const auto& handles = r.raw("ipc_handles");
  if (packed) {
    if (!handles.is_object())
      fail(WT_ERR_INVALID_ARGUMENT,
           "invalid {}: field 'ipc_handles' must be one object (the buffer's handles) because the "
           "trainer initialised packed=true, got {}",
           what, sdk::json_type_name(handles));
    if (!r.has("tensor_sizes") || r.raw("tensor_sizes").is_null())
      fail(WT_ERR_INVALID_ARGUMENT,
           "invalid {}: missing field 'tensor_sizes' (required when packed)", what);
    auto sizes = r.get_int_list("tensor_sizes");
    if (sizes.size() != u.params.size())
      fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'tensor_sizes' has {} entries but 'names' has {}",
           what, sizes.size(), u.params.size());
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] < 0 || static_cast<uint64_t>(sizes[i]) != u.nbytes[i])
        fail(WT_ERR_INVALID_ARGUMENT,
             "invalid {}: 'tensor_sizes[{}]' is {} bytes, but '{}' is {} {} = {} bytes", what, i,
             sizes[i], u.params[i].name, torch_name(u.params[i].dtype),
             nlohmann::json(u.params[i].shape).dump(), u.nbytes[i]);
    u.handle_maps.push_back(handles);
  } else {
    if (r.has("tensor_sizes") && !r.raw("tensor_sizes").is_null())
      fail(WT_ERR_INVALID_ARGUMENT,
           "invalid {}: field 'tensor_sizes' is only for packed updates, and the trainer "
           "initialised packed=false",
           what);
    r.allow("tensor_sizes");
    if (!handles.is_array())
      fail(WT_ERR_INVALID_ARGUMENT,
           "invalid {}: field 'ipc_handles' must be a list with one object per tensor because the "
           "trainer initialised packed=false, got {}",
           what, sdk::json_type_name(handles));
    if (handles.size() != u.params.size())
      fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'ipc_handles' has {} entries but 'names' has {}",
           what, handles.size(), u.params.size());
    for (std::size_t i = 0; i < handles.size(); ++i) {
      if (!handles[i].is_object())
        fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'ipc_handles[{}]' must be an object, got {}",
             what, i, sdk::json_type_name(handles[i]));
      u.handle_maps.push_back(handles[i]);
    }
  }
  r.finish();
  return u;
}

Handle select_handle(const nlohmann::json& map, const std::string& key, const std::string& what) {
  auto it = map.find(key);
  if (it == map.end()) {
    std::vector<std::string> keys;
    for (auto k = map.begin(); k != map.end(); ++k) keys.push_back(k.key());
    fail(WT_ERR_NOT_FOUND, "IPC handle not found for {} in {}. Available: [{}]", key, what,
         fmt::join(keys, ", "));
  }
  sdk::FieldReader r(*it, what + " handle '" + key + "'");
  Handle h;
  h.kind = r.get_string("kind");
  int64_t size = r.get_int("size"), offset = r.get_int("offset");
  if (size < 0 || offset < 0)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'size' and 'offset' must be >= 0", r.what());
  h.size = static_cast<uint64_t>(size);
  h.offset = static_cast<uint64_t>(offset);
  if (h.kind == "shm") {
    h.name = r.get_string("name");
  } else if (h.kind == "cuda") {
    h.cuda_handle = r.get_string("handle");
  } else {
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: field 'kind' is '{}', expected 'shm' or 'cuda'",
         r.what(), h.kind);
  }
  r.finish();
  return h;
}

}  // namespace wt::ipc
