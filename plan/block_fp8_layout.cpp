#include "block_fp8_layout.hpp"

#include "m2n_plan.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <fmt/format.h>

#include <map>
#include <unordered_set>

namespace wt::m2n {
namespace {

constexpr DLDataType kFp8{kDLFloat8E4m3fnCode, 8, 1};
constexpr DLDataType kScale{kDLFloat, 32, 1};

int64_t blocks_of(int64_t n) {
  return (n + kFp8Block - 1) / kFp8Block;
}

// Whether every TP slice of the weight is whole blocks (or TP leaves the blocked dims whole).
bool slices_whole_blocks(const std::vector<int64_t>& shape, int tp_dim, int tensor_parallel) {
  const auto dims = static_cast<int>(shape.size());
  if (tensor_parallel == 1 || dims < 2 || tp_dim < 0 || tp_dim < dims - 2) return true;
  return (shape[static_cast<std::size_t>(tp_dim)] / tensor_parallel) % kFp8Block == 0;
}

// What the ranks hold of the scales: along a blocked dimension, every block a slice touches.
std::vector<Held> scale_holdings(const std::vector<Held>& held, std::size_t dims) {
  std::vector<Held> out = held;
  for (Held& h : out)
    if (h.dim >= 0 && static_cast<std::size_t>(h.dim) + 2 >= dims) {
      h.lo /= kFp8Block;
      h.hi = blocks_of(h.hi);
    }
  return out;
}

}  // namespace

bool sent_as_block_fp8(const std::string& name, const std::vector<int64_t>& shape, DLDataType dtype,
                       int tp_dim, int tensor_parallel) {
  return sent_as_fp8(name, shape, dtype) && slices_whole_blocks(shape, tp_dim, tensor_parallel);
}

std::string scale_name_of(const std::string& weight) {
  return weight + "_scale_inv";
}

Layout block_fp8_layout(const Layout& layout, const std::string& what, Fp8Selection* selection) {
  Fp8Selection local;
  Fp8Selection& sel = selection != nullptr ? *selection : local;
  Layout out;
  out.trainer_ranks = layout.trainer_ranks;
  out.inference = layout.inference;
  out.engine = layout.engine;
  std::unordered_set<std::string_view> names;
  for (const ParamGroup& g : layout.groups) names.insert(g.names.begin(), g.names.end());
  std::map<std::pair<const std::vector<Held>*, std::size_t>,
           std::shared_ptr<const std::vector<Held>>>
      scales_held;  // shared as the weights' holdings are
  std::vector<std::string> scale_names;
  for (const ParamGroup& g : layout.groups) {
    const bool whole = slices_whole_blocks(g.shape, g.tp_dim, layout.inference.tensor_parallel);
    ParamGroup kept = g, fp8 = g, scales = g;
    kept.names.clear();
    fp8.names.clear();
    scales.names.clear();
    fp8.dtype = kFp8;
    scales.dtype = kScale;
    for (std::size_t d = g.shape.size() >= 2 ? g.shape.size() - 2 : 0; d < g.shape.size(); ++d)
      scales.shape[d] = blocks_of(g.shape[d]);
    for (const std::string& name : g.names) {
      if (!sent_as_fp8(name, g.shape, g.dtype)) {
        kept.names.push_back(name);
      } else if (!whole) {
        kept.names.push_back(name);
        if (sel.kept_tp++ == 0) sel.first_kept_tp = name;
      } else {
        fp8.names.push_back(name);
        sel.names.insert(name);
        std::string scale = scale_name_of(name);
        if (names.count(scale))
          sdk::fail(WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: parameter '{}' is sent as block FP8, and its scales would be "
                    "'{}', which is a parameter already",
                    what, name, scale);
        scales.names.push_back(std::move(scale));
        ++sel.weights;
      }
    }
    if (!kept.names.empty()) out.groups.push_back(std::move(kept));
    if (fp8.names.empty()) continue;
    auto& held = scales_held[{g.holdings.get(), g.shape.size()}];
    if (!held)
      held = std::make_shared<const std::vector<Held>>(scale_holdings(*g.holdings, g.shape.size()));
    scales.holdings = held;
    out.groups.push_back(std::move(fp8));
    out.groups.push_back(std::move(scales));
  }
  return out;
}

}  // namespace wt::m2n
