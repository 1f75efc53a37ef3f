// Stand-in for <gloo/common/memory.h>, which Debian's libgloo-dev (0.0~git20220518) does not ship
// although its own <gloo/transport/tcp/{pair,context}.h> include it. Used only where the header
// is missing (plugins/common/CMakeLists.txt checks), and only by proving_device.cpp, which
// derives from Gloo's TCP pair and never touches these members.
//
// It declares the two types those headers name, with the layout libgloo was compiled with (a
// WeakNonOwningPtr is one std::weak_ptr), so that the derived pair's base has the size and member
// offsets of libgloo's; it defines no behaviour, so none can differ from libgloo's.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr;  // named by reference only

template <typename T>
class WeakNonOwningPtr final {
  std::weak_ptr<T> ptr_;
};

}  // namespace gloo
