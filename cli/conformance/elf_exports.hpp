// The symbols a shared library exports: what `nm -D --defined-only` lists, read from the ELF
// dynamic symbol table (.dynsym) without loading the file. Used by `wt conformance` to check that
// a plugin exports its entry point and nothing else.
#pragma once

#include <string>
#include <vector>

namespace wt::cli {

// Defined global and weak symbols of default or protected visibility, in table order. Throws
// wt::Error (WT_ERR_INVALID_ARGUMENT) naming the file when it is not a well-formed 64-bit ELF
// shared object; every offset in it is bounds-checked, so a hostile file cannot make it read
// outside the file.
std::vector<std::string> exported_symbols(const std::string& path);

}  // namespace wt::cli
