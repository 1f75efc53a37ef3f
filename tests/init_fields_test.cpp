// <wt/wt_init_fields.h>, the strict init-info reader for plugins in C (compiled here as C++; the
// installed-package test compiles it as C99 in a plugin): what it accepts, every refusal with the
// field it names, and the bounds that keep hostile input from costing more than its length.
#include <wt/wt_init_fields.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

using ::testing::HasSubstr;

namespace {

struct Parsed {
  wt_status status = WT_OK;
  std::string error, field;
  int64_t rank = -1;
  int verbose = -1;
  std::string label;
};

// The reader as a plugin uses it: rank (required, 0..65535), verbose (optional), label (optional,
// up to 15 bytes).
Parsed read(const std::string& json) {
  Parsed out;
  wt_fields f;
  char err[512] = "unset", field[64] = "unset", label[16] = "";
  if (wt_fields_parse(&f, json.c_str(), "init_info for backend 'mine'", err, sizeof err, field,
                      sizeof field) == WT_OK) {
    wt_fields_int(&f, "rank", WT_FIELD_REQUIRED, 0, 65535, &out.rank);
    wt_fields_bool(&f, "verbose", WT_FIELD_OPTIONAL, &out.verbose);
    wt_fields_string(&f, "label", WT_FIELD_OPTIONAL, label, sizeof label);
  }
  out.status = wt_fields_finish(&f);
  out.error = err;
  out.field = field;
  out.label = label;
  return out;
}

void expect_refused(const std::string& json, const std::string& field, const std::string& says) {
  Parsed p = read(json);
  EXPECT_EQ(p.status, WT_ERR_INVALID_ARGUMENT) << json;
  EXPECT_EQ(p.field, field) << json;
  EXPECT_THAT(p.error, HasSubstr("invalid init_info for backend 'mine': " + says)) << json;
}

TEST(InitFields, ReadsEveryTypeAndIgnoresTheBackendKey) {
  Parsed p = read(R"( {"backend": "mine", "rank": 7, "verbose": true,
                       "label": "a\"b\\c\u00e9\ud83d\ude00"} )");
  ASSERT_EQ(p.status, WT_OK) << p.error;
  EXPECT_EQ(p.rank, 7);
  EXPECT_EQ(p.verbose, 1);
  EXPECT_EQ(p.label, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(p.field, "") << "a parse that succeeds leaves field empty";
  Parsed defaults = read(R"({"rank": 0})");
  ASSERT_EQ(defaults.status, WT_OK);
  EXPECT_EQ(defaults.verbose, -1) << "an optional field that is absent is left as it was";
}

TEST(InitFields, EachRefusalNamesItsField) {
  expect_refused(R"({"rank": 1, "rnak": 2})", "rnak", "unknown field 'rnak'");
  expect_refused(R"({"verbose": true})", "rank", "missing field 'rank'");
  expect_refused(R"({"rank": "1"})", "rank", "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": 1.0})", "rank", "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": 1e3})", "rank", "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": -1})", "rank", "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": 65536})", "rank", "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": null})", "rank", "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": 99999999999999999999999})", "rank",
                 "field 'rank' must be an integer in 0..65535");
  expect_refused(R"({"rank": 1, "verbose": 1})", "verbose",
                 "field 'verbose' must be true or false");
  expect_refused(R"({"rank": 1, "label": 5})", "label", "field 'label' must be a string");
  expect_refused(R"({"rank": 1, "label": "0123456789abcdef"})", "label",
                 "field 'label' is longer than 15 bytes");
  expect_refused(R"({"rank": 1, "rank": 2})", "rank", "field 'rank' is given twice");
}

