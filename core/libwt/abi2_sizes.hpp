// The sizes of ABI 2's growable element structs, pinned: the smallest struct_size the host
// accepts for an element a plugin of ABI 2 or later hands it (a loaded tensor, a patch, a
// destination query). They are where ABI 2's last field ends, not sizeof() of today's header:
// when ABI 3 appends fields, sizeof grows but an ABI-2 plugin still hands these sizes, and must
// still be accepted (rule 10). abi_layout_test freezes the numbers.
#pragma once

#include <wt/wt_plugin.h>

#include <cstddef>

namespace wt::abi2 {

inline constexpr std::size_t kTensorSize = offsetof(wt_tensor, tensor) + sizeof(DLTensor);
inline constexpr std::size_t kParamMetaSize =
    offsetof(wt_param_meta, shape) + sizeof(const int64_t*);
inline constexpr std::size_t kSparsePatchSize =
    offsetof(wt_sparse_patch, full_shape) + sizeof(const int64_t*);

static_assert(kTensorSize == 64 && kParamMetaSize == 32 && kSparsePatchSize == 128,
              "ABI 2's element sizes are frozen (LP64)");

}  // namespace wt::abi2
