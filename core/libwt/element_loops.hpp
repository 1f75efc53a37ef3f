// Loops over elements of a runtime size (gathers, scatters) are one move per element when the
// size is a compile-time constant, and a call to memcpy per element when it is not: the common
// sizes are dispatched to instantiations with the size fixed.
#pragma once

#include <cstddef>

namespace wt::detail {

// Calls f.template operator()<N>() with N == size for 1, 2, 4, 8 and 16 bytes and returns true;
// returns false for other sizes (elements of several lanes), which the caller loops over itself.
template <typename F>
bool with_fixed_size(std::size_t size, F&& f) {
  switch (size) {
    case 1:
      f.template operator()<1>();
      return true;
    case 2:
      f.template operator()<2>();
      return true;
    case 4:
      f.template operator()<4>();
      return true;
    case 8:
      f.template operator()<8>();
      return true;
    case 16:
      f.template operator()<16>();
      return true;
  }
  return false;
}

}  // namespace wt::detail
