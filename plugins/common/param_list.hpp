// The parameter list every dense update_info carries (vLLM's names): names, dtype_names (torch
// dtype names without "torch."), shapes. Shared by the ipc and nccl backends (header-only).
#pragma once

#include <wt/dtype.hpp>
#include <wt/sdk/json_fields.hpp>
#include <wt/tensor.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace wt::plugins {

inline nlohmann::json describe_params(const std::vector<ParamMeta>& params) {
  auto names = nlohmann::json::array(), dtypes = nlohmann::json::array(),
       shapes = nlohmann::json::array();
  names.get_ref<nlohmann::json::array_t&>().reserve(params.size());
  dtypes.get_ref<nlohmann::json::array_t&>().reserve(params.size());
  shapes.get_ref<nlohmann::json::array_t&>().reserve(params.size());
  for (const auto& p : params) {
    names.push_back(p.name);
    dtypes.push_back(std::string(torch_name(p.dtype)));
    shapes.push_back(p.shape);
  }
  nlohmann::json out = nlohmann::json::object();
  out["names"] = std::move(names);
  out["dtype_names"] = std::move(dtypes);
  out["shapes"] = std::move(shapes);
  return out;
}

// describe_params() as JSON text, written again only when the parameters change: a full resync
// of one model sends the same text every round (for 2,000 tensors, about a millisecond to write).
class DescribedParams {
 public:
  const std::string& text_for(const std::vector<ParamMeta>& params) {
    auto same = [](const ParamMeta& a, const ParamMeta& b) {
      return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
    };
    if (!written_ ||
        !std::equal(params.begin(), params.end(), params_.begin(), params_.end(), same)) {
      written_ = false;
      text_ = describe_params(params).dump();
      params_ = params;
      written_ = true;
    }
    return text_;
  }

 private:
  bool written_ = false;
  std::vector<ParamMeta> params_;
  std::string text_;
};

struct ParamList {
  std::vector<ParamMeta> params;
  std::vector<uint64_t> nbytes;  // per param, from dtype and shape
};

// Reads and checks names, dtype_names and shapes: equal lengths, no empty or repeated name, known
// dtypes, shapes whose byte counts fit 64 bits. Errors name the field and index.
inline ParamList read_param_list(sdk::FieldReader& r) {
  const std::string& what = r.what();
  auto names = r.get_string_list("names");
  auto dtype_names = r.get_string_list("dtype_names");
  auto shapes = r.get_int_list_list("shapes");
  if (dtype_names.size() != names.size())
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "invalid {}: 'dtype_names' has {} entries but 'names' has {}", what,
              dtype_names.size(), names.size());
  if (shapes.size() != names.size())
    sdk::fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'shapes' has {} entries but 'names' has {}",
              what, shapes.size(), names.size());
  {
    std::unordered_set<std::string_view> seen(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i].empty())
        sdk::fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'names[{}]' is empty", what, i);
      if (!seen.insert(names[i]).second)
        sdk::fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: 'names' lists '{}' twice", what, names[i]);
    }
  }
  ParamList out;
  out.params.reserve(names.size());
  out.nbytes.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto dt = dtype_from_torch_name(dtype_names[i]);
    if (!dt)
      sdk::fail(WT_ERR_INVALID_ARGUMENT,
                "invalid {}: 'dtype_names[{}]' is '{}', not a dtype wt knows", what, i,
                dtype_names[i]);
    uint64_t nbytes = 0;
    if (!checked_nbytes(shapes[i].data(), static_cast<int32_t>(shapes[i].size()), *dt, &nbytes))
      sdk::fail(WT_ERR_INVALID_ARGUMENT,
                "invalid {}: 'shapes[{}]' {} of {} has a negative dimension or more bytes than 64 "
                "bits can count",
                what, i, nlohmann::json(shapes[i]).dump(), dtype_names[i]);
    out.params.push_back({std::move(names[i]), *dt, std::move(shapes[i])});
    out.nbytes.push_back(nbytes);
  }
  return out;
}

}  // namespace wt::plugins
