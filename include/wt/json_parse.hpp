// Bounded JSON parsing for everything wt reads from outside its process: HTTP bodies, init infos,
// update infos, safetensors headers, plugin payloads. Header-only, so plugins use it too.
//
// Why bounds: nlohmann::json parses iteratively, but dump(), copies and comparisons recurse, so a
// 131 KB body nested 65,000 deep overflows the stack; and a DOM costs ~16-80 bytes per value, so
// a body of tiny values grows 20-30x in memory. Real payloads are shallow (wt's deepest is 5) and
// have a few values per tensor, so both limits below are far from anything legitimate.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wt {

struct JsonLimits {
  std::size_t max_depth = 64;                     // nesting levels of arrays and objects
  std::size_t max_values = std::size_t{1} << 22;  // scalars, arrays and objects together (4 Mi)
};

// Thrown for text that is not JSON, and for JSON beyond the limits. what() is a sentence that
// fits after "<what is being parsed>: ".
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Builds the DOM from nlohmann's SAX events, counting the limits as values arrive. (nlohmann's
// callback parser would do the same job, but it rescans the enclosing container after every '}',
// which is quadratic: an array of 40,000 objects took 12 s. Its own SAX DOM builder lives in its
// detail namespace, which changes between releases; json_sax is its public interface.)
class BoundedDomBuilder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  BoundedDomBuilder(nlohmann::json& root, const JsonLimits& limits)
      : root_(root), limits_(limits) {}

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(nlohmann::json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(nlohmann::json::object()); }
  bool key(string_t& k) override {
    key_ = &(*stack_.back())[std::move(k)];  // the next value lands here
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(nlohmann::json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw JsonError(std::string("not valid JSON: ") + e.what());
  }

 private:
  // Places a value where the grammar says it goes and returns where it now lives.
  nlohmann::json* place(nlohmann::json&& v) {
    if (++values_ > limits_.max_values)
      throw JsonError("JSON holds more than " + std::to_string(limits_.max_values) + " values");
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(v));
      return &stack_.back()->back();
    }
    *key_ = std::move(v);
    return key_;
  }
  bool put(nlohmann::json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(nlohmann::json&& container) {
    if (stack_.size() + 1 > limits_.max_depth)
      throw JsonError("JSON nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  nlohmann::json& root_;
  const JsonLimits& limits_;
  std::vector<nlohmann::json*> stack_;  // open containers; their addresses stay put
  nlohmann::json* key_ = nullptr;
  std::size_t values_ = 0;
};

}  // namespace detail

// Parses `text` as one JSON value within `limits`, in time linear in its size.
inline nlohmann::json parse_json(std::string_view text, const JsonLimits& limits = {}) {
  nlohmann::json out;
  detail::BoundedDomBuilder sax(out, limits);
  try {
    nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const JsonError&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    // parse_error for syntax, out_of_range for numbers like 1e999.
    throw JsonError(std::string("not valid JSON: ") + e.what());
  }
  return out;
}

}  // namespace wt
