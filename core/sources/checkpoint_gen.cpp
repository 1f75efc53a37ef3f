#include <wt/services/checkpoint_gen.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace wt {
namespace {

struct Dims {
  int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;
  bool qkv_bias, tied;
};

ModelLayout decoder(const std::string& name, const std::string& desc, const Dims& d,
                    DLDataType dt) {
  ModelLayout m{name, desc, {}};
  auto add = [&](std::string n, std::vector<int64_t> shape) {
    m.params.push_back({std::move(n), dt, std::move(shape)});
  };
  add("model.embed_tokens.weight", {d.vocab, d.hidden});
  const int64_t q = d.heads * d.head_dim, kv = d.kv_heads * d.head_dim;
  for (int64_t l = 0; l < d.layers; ++l) {
    std::string p = fmt::format("model.layers.{}.", l);
    add(p + "self_attn.q_proj.weight", {q, d.hidden});
    if (d.qkv_bias) add(p + "self_attn.q_proj.bias", {q});
    add(p + "self_attn.k_proj.weight", {kv, d.hidden});
    if (d.qkv_bias) add(p + "self_attn.k_proj.bias", {kv});
    add(p + "self_attn.v_proj.weight", {kv, d.hidden});
    if (d.qkv_bias) add(p + "self_attn.v_proj.bias", {kv});
    add(p + "self_attn.o_proj.weight", {d.hidden, q});
    add(p + "mlp.gate_proj.weight", {d.inter, d.hidden});
    add(p + "mlp.up_proj.weight", {d.inter, d.hidden});
    add(p + "mlp.down_proj.weight", {d.hidden, d.inter});
    add(p + "input_layernorm.weight", {d.hidden});
    add(p + "post_attention_layernorm.weight", {d.hidden});
  }
  add("model.norm.weight", {d.hidden});
  if (!d.tied) add("lm_head.weight", {d.vocab, d.hidden});
  return m;
}

// xorshift64*: fast and reproducible; values only need to look like weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
};

// IEEE float -> half, round to nearest even (what a _Float16 cast does where the compiler has
// one; clang 14 on x86-64 has not).
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
  const int exp = static_cast<int>((x >> 23) & 0xff);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  const int e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t m = mant, shift = 13, base = static_cast<uint32_t>(e) << 10;
  if (e <= 0) {  // a subnormal half: the implicit bit becomes explicit
    if (e < -10) return static_cast<uint16_t>(sign);
    m |= 0x800000;
    shift = static_cast<uint32_t>(14 - e);
    base = 0;
  }
  uint32_t half = base + (m >> shift);
  const uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
  if (rem > mid || (rem == mid && (half & 1))) ++half;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | half);
}

void fill(unsigned char* out, std::size_t n_elems, DLDataType dt, Rng& rng) {
  for (std::size_t i = 0; i < n_elems; ++i) {
    uint64_t r = rng.next();
    // a float in [-0.05, 0.05)
    float f = (static_cast<float>(r >> 40) / static_cast<float>(1 << 24) - 0.5f) * 0.1f;
    if (dt.code == kDLBfloat) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(out + 2 * i, &h, 2);
    } else if (dt.code == kDLFloat && dt.bits == 16) {
      uint16_t h = float_to_half(f);
      std::memcpy(out + 2 * i, &h, 2);
    } else if (dt.code == kDLFloat && dt.bits == 32) {
      std::memcpy(out + 4 * i, &f, 4);
    } else if (dt.code == kDLFloat && dt.bits == 64) {
      double x = f;
      std::memcpy(out + 8 * i, &x, 8);
    } else {
      std::memcpy(out + i * element_size(dt), &r, element_size(dt));
    }
  }
}

}  // namespace

uint64_t ModelLayout::total_bytes() const {
  uint64_t n = 0;
  for (const auto& p : params) {
    uint64_t e = 0;
    checked_numel(p.shape.data(), static_cast<int32_t>(p.shape.size()), &e);
    n += e * element_size(p.dtype);
  }
  return n;
}

