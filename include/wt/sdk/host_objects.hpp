// C++ views, for plugin code, of the objects the host passes in: the client, the weight source,
// the trainer group and the loader. Every failed call throws wt::sdk::Error carrying the host's
// reason. Arrays of growable structs are stepped by their struct_size (rule 2 of wt_plugin.h).
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/sdk/errors.hpp>
#include <wt/tensor.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace wt::sdk {

// True when `field` lies inside the struct the other side filled (ABI rule 1), whatever its value.
template <typename Struct, typename Member>
bool covers(const Struct* s, Member Struct::*field) {
  if (s == nullptr) return false;
  const auto* base = reinterpret_cast<const char*>(s);
  const auto* f = reinterpret_cast<const char*>(&(s->*field));
  return static_cast<std::size_t>(f - base) + sizeof(Member) <= s->struct_size;
}

// True when `slot` lies inside the struct the other side filled and, for a pointer, is non-NULL
// (ABI rule 1).
template <typename Struct, typename Member>
bool has_slot(const Struct* s, Member Struct::*slot) {
  if (!covers(s, slot)) return false;
  if constexpr (std::is_pointer_v<Member>) return (s->*slot) != nullptr;
  return true;
}

inline constexpr std::size_t kErrCap = 2048;

class ClientRef {
 public:
  explicit ClientRef(const wt_client* c = nullptr) : c_(c) {}
  bool valid() const { return c_ != nullptr; }
  void init_weight_transfer_engine(const std::string& json) const {
    call("init_weight_transfer_engine", [&](char* e, std::size_t n) {
      return need(&wt_client::init_weight_transfer_engine, "init_weight_transfer_engine")(
          c_->ctx, json.c_str(), e, n);
    });
  }
  void start_weight_update() const {
    call("start_weight_update", [&](char* e, std::size_t n) {
      return need(&wt_client::start_weight_update, "start_weight_update")(c_->ctx, e, n);
    });
  }
  void update_weights(const std::string& json) const {
    call("update_weights", [&](char* e, std::size_t n) {
      return need(&wt_client::update_weights, "update_weights")(c_->ctx, json.c_str(), e, n);
    });
  }
  void finish_weight_update(const char* version) const {
    call("finish_weight_update", [&](char* e, std::size_t n) {
      return need(&wt_client::finish_weight_update, "finish_weight_update")(c_->ctx, version, e, n);
    });
  }
  // Ends the inference side's update after a failure on this side. Never throws: the round has
  // already failed, and its error is the one to report. A version-1 host's client has no such
  // slot: then an update the worker must refuse ends the session, as vLLM does on any failure.
  // Makes the calls in progress on this client return at once (the host's abandon_calls slot),
  // for an engine giving up while a call it started is blocked. A host without the slot (before
  // wt 0.3) leaves them to their own deadline.
  void abandon_calls() const noexcept {
    if (has_slot(c_, &wt_client::abandon_calls)) c_->abandon_calls(c_->ctx);
  }
  void end_weight_update(const std::string& reason) const noexcept {
    char err[kErrCap] = {0};
    if (has_slot(c_, &wt_client::end_weight_update)) {
      c_->end_weight_update(c_->ctx, reason.c_str(), err, sizeof err);
      return;
    }
    if (!has_slot(c_, &wt_client::update_weights)) return;
    try {
      std::string text = nlohmann::json{{"wt_end_weight_update", reason}}.dump();
      c_->update_weights(c_->ctx, text.c_str(), err, sizeof err);
    } catch (...) {
    }
  }

 private:
  template <typename M>
  M need(M wt_client::*slot, const char* name) const {
    if (!has_slot(c_, slot)) fail(WT_ERR_INCOMPATIBLE, "the client does not implement {}", name);
    return c_->*slot;
  }
  template <typename F>
  void call(const char* name, F&& f) const {
    if (c_ == nullptr) fail(WT_ERR_STATE, "no client was given, cannot call {}", name);
    char err[kErrCap] = {0};
    wt_status s = f(err, sizeof err);
    if (s != WT_OK)
      throw Error(s == WT_ERR_ABORTED || s == WT_ERR_TIMEOUT ? s : WT_ERR_REMOTE,
                  fmt::format("client {} failed: {}", name, err[0] ? err : "no reason given"));
  }
  const wt_client* c_;
};

using wt::ParamMeta;

