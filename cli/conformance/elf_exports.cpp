#include "elf_exports.hpp"

#include <wt/error.hpp>

#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>

namespace wt::cli {
namespace {

constexpr uint64_t kMaxFile = uint64_t{1} << 30;  // no plugin is larger; refuse reading more

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(WT_ERR_INVALID_ARGUMENT,
              fmt::format("{} is not a readable ELF shared object: {}", path, why));
}

// The file's bytes, read (not mapped: a file truncated meanwhile must not raise SIGBUS), and
// typed reads that copy (no unaligned access) and refuse anything outside the file.
struct Bytes {
  std::vector<unsigned char> data;
  template <typename T>
  std::optional<T> at(uint64_t off) const {
    if (off > data.size() || sizeof(T) > data.size() - off) return std::nullopt;
    T v;
    std::memcpy(&v, data.data() + off, sizeof v);
    return v;
  }
};

Bytes read_file(const std::string& path) {
  // O_NONBLOCK: a FIFO given here must not block the open; fstat then refuses it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) bad(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path, "not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFile) {
    ::close(fd);
    bad(path, "larger than 1 GiB");
  }
  Bytes b;
  b.data.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < b.data.size()) {
    ssize_t r = ::pread(fd, b.data.data() + got, b.data.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  b.data.resize(got);
  return b;
}

}  // namespace

std::vector<std::string> exported_symbols(const std::string& path) {
  Bytes f = read_file(path);
  auto eh = f.at<Elf64_Ehdr>(0);
  if (!eh) bad(path, "too short for an ELF header");
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) bad(path, "no ELF magic");
  if (eh->e_ident[EI_CLASS] != ELFCLASS64) bad(path, "not a 64-bit ELF file");
  const bool native = eh->e_ident[EI_DATA] ==
                      (std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB);
  if (!native) bad(path, "its byte order is not this machine's");
  if (eh->e_type != ET_DYN) bad(path, "not a shared object");
  if (eh->e_shnum == 0) bad(path, "it has no section headers, so its symbols cannot be listed");
  if (eh->e_shentsize != sizeof(Elf64_Shdr)) bad(path, "unexpected section header size");
  auto section = [&](unsigned i) {
    auto s = f.at<Elf64_Shdr>(eh->e_shoff + uint64_t{i} * sizeof(Elf64_Shdr));
    if (!s || eh->e_shoff > f.data.size()) bad(path, "section headers lie outside the file");
    return *s;
  };
  std::vector<std::string> out;
  for (unsigned i = 0; i < eh->e_shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh->e_shnum)
      bad(path, "malformed .dynsym");
    const Elf64_Shdr strtab = section(sh.sh_link);
    if (strtab.sh_offset > f.data.size() || strtab.sh_size > f.data.size() - strtab.sh_offset)
      bad(path, "the symbol names lie outside the file");
    const char* names = reinterpret_cast<const char*>(f.data.data() + strtab.sh_offset);
    for (uint64_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
      auto s = f.at<Elf64_Sym>(sh.sh_offset + k * sizeof(Elf64_Sym));
      if (!s) bad(path, ".dynsym lies outside the file");
      const unsigned bind = ELF64_ST_BIND(s->st_info), type = ELF64_ST_TYPE(s->st_info);
      const unsigned vis = ELF64_ST_VISIBILITY(s->st_other);
      // Undefined (imported) symbols, sections, files and version-node names (absolute) are not
      // code or data the library offers.
      if (s->st_shndx == SHN_UNDEF || s->st_shndx == SHN_ABS) continue;
      if (type == STT_SECTION || type == STT_FILE) continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      if (s->st_name >= strtab.sh_size) bad(path, "a symbol name lies outside its string table");
      const char* name = names + s->st_name;
      out.emplace_back(name, strnlen(name, strtab.sh_size - s->st_name));
    }
  }
  return out;
}

}  // namespace wt::cli
