// Bounded JSON parsing for everything wt reads from outside its process: HTTP bodies, init infos,
// update infos, safetensors headers, plugin payloads. Header-only, so plugins use it too.
//
// Why bounds: nlohmann::json parses iteratively, but dump(), copies and comparisons recurse, so a
// 131 KB body nested 65,000 deep overflows the stack; and a DOM costs ~16-80 bytes per value, so
// a body of tiny values grows 20-30x in memory. Real payloads are shallow (wt's deepest is 5) and
// have a few values per tensor, so both limits below are far from anything legitimate.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

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

// nlohmann's DOM builder with the limits counted as values arrive. (Its callback parser would do
// the same job, but it rescans the enclosing container after every '}', which is quadratic: an
// array of 40,000 objects took 12 s.) The SAX interface is nlohmann's documented extension point;
// the DOM builder it reuses lives in its detail namespace.
class BoundedDomSax : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
  using Base = nlohmann::detail::json_sax_dom_parser<nlohmann::json>;

 public:
  BoundedDomSax(nlohmann::json& out, const JsonLimits& limits) : Base(out, true), limits_(limits) {}
  bool null() { return count() && Base::null(); }
  bool boolean(bool v) { return count() && Base::boolean(v); }
  bool number_integer(number_integer_t v) { return count() && Base::number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return count() && Base::number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) {
    return count() && Base::number_float(v, s);
  }
  bool string(string_t& v) { return count() && Base::string(v); }
  bool binary(binary_t& v) { return count() && Base::binary(v); }
  bool start_object(std::size_t n) { return enter() && Base::start_object(n); }
  bool end_object() {
    --depth_;
    return Base::end_object();
  }
  bool start_array(std::size_t n) { return enter() && Base::start_array(n); }
  bool end_array() {
    --depth_;
    return Base::end_array();
  }

 private:
  bool count() {
    if (++values_ > limits_.max_values)
      throw JsonError("JSON holds more than " + std::to_string(limits_.max_values) + " values");
    return true;
  }
  bool enter() {
    if (++depth_ > limits_.max_depth)
      throw JsonError("JSON nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    return count();
  }
  const JsonLimits& limits_;
  std::size_t depth_ = 0, values_ = 0;
};

}  // namespace detail

// Parses `text` as one JSON value within `limits`, in time linear in its size.
inline nlohmann::json parse_json(std::string_view text, const JsonLimits& limits = {}) {
  nlohmann::json out;
  detail::BoundedDomSax sax(out, limits);
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