// `n` growable wt_param_meta elements from the host (a source's metadata, what a worker holds);
// `what` names them in errors.
inline std::vector<ParamMeta> read_param_metas(const wt_param_meta* p, std::size_t n,
                                               const char* what) {
  std::vector<ParamMeta> out;
  out.reserve(n);
  if (n > 0 && p == nullptr) fail(WT_ERR_INTERNAL, "{} is NULL", what);
  if (n > 0 && !covers(p, &wt_param_meta::shape))
    fail(WT_ERR_INCOMPATIBLE, "{}: elements of struct_size {}, too small for ABI 2", what,
         p->struct_size);
  for (std::size_t i = 0; i < n; ++i) {
    const auto* m = WT_ELEMENT(wt_param_meta, p, i);
    if (m->ndim < 0 || (m->ndim > 0 && m->shape == nullptr))
      fail(WT_ERR_INTERNAL, "{} has a bad shape at item {}", what, i);
    ParamMeta& meta = out.emplace_back(ParamMeta{
        m->name ? m->name : "", m->dtype, std::vector<int64_t>(m->shape, m->shape + m->ndim)});
    // A host older than the shard fields never sets them: the whole tensor.
    if (covers(m, &wt_param_meta::shard_length) && m->sharded) {
      meta.shard_dim = m->shard_dim;
      meta.shard_offset = m->shard_offset;
      meta.shard_length = m->shard_length;
    }
  }
  return out;
}

class SourceRef {
 public:
  explicit SourceRef(const wt_weight_source* s = nullptr) : s_(s) {}
  bool valid() const { return s_ != nullptr; }
  const wt_weight_source* raw() const { return s_; }
  // WT_SOURCE_RELEASES_EACH_TENSOR: a tensor from next() is valid only until the next call (a
  // host sets it only for a plugin declaring WT_CAP_STREAMING_SOURCE). Read at each pass.
  bool releases_each_tensor() const {
    return s_ != nullptr && covers(s_, &wt_weight_source::flags) &&
           (s_->flags & WT_SOURCE_RELEASES_EACH_TENSOR) != 0;
  }

  std::vector<ParamMeta> metadata() const {
    const wt_param_meta* p = nullptr;
    std::size_t n = 0;
    check(need(&wt_weight_source::metadata, "metadata"), "metadata", &p, &n);
    return read_param_metas(p, n, "the weight source's metadata");
  }

  // A fresh pass: calls visit(tensor) for each item; end() runs when the Pass is destroyed.
  class Pass {
   public:
    explicit Pass(const wt_weight_source* s) : s_(s) {}
    Pass(Pass&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
    Pass(const Pass&) = delete;
    ~Pass() {
      if (s_ != nullptr && has_slot(s_, &wt_weight_source::end)) s_->end(s_->ctx);
    }
    // Returns false at the end of the pass.
    bool next(wt_tensor* out) {
      int32_t done = 0;
      char err[kErrCap] = {0};
      if (!has_slot(s_, &wt_weight_source::next))
        fail(WT_ERR_INCOMPATIBLE, "the weight source does not implement next");
      out->struct_size = sizeof(wt_tensor);
      out->abi_version = WT_ABI_VERSION;
      wt_status st = s_->next(s_->ctx, out, &done, err, sizeof err);
      if (st != WT_OK) throw Error(st, fmt::format("weight source failed: {}", err));
      return done == 0;
    }

   private:
    const wt_weight_source* s_;
  };

  Pass begin() const {
    check(need(&wt_weight_source::begin, "begin"), "begin");
    return Pass(s_);
  }

 private:
  template <typename M>
  M need(M wt_weight_source::*slot, const char* name) const {
    if (!has_slot(s_, slot))
      fail(WT_ERR_INCOMPATIBLE, "the weight source does not implement {}", name);
    return s_->*slot;
  }
  template <typename F, typename... A>
  void check(F f, const char* name, A... a) const {
    char err[kErrCap] = {0};
    wt_status st = f(s_->ctx, a..., err, sizeof err);
    if (st != WT_OK) throw Error(st, fmt::format("weight source {} failed: {}", name, err));
  }
  const wt_weight_source* s_;
};

// A one-rank group when the host gives none.
class GroupRef {
 public:
  explicit GroupRef(const wt_trainer_group* g = nullptr) : g_(g) {}
  int32_t rank() const { return g_ ? g_->rank : 0; }
  int32_t size() const { return g_ ? g_->size : 1; }

