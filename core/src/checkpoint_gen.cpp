#include <wt/checkpoint_gen.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
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
      _Float16 h = static_cast<_Float16>(f);
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

std::vector<std::string> write_synthetic_checkpoint(const std::string& dir,
                                                    const ModelLayout& layout, uint32_t seed,
                                                    int shards) {
  if (shards < 1 || static_cast<std::size_t>(shards) > layout.params.size())
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("shards must be in 1..{}", layout.params.size()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(WT_ERR_SYSTEM, fmt::format("cannot create {}: {}", dir, ec.message()));
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
    std::string tmp = path + ".partial";
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
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
    std::filesystem::rename(tmp, path);
    files.push_back(path);
  }
  return files;
}

}  // namespace wt
