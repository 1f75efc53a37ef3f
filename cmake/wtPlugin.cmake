# wt_add_plugin(<backend> SOURCES ... [VERSION x.y.z] [LIBRARIES ...])
# Builds libwt_<backend>.so: hidden visibility, only wt_plugin_get exported, the plugin SDK
# linked in, WT_PLUGIN_VERSION defined. Works in wt's own tree and against an installed wt.
set(_WT_PLUGIN_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

function(wt_add_plugin backend)
  cmake_parse_arguments(ARG "" "VERSION;OUTPUT_DIR" "SOURCES;LIBRARIES" ${ARGN})
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
endfunction()
