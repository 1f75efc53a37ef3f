#include <wt/services/yaml_json.hpp>

#include <wt/error.hpp>

#include <yaml-cpp/eventhandler.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace wt {
namespace {

// YAML 1.2 core-schema numbers: [-+]?[0-9]+ and [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
// (a scan, not std::regex, whose matcher recurses per character and overflows on long scalars).
struct NumberShape {
  bool integer = false, real = false;
};
NumberShape number_shape(std::string_view v) {
  std::size_t i = 0;
  const auto digits = [&] {
    std::size_t start = i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    return i - start;
  };
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  const std::size_t whole = digits();
  if (i == v.size()) return {whole > 0, false};
  std::size_t frac = 0;
  bool dot = false;
  if (v[i] == '.') {
    dot = true;
    ++i;
    frac = digits();
  }
  if (whole == 0 && frac == 0) return {};
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (digits() == 0) return {};
  } else if (!dot) {
    return {};
  }
  return {false, i == v.size()};
}

nlohmann::json scalar(const YAML::Node& n) {
  const std::string& v = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted: always a string
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  if (v == "null" || v == "~" || v == "Null" || v == "NULL" || v.empty()) return nullptr;
  const NumberShape shape = number_shape(v);
  if (shape.integer) {
    int64_t x = 0;
    const char* b = v.data() + (v[0] == '+' ? 1 : 0);
    auto r = std::from_chars(b, v.data() + v.size(), x);
    if (r.ec == std::errc()) return x;
    return v;  // out of range: keep the text, the reader reports the type
  }
  if (shape.real) return std::strtod(v.c_str(), nullptr);
  return v;
}

[[noreturn]] void fail_at(const std::string& origin, const YAML::Mark& m, const std::string& msg) {
  if (m.is_null()) throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", origin, msg));
  throw Error(WT_ERR_INVALID_ARGUMENT,
              fmt::format("{}:{}:{}: {}", origin, m.line + 1, m.column + 1, msg));
}

// Recursion is bounded by max_depth, so a cyclic (recursive-alias) graph ends in an error.
class Converter {
 public:
  Converter(const std::string& origin, const YamlLimits& limits)
      : origin_(origin), limits_(limits) {}

  nlohmann::json convert(const YAML::Node& node, std::size_t depth) {
    if (++nodes_ > limits_.max_nodes)
      fail_at(origin_, node.Mark(),
              fmt::format("the document expands to more than {} nodes (aliases included)",
                          limits_.max_nodes));
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar:
        return scalar(node);
      case YAML::NodeType::Sequence: {
        enter(node, depth);
        auto arr = nlohmann::json::array();
        for (const auto& item : node) arr.push_back(convert(item, depth + 1));
        return arr;
      }
      case YAML::NodeType::Map: {
        enter(node, depth);
        auto obj = nlohmann::json::object();
        for (const auto& kv : node) {
          if (!kv.first.IsScalar())
            fail_at(origin_, kv.first.Mark(), "a key must be a plain string");
          const std::string& key = kv.first.Scalar();
          if (obj.contains(key))
            fail_at(origin_, kv.first.Mark(), fmt::format("duplicate key '{}'", key));
          obj[key] = convert(kv.second, depth + 1);
        }
        return obj;
      }
    }
    return nullptr;
  }

 private:
  void enter(const YAML::Node& node, std::size_t depth) {
    if (depth >= limits_.max_depth)
      fail_at(origin_, node.Mark(),
              fmt::format("nested deeper than {} levels (or an alias refers to itself)",
                          limits_.max_depth));
  }

  const std::string& origin_;
  const YamlLimits& limits_;
  std::size_t nodes_ = 0;
};

}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& node, const std::string& origin,
                            const YamlLimits& limits) {
  return Converter(origin, limits).convert(node, 0);
}

namespace {

// Receives a document's events, keeping only where its first node starts.
class FirstMark final : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> mark;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                const std::string&) override {
    note(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnMapEnd() override {}

 private:
  void note(const YAML::Mark& m) {
    if (!mark) mark = m;
  }
};

}  // namespace

YAML::Node load_yaml(std::string_view text, const std::string& origin, const YamlLimits& limits) {
  YAML::Node root;
  try {
    const std::string copy(text);
    root = YAML::Load(copy);  // the first document
    // Documents are counted, never collected: yaml-cpp's LoadAll does not end on some malformed
    // input (",L\n-" yields empty documents forever, found by fuzzing).
    std::istringstream in(copy);
    YAML::Parser parser(in);
    FirstMark first, second;
    if (parser.HandleNextDocument(first) && parser.HandleNextDocument(second))
      fail_at(origin, second.mark.value_or(YAML::Mark::null_mark()),
              "a second YAML document ('---'): one document per file, please");
  } catch (const YAML::Exception& e) {
    fail_at(origin, e.mark, fmt::format("not valid YAML: {}", e.msg));
  }
  yaml_to_json(root, origin, limits);  // the checks, before any reader walks the tree
  return root;
}

YAML::Node load_yaml_file(const std::string& path, const YamlLimits& limits) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw Error(WT_ERR_NOT_FOUND, fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  struct stat st {};
  std::string why;
  if (fstat(fd, &st) != 0)
    why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (static_cast<std::size_t>(st.st_size) > limits.max_file_bytes)
    why = fmt::format("{} bytes is more than a YAML file may hold ({})", st.st_size,
                      limits.max_file_bytes);
  std::string text;
  if (why.empty()) {
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::read(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    text.resize(done);
  }
  ::close(fd);
  if (!why.empty()) throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", path, why));
  return load_yaml(text, path, limits);
}

}  // namespace wt