  std::vector<std::string> all_gather(const std::string& mine) const {
    if (size() == 1) return {mine};
    if (!has_slot(g_, &wt_trainer_group::all_gather))
      fail(WT_ERR_INCOMPATIBLE, "the trainer group does not implement all_gather");
    std::vector<std::string> out(static_cast<std::size_t>(size()));
    char err[kErrCap] = {0};
    auto sink = [](void* ctx, int32_t r, const void* d, std::size_t n) {
      auto* v = static_cast<std::vector<std::string>*>(ctx);
      if (r >= 0 && static_cast<std::size_t>(r) < v->size())
        (*v)[static_cast<std::size_t>(r)].assign(static_cast<const char*>(d), n);
    };
    wt_status st = g_->all_gather(g_->ctx, mine.data(), mine.size(), sink, &out, err, sizeof err);
    if (st != WT_OK) throw Error(st, fmt::format("trainer group all_gather failed: {}", err));
    return out;
  }
  void barrier() const {
    if (size() == 1) return;
    if (!has_slot(g_, &wt_trainer_group::barrier))
      fail(WT_ERR_INCOMPATIBLE, "the trainer group does not implement barrier");
    char err[kErrCap] = {0};
    wt_status st = g_->barrier(g_->ctx, err, sizeof err);
    if (st != WT_OK) throw Error(st, fmt::format("trainer group barrier failed: {}", err));
  }

 private:
  const wt_trainer_group* g_;
};

// The loader receive() is given: how received weights reach the model (see wt_loader).
class LoaderRef {
 public:
  explicit LoaderRef(const wt_loader* l = nullptr) : l_(l) {}

  // Hands over tensors in this plugin's memory; the host copies them during the call.
  void load(std::span<const wt_tensor> tensors) const {
    std::vector<wt_tensor> v(tensors.begin(), tensors.end());
    for (auto& t : v) {
      t.struct_size = sizeof(wt_tensor);
      t.abi_version = WT_ABI_VERSION;
    }
    call("load", [&](char* e, std::size_t n) {
      return need(&wt_loader::load, "load")(l_->ctx, v.data(), v.size(), e, n);
    });
  }
  void load_patches(std::span<const wt_sparse_patch> patches) const {
    std::vector<wt_sparse_patch> v(patches.begin(), patches.end());
    for (auto& p : v) {
      p.struct_size = sizeof(wt_sparse_patch);
      p.abi_version = WT_ABI_VERSION;
    }
    call("load_patches", [&](char* e, std::size_t n) {
      return need(&wt_loader::load_patches, "load_patches")(l_->ctx, v.data(), v.size(), e, n);
    });
  }
  // The receiver's own memory for `param`, when it offers some (valid until receive returns);
  // nullopt: load() it instead.
  std::optional<DLTensor> destination(const ParamMeta& param) const {
    if (!has_slot(l_, &wt_loader::destination) || !has_slot(l_, &wt_loader::written))
      return std::nullopt;
    wt_param_meta m{sizeof(wt_param_meta),
                    WT_ABI_VERSION,
                    param.name.c_str(),
                    param.dtype,
                    static_cast<int32_t>(param.shape.size()),
                    param.shape.data(),
                    0,  // a destination is always for the whole tensor
                    0,
                    0,
                    0};
    DLTensor out{};
    int32_t found = 0;
    call("destination",
         [&](char* e, std::size_t n) { return l_->destination(l_->ctx, &m, &out, &found, e, n); });
    if (!found) return std::nullopt;
    return out;
  }
  void written(const std::string& name) const {
    call("written", [&](char* e, std::size_t n) {
      return need(&wt_loader::written, "written")(l_->ctx, name.c_str(), e, n);
    });
  }

 private:
  template <typename M>
  M need(M wt_loader::*slot, const char* name) const {
    if (!has_slot(l_, slot)) fail(WT_ERR_INCOMPATIBLE, "the loader does not implement {}", name);
    return l_->*slot;
  }
  template <typename F>
  void call(const char* name, F&& f) const {
    if (l_ == nullptr) fail(WT_ERR_STATE, "receive was given no loader, cannot call {}", name);
    char err[kErrCap] = {0};
    wt_status s = f(err, sizeof err);
    if (s != WT_OK)
      throw Error(
          s, fmt::format("the loader's {} failed: {}", name, err[0] ? err : "no reason given"));
  }
  const wt_loader* l_;
};

}  // namespace wt::sdk