uint64_t ModelLayout::total_params() const {
  uint64_t n = 0;
  for (const auto& p : params) {
    uint64_t e = 0;
    checked_numel(p.shape.data(), static_cast<int32_t>(p.shape.size()), &e);
    n += e;
  }
  return n;
}

std::vector<std::string> known_model_layouts() {
  return {"qwen2.5-0.5b", "llama-3.2-1b", "tiny"};
}

ModelLayout model_layout(const std::string& name, DLDataType dt) {
  if (name == "qwen2.5-0.5b")
    return decoder(name, "Qwen2.5-0.5B layout: 24 layers, hidden 896, GQA 14/2, tied embeddings",
                   {151936, 896, 4864, 24, 14, 2, 64, true, true}, dt);
  if (name == "llama-3.2-1b")
    return decoder(name, "Llama-3.2-1B layout: 16 layers, hidden 2048, GQA 32/8, tied embeddings",
                   {128256, 2048, 8192, 16, 32, 8, 64, false, true}, dt);
  if (name == "tiny")
    return decoder(name, "a tiny Qwen2-style layout for tests: 4 layers, hidden 64",
                   {1024, 64, 256, 4, 4, 2, 16, true, false}, dt);
  std::string known;
  for (const auto& k : known_model_layouts()) known += (known.empty() ? "" : ", ") + k;
  throw Error(WT_ERR_INVALID_ARGUMENT,
              fmt::format("unknown model layout '{}' (known: {})", name, known));
}

namespace {

namespace fs = std::filesystem;

constexpr const char* kMarker = ".complete";

std::string identity(const ModelLayout& layout, uint32_t seed, int shards) {
  return nlohmann::json{
      {"generator", "wt"},
      {"layout", layout.name},
      {"dtype", layout.params.empty() ? std::string("none")
                                      : std::string(safetensors_name(layout.params[0].dtype))},
      {"seed", seed},
      {"shards", shards}}
      .dump();
}

// Why `dir` cannot receive a generated checkpoint, or "" when it can (absent, or an empty
// directory). Never follows a symlink at `dir` itself.
std::string unusable_target(const fs::path& dir) {
  std::error_code ec;
  auto st = fs::symlink_status(dir, ec);
  if (ec || st.type() == fs::file_type::not_found) return "";
  if (st.type() != fs::file_type::directory) return "exists and is not a directory";
  if (!fs::is_empty(dir, ec) || ec) return "exists and is not empty";
  return "";
}

// Writes the shard files into `dir`, which wt just created.
std::vector<std::string> write_shards(const std::string& dir, const ModelLayout& layout,
                                      uint32_t seed, int shards) {
  Rng rng{0x9E3779B97F4A7C15ULL ^ (uint64_t{seed} + 1) * 0xBF58476D1CE4E5B9ULL};
  std::vector<std::string> files;
  const std::size_t per = (layout.params.size() + static_cast<std::size_t>(shards) - 1) /
                          static_cast<std::size_t>(shards);
  for (int s = 0; s < shards; ++s) {
    std::size_t lo = static_cast<std::size_t>(s) * per,
                hi = std::min(layout.params.size(), lo + per);
    nlohmann::ordered_json header;
    header["__metadata__"] = {
        {"format", "pt"}, {"generator", "wt gen-checkpoint"}, {"layout", layout.name}};
    uint64_t off = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      const auto& p = layout.params[i];
      uint64_t e = 0;
      checked_numel(p.shape.data(), static_cast<int32_t>(p.shape.size()), &e);
      uint64_t n = e * element_size(p.dtype);
      header[p.name] = {{"dtype", std::string(safetensors_name(p.dtype))},
                        {"shape", p.shape},
                        {"data_offsets", {off, off + n}}};
      off += n;
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data section starts 8-aligned
    std::string path =
        (std::filesystem::path(dir) /
         (shards == 1 ? "model.safetensors"
                      : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, shards)))
            .string();
    const std::string& tmp = path;
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wbx"), &std::fclose);
    if (!f)
      throw Error(WT_ERR_SYSTEM, fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
    uint64_t hl = h.size();
    std::fwrite(&hl, 8, 1, f.get());
    std::fwrite(h.data(), 1, h.size(), f.get());
    std::vector<unsigned char> buf;
    for (std::size_t i = lo; i < hi; ++i) {
      const auto& p = layout.params[i];
      uint64_t e = 0;
      checked_numel(p.shape.data(), static_cast<int32_t>(p.shape.size()), &e);
      const std::size_t es = element_size(p.dtype), chunk = std::size_t{1} << 20;
      for (uint64_t done = 0; done < e; done += chunk) {
        std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(chunk, e - done));
        buf.resize(n * es);
        fill(buf.data(), n, p.dtype, rng);
        if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size())
          throw Error(WT_ERR_SYSTEM,
                      fmt::format("writing {} failed: {}", tmp, std::strerror(errno)));
      }
    }
    if (std::fflush(f.get()) != 0)
      throw Error(WT_ERR_SYSTEM, fmt::format("writing {} failed", tmp));
    f.reset();
    files.push_back(path);
  }
  return files;
}

}  // namespace

