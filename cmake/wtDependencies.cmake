# Every third-party dependency comes from a Debian package (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(Boost 1.74 REQUIRED)                    # Boost.DLL (header-only)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(dlpack REQUIRED)
find_package(Gloo REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

set(WT_HAVE_CUDA OFF)
if(WT_WITH_CUDA)
  # Headers only (cuda.h, cudaTypedefs.h): the driver is reached at run time, at driver API 12.0
  # (docs/cuda.md). Without the toolkit only host-memory paths are built.
  find_package(CUDAToolkit 12.0 QUIET)
  if(CUDAToolkit_FOUND)
    set(WT_HAVE_CUDA ON)
    message(STATUS "wt: CUDA toolkit ${CUDAToolkit_VERSION} found: CUDA paths enabled")
  else()
    message(STATUS "wt: CUDA toolkit not found: host-memory paths only")
  endif()
endif()

# yaml-cpp's Debian config names the target yaml-cpp without a namespace.
if(TARGET yaml-cpp AND NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()
