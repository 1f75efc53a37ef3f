// Every C++ header of wt includes this first: they use C++20 (std::span, designated
// initialisers, concepts). CMake consumers get C++20 from the targets (wt::wt, the services,
// wt::plugin_sdk, wt::all carry cxx_std_20); this stops any other build with a sentence instead of
// "'std::span' has not been declared". The C ABI (wt_plugin.h, target wt::plugin_abi) needs no
// C++ at all.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "wt's C++ headers need C++20 (-std=c++20): link wt::wt, wt::all or wt::plugin_sdk, which require it, or use only the C ABI <wt/wt_plugin.h> (wt::plugin_abi) from C or C++17"
#endif