bool generated_checkpoint_present(const std::string& dir, const ModelLayout& layout, uint32_t seed,
                                  int shards) {
  std::error_code ec;
  if (fs::symlink_status(dir, ec).type() != fs::file_type::directory) return false;
  const fs::path marker = fs::path(dir) / kMarker;
  if (fs::symlink_status(marker, ec).type() != fs::file_type::regular) return false;
  std::ifstream f(marker);
  if (!f) return false;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // wt 0.1.0 wrote an empty marker into directories named after the parameters.
  return text.empty() || text == identity(layout, seed, shards);
}

std::vector<std::string> write_synthetic_checkpoint(const std::string& dir,
                                                    const ModelLayout& layout, uint32_t seed,
                                                    int shards) {
  if (shards < 1 || static_cast<std::size_t>(shards) > layout.params.size())
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("shards must be in 1..{}", layout.params.size()));
  // wt never deletes or overwrites what it did not create: it writes into a fresh directory of
  // its own next to the target and renames it into place (rename(2) replaces only an empty
  // directory), so a user's files can never be touched.
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "ckpt/" names ckpt
  const auto refuse = [&](const std::string& why) {
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: {}; wt generates a checkpoint only into a new or empty directory "
                            "and never deletes what it did not create",
                            dir, why));
  };
  if (auto why = unusable_target(target); !why.empty()) refuse(why);
  std::error_code ec;
  fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec)
    throw Error(WT_ERR_SYSTEM, fmt::format("cannot create {}: {}", parent.string(), ec.message()));
  std::string tmpl = (parent / (target.filename().string() + ".wt-partial-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr)
    throw Error(WT_ERR_SYSTEM,
                fmt::format("cannot create a directory next to {}: {}", dir, std::strerror(errno)));
  const fs::path work(tmpl);
  try {
    auto files = write_shards(work.string(), layout, seed, shards);
    std::ofstream(work / kMarker) << identity(layout, seed, shards);
    if (::rename(work.c_str(), target.c_str()) != 0) {
      const int err = errno;
      if (err == ENOTEMPTY || err == EEXIST || err == ENOTDIR)
        refuse("was created by someone else while the checkpoint was being written");
      throw Error(WT_ERR_SYSTEM,
                  fmt::format("cannot move the checkpoint into {}: {}", dir, std::strerror(err)));
    }
    for (auto& f : files) f = (target / fs::path(f).filename()).string();
    return files;
  } catch (...) {
    fs::remove_all(work, ec);  // created above by mkdtemp: only wt's files are in it
    throw;
  }
}

}  // namespace wt