TEST(InitFields, MalformedJsonIsRefusedWithoutAField) {
  for (const char* bad : {"",
                          "[]",
                          "{",
                          "{\"rank\": 1",
                          "{\"rank\": 1,}",
                          "{\"rank\" 1}",
                          "{\"rank\": 1} x",
                          "{\"rank\": 01}",
                          "{\"rank\": -}",
                          "{\"rank\": tru}",
                          "{'rank': 1}",
                          "{\"rank\": 1}}",
                          "{\"a\": [1,]}",
                          "{\"a\": {\"b\"}}",
                          "{\"a\": \"\x01\"}",
                          "{\"a\": \"\\x\"}",
                          "{\"a\": \"\\ud800\"}",
                          "{\"a\": \"\\u0000\"}",
                          "{\"a\": \"\xc3\x28\"}",
                          "{\"a\": \"\xed\xa0\x80\"}",
                          "{\"a\": \"\xc0\xaf\"}"}) {
    Parsed p = read(bad);
    EXPECT_EQ(p.status, WT_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_THAT(p.error, HasSubstr("invalid init_info for backend 'mine': ")) << bad;
  }
}

TEST(InitFields, NestingIsBoundedWithoutRecursion) {
  const std::string deep =
      "{\"rank\": 1, \"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_refused(deep, "a", "field 'a' holds malformed JSON, or JSON nested deeper than 64 levels");
  const std::string ok =
      "{\"rank\": 1, \"a\": " + std::string(64, '[') + std::string(64, ']') + "}";
  wt_fields f;
  char err[256] = "";
  ASSERT_EQ(wt_fields_parse(&f, ok.c_str(), "x", err, sizeof err, nullptr, 0), WT_OK) << err;
  const char* text = nullptr;
  size_t len = 0;
  wt_json_kind kind = WT_JSON_NULL;
  ASSERT_EQ(wt_fields_raw(&f, "a", WT_FIELD_REQUIRED, &text, &len, &kind), 1);
  EXPECT_EQ(kind, WT_JSON_ARRAY);
  EXPECT_EQ(std::string(text, len), std::string(64, '[') + std::string(64, ']'));
  int64_t rank = 0;
  wt_fields_int(&f, "rank", WT_FIELD_REQUIRED, 0, 9, &rank);
  EXPECT_EQ(wt_fields_finish(&f), WT_OK);
}

TEST(InitFields, TheFirstErrorIsKeptAndLaterCallsDoNothing) {
  wt_fields f;
  char err[256] = "", field[32] = "";
  ASSERT_EQ(wt_fields_parse(&f, R"({"a": "x", "b": 1})", "y", err, sizeof err, field, sizeof field),
            WT_OK);
  int64_t v = 42;
  EXPECT_EQ(wt_fields_int(&f, "a", WT_FIELD_REQUIRED, 0, 1, &v), 0);
  EXPECT_EQ(wt_fields_int(&f, "b", WT_FIELD_REQUIRED, 0, 1, &v), 0) << "after an error: nothing";
  EXPECT_EQ(v, 42);
  EXPECT_EQ(wt_fields_finish(&f), WT_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(field, "a");
  EXPECT_STREQ(err, "invalid y: field 'a' must be an integer in 0..1");
}

TEST(InitFields, AStringThatDoesNotFitLeavesTheBufferAsItWas) {
  for (std::size_t cap : {std::size_t{0}, std::size_t{3}}) {
    wt_fields f;
    ASSERT_EQ(wt_fields_parse(&f, R"({"s": "abc"})", "x", nullptr, 0, nullptr, 0), WT_OK);
    char buf[8] = "keep";
    EXPECT_EQ(wt_fields_string(&f, "s", WT_FIELD_REQUIRED, buf, cap), 0) << cap;
    EXPECT_STREQ(buf, "keep") << "nothing written, cap " << cap;
    EXPECT_EQ(wt_fields_finish(&f), WT_ERR_INVALID_ARGUMENT);
  }
  wt_fields f;  // an empty string needs one byte too, and a null buffer fits nothing
  ASSERT_EQ(wt_fields_parse(&f, R"({"s": ""})", "x", nullptr, 0, nullptr, 0), WT_OK);
  EXPECT_EQ(wt_fields_string(&f, "s", WT_FIELD_REQUIRED, nullptr, 0), 0);
  EXPECT_EQ(wt_fields_finish(&f), WT_ERR_INVALID_ARGUMENT);
}

TEST(InitFields, BoundsOfSixtyFourBitIntegers) {
  wt_fields f;
  ASSERT_EQ(wt_fields_parse(&f, R"({"lo": -9223372036854775808, "hi": 9223372036854775807,
                                    "over": 9223372036854775808})",
                            "z", nullptr, 0, nullptr, 0),
            WT_OK);
  int64_t lo = 0, hi = 0, over = 0;
  EXPECT_EQ(wt_fields_int(&f, "lo", 1, INT64_MIN, INT64_MAX, &lo), 1);
  EXPECT_EQ(lo, INT64_MIN);
  EXPECT_EQ(wt_fields_int(&f, "hi", 1, INT64_MIN, INT64_MAX, &hi), 1);
  EXPECT_EQ(hi, INT64_MAX);
  EXPECT_EQ(wt_fields_int(&f, "over", 1, INT64_MIN, INT64_MAX, &over), 0);
  EXPECT_EQ(wt_fields_finish(&f), WT_ERR_INVALID_ARGUMENT);
}

TEST(InitFields, QuoteWritesAStringJsonReadsBack) {
  const std::string s = "tab\there \"quoted\" back\\slash \x01 caf\xc3\xa9";
  char out[128];
  const size_t n = wt_fields_quote(s.c_str(), out, sizeof out);
  EXPECT_EQ(n, std::string(out).size());
  EXPECT_EQ(nlohmann::json::parse(out).get<std::string>(), s);
  char small[4];
  EXPECT_EQ(wt_fields_quote("abcdef", small, sizeof small), 8u) << "the length it needs";
  EXPECT_STREQ(small, "\"ab") << "truncated, NUL-terminated";
}

}  // namespace
