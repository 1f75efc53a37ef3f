#include <wt/services/safetensors.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/json_parse.hpp>
#include <wt/sdk/shm_segments.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

namespace wt {
namespace {

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", file, msg));
}

}  // namespace

std::vector<std::string> expand_checkpoint_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::string> files;
      for (const auto& e : std::filesystem::directory_iterator(p, ec))
        if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty())
        throw Error(WT_ERR_NOT_FOUND,
                    fmt::format("{}: the directory holds no *.safetensors file", p));
      out.insert(out.end(), files.begin(), files.end());
    } else {
      out.push_back(p);
    }
  }
  if (out.empty()) throw Error(WT_ERR_INVALID_ARGUMENT, "no checkpoint file given");
  return out;
}

SafetensorsSource::SafetensorsSource(const std::vector<std::string>& paths)
    : SafetensorsSource(paths, Memory::private_copy_on_write) {}

SafetensorsSource::SafetensorsSource(const std::vector<std::string>& paths, Memory memory)
    : files_(expand_checkpoint_paths(paths)) {
  std::set<std::string> names;
  try {
    for (const auto& file : files_) {
      // Non-blocking, so a FIFO named like a checkpoint cannot stall the open; refused below.
      int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd < 0)
        throw Error(WT_ERR_NOT_FOUND,
                    fmt::format("{}: cannot open: {}", file, std::strerror(errno)));
      struct stat st {};
      if (fstat(fd, &st) != 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        throw Error(WT_ERR_SYSTEM, fmt::format("{}: cannot stat: {}", file, why));
      }
      if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        bad(file, "not a regular file (a FIFO, device or directory is no safetensors checkpoint)");
      }
      auto size = static_cast<std::size_t>(st.st_size);
      if (size < 8) {
        ::close(fd);
        bad(file, fmt::format("{} bytes is too short for a safetensors file", size));
      }
      if (memory == Memory::shared) {
        maps_.push_back(load_into_shared_memory(fd, file, size));
        ::close(fd);
      } else {
        void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        ::close(fd);
        if (addr == MAP_FAILED)
          throw Error(WT_ERR_SYSTEM, fmt::format("{}: cannot map: {}", file, std::strerror(errno)));
        maps_.push_back({addr, size, {}});
      }
      void* addr = maps_.back().addr;
      auto* base = static_cast<unsigned char*>(addr);
      uint64_t header_len = 0;
      std::memcpy(&header_len, base, 8);  // little-endian on every platform wt supports
      if (header_len > size - 8)
        bad(file, fmt::format("header length {} runs past the end of the file ({} bytes)",
                              header_len, size));
      nlohmann::json header;
      try {
        header = parse_json(std::string_view(reinterpret_cast<const char*>(base + 8), header_len));
      } catch (const JsonError& e) {
        bad(file, fmt::format("header is not valid JSON: {}", e.what()));
      }
      if (!header.is_object()) bad(file, "header is not a JSON object");
      unsigned char* data = base + 8 + header_len;
      const uint64_t data_size = size - 8 - header_len;
      struct Found {
        uint64_t begin, end;
        ParamMeta meta;
      };
      std::vector<Found> found;
      for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name.empty() || name.find('\0') != std::string::npos)
          bad(file, "a tensor name is empty or holds a NUL character");
        auto where = fmt::format("tensor '{}'", name);
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
            !v.contains("data_offsets"))
          bad(file, where + ": needs dtype, shape and data_offsets");
        if (!v["dtype"].is_string()) bad(file, where + ": dtype must be a string");
        auto dt = dtype_from_safetensors_name(v["dtype"].get<std::string>());
        if (!dt)
          bad(file, fmt::format("{}: dtype '{}' is not one wt knows", where,
                                v["dtype"].get<std::string>()));
        if (!v["shape"].is_array()) bad(file, where + ": shape must be a list");
        ParamMeta m{name, *dt, {}};
        for (const auto& d : v["shape"]) {
          if (!d.is_number_integer() || d.get<int64_t>() < 0)
            bad(file, where + ": shape has a negative or non-integer dimension");
          m.shape.push_back(d.get<int64_t>());
        }
        const auto& off = v["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
            !off[1].is_number_unsigned())
          bad(file, where + ": data_offsets must be two non-negative integers");
        uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        if (b > e || e > data_size)
          bad(file, fmt::format("{}: data_offsets [{}, {}] are outside the data section ({} bytes)",
                                where, b, e, data_size));
        uint64_t nbytes = 0;
        if (!checked_nbytes(m.shape.data(), static_cast<int32_t>(m.shape.size()), *dt, &nbytes))
          bad(file, fmt::format("{}: shape {} of {} has more bytes than 64 bits can count", where,
                                nlohmann::json(m.shape).dump(), v["dtype"].get<std::string>()));
        if (nbytes != e - b)
          bad(file, fmt::format("{}: shape {} of {} needs {} bytes, but data_offsets span {}",
                                where, nlohmann::json(m.shape).dump(),
                                v["dtype"].get<std::string>(), nbytes, e - b));
        if (!names.insert(name).second)
          bad(file, where + ": the name appears in more than one file");
        found.push_back({b, e, std::move(m)});
      }
      std::sort(found.begin(), found.end(),
                [](const Found& a, const Found& b) { return a.begin < b.begin; });
      const Found* last = nullptr;  // the non-empty tensor that ends furthest
      for (const auto& f : found) {
        if (f.end == f.begin) continue;
        if (last != nullptr && f.begin < last->end)
          bad(file, fmt::format("tensors '{}' and '{}' overlap", last->meta.name, f.meta.name));
        if (last == nullptr || f.end > last->end) last = &f;
      }
      for (auto& f : found) {
        tensors_.push_back({data + f.begin, f.end - f.begin});
        total_bytes_ += f.end - f.begin;
        meta_.push_back(std::move(f.meta));
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsSource::~SafetensorsSource() {
  release();
}

void SafetensorsSource::release() {
  for (auto& m : maps_) {
    munmap(m.addr, m.size);
    if (!m.shm_name.empty()) shm_unlink(m.shm_name.c_str());
  }
  maps_.clear();
}

SafetensorsSource::Mapping SafetensorsSource::load_into_shared_memory(int fd,
                                                                      const std::string& file,
                                                                      std::size_t size) {
  shm::sweep_orphaned_segments();
  auto c = shm::create_segment(size);
  if (c.addr == nullptr)
    throw Error(WT_ERR_SYSTEM, fmt::format("{}: cannot {} a {}-byte shared-memory segment ({}): {}",
                                           file, c.step, size, c.name, std::strerror(c.error)));
  void* addr = c.addr;
  Mapping m{addr, size, std::move(c.name)};
  auto* dst = static_cast<unsigned char*>(addr);
  for (std::size_t done = 0; done < size;) {
    ssize_t n = pread(fd, dst + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "unexpected end of file";
      munmap(addr, size);
      shm_unlink(m.shm_name.c_str());
      throw Error(WT_ERR_SYSTEM, fmt::format("{}: cannot read: {}", file, why));
    }
    done += static_cast<std::size_t>(n);
  }
  return m;
}

bool SafetensorsSource::next(wt_tensor& out) {
  if (next_ >= tensors_.size()) return false;
  auto& m = meta_[next_];
  auto& t = tensors_[next_++];
  out.name = m.name.c_str();
  out.tensor = DLTensor{t.data,  {kDLCPU, 0},    static_cast<int32_t>(m.shape.size()),
                        m.dtype, m.shape.data(), nullptr,
                        0};
  return true;
}

std::span<unsigned char> SafetensorsSource::bytes(std::size_t i) {
  return {tensors_.at(i).data, static_cast<std::size_t>(tensors_.at(i).nbytes)};
}

}  // namespace wt
