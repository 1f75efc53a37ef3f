// The update info a worker read last, and what it read from it. A full resync names the same
// tensors every round (2,000 of them are about 100 KB of text), and reading them again would cost
// milliseconds before the first byte is received: the text is read again only when it changed.
#pragma once

#include "param_list.hpp"

#include <wt/sdk/json_fields.hpp>

#include <string>

namespace wt::plugins {

class UpdateTextCache {
 public:
  // The list `read(parsed)` made of `text`, or the one made of the same text last time. `read`
  // returns false when the text holds no list (the round's digests, for one): nothing is kept.
  template <typename Read>
  const ParamList* list_of(const char* text, Read&& read) {
    if (text != nullptr && !text_.empty() && text_ == text) return &list_;
    text_.clear();
    if (!read(sdk::parse_json_text(text, "update_info"), list_)) return nullptr;
    text_ = text;
    return &list_;
  }

 private:
  std::string text_;  // empty: nothing kept
  ParamList list_;
};

}  // namespace wt::plugins
