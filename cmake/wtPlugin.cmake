# wt_add_plugin(<backend> SOURCES ... [VERSION x.y.z] [LIBRARIES ...] [CUDA | NCCL] [INSTALL])
# Builds libwt_<backend>.so: hidden visibility, only wt_plugin_get exported, the plugin SDK
# linked in, WT_PLUGIN_VERSION defined. Works in wt's own tree and against an installed wt.
#   CUDA     CUDA memory when the toolkit's headers are found (wt_plugin_cuda below)
#   NCCL     the same, also needing nccl.h
#   INSTALL  installs it where wt looks for plugins: WT_PLUGIN_INSTALL_DIR (set by
#            find_package(wt): that wt's plugin directory), else <libdir>/wt/plugins
set(_WT_PLUGIN_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

function(wt_add_plugin backend)
  cmake_parse_arguments(ARG "CUDA;NCCL;INSTALL" "VERSION;OUTPUT_DIR" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_VERSION)
    set(ARG_VERSION ${PROJECT_VERSION})
  endif()
  set(target wt_plugin_${backend})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "wt_${backend}"
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR})
  elseif(DEFINED WT_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${WT_PLUGIN_OUTPUT_DIR})
  endif()
  target_compile_definitions(${target} PRIVATE WT_PLUGIN_VERSION="${ARG_VERSION}"
                                               WT_PLUGIN_BACKEND="${backend}")
  target_link_libraries(${target} PRIVATE wt::plugin_sdk ${ARG_LIBRARIES})
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${_WT_PLUGIN_CMAKE_DIR}/wt_plugin.map")
  # clang leaves sanitizer runtimes out of shared objects (the program brings them), so a
  # sanitized clang build cannot insist on no undefined symbols.
  if(NOT (WT_SANITIZE AND CMAKE_CXX_COMPILER_ID MATCHES "Clang"))
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${_WT_PLUGIN_CMAKE_DIR}/wt_plugin.map)
  if(ARG_NCCL)
    wt_plugin_cuda(${backend} NCCL)
  elseif(ARG_CUDA)
    wt_plugin_cuda(${backend})
  endif()
  if(ARG_INSTALL)
    if(DEFINED WT_PLUGIN_INSTALL_DIR)
      set(destination ${WT_PLUGIN_INSTALL_DIR})
    else()
      include(GNUInstallDirs)
      set(destination ${CMAKE_INSTALL_LIBDIR}/wt/plugins)
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION ${destination})
  endif()
endfunction()

# wt_plugin_cuda(<backend> [NCCL] [TARGET <target>])
# CUDA memory for a plugin (wt_plugin_<backend>, or <target>) when the toolkit's headers are found
# (cuda.h, cudaTypedefs.h; with NCCL also nccl.h): defines WT_PLUGIN_WITH_CUDA. Nothing CUDA is linked: the driver (and libnccl) are
# reached at run time (wt/sdk/cuda_driver.hpp), so the plugin loads on machines without them.
function(wt_plugin_cuda backend)
  cmake_parse_arguments(ARG "NCCL" "TARGET" "" ${ARGN})
  set(target wt_plugin_${backend})
  if(ARG_TARGET)
    set(target ${ARG_TARGET})
  endif()
  if(NOT DEFINED WT_HAVE_CUDA)
    find_package(CUDAToolkit 12.0 QUIET)  # docs/cuda.md
    set(WT_HAVE_CUDA ${CUDAToolkit_FOUND})
  endif()
  if(NOT WT_HAVE_CUDA)
    message(STATUS "wt ${backend}: no CUDA toolkit: host memory only")
    return()
  endif()
  set(dirs ${CUDAToolkit_INCLUDE_DIRS})
  if(ARG_NCCL)
    find_path(WT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NOT WT_NCCL_INCLUDE_DIR)
      message(STATUS "wt ${backend}: no nccl.h: host memory only")
      return()
    endif()
    list(APPEND dirs ${WT_NCCL_INCLUDE_DIR})
  endif()
  target_compile_definitions(${target} PRIVATE WT_PLUGIN_WITH_CUDA)
  target_include_directories(${target} SYSTEM PRIVATE ${dirs})
  target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS})
endfunction()
