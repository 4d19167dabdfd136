// nodelet's one RFC 3339 parser and formatter: whole seconds and nanoseconds, offsets, the
// malformed and out-of-range texts refused.
#include "lib/common/rfc3339.h"

#include <gtest/gtest.h>

namespace nodelet {
namespace {

TEST(Rfc3339Test, ParseAndFormat) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(1714564800), "2024-05-01T12:00:00Z");
  EXPECT_EQ(FormatRfc3339(951782400), "2000-02-29T00:00:00Z");
  EXPECT_EQ(FormatRfc3339Nano({1714564800, 500000000}), "2024-05-01T12:00:00.5Z");
  EXPECT_EQ(FormatRfc3339Nano({1714564800, 0}), "2024-05-01T12:00:00Z");
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00Z")->seconds, 1714564800);
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00.25Z")->nanos, 250000000);
  EXPECT_EQ(ParseRfc3339("2024-05-01T14:30:00+02:30")->seconds, 1714564800);
  EXPECT_EQ(ParseRfc3339("1969-12-31T23:59:59Z")->seconds, -1);
  for (const char* bad : {"", "2024-05-01", "2024-05-01T12:00:00", "2024-13-01T00:00:00Z",
                          "2023-02-29T00:00:00Z", "2024-05-01T12:00:00Zx", "2024-05-01T12:00:00.Z",
                          "2024-05-01T24:00:00Z", "2024-05-01T12:00:00+2:00"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST(Rfc3339Test, WholeSecondsAcrossTheYearsTheApiAllows) {
  EXPECT_EQ(FormatRfc3339(-1), "1969-12-31T23:59:59Z");
  EXPECT_EQ(FormatRfc3339(-62135596800), "0001-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(253402300799), "9999-12-31T23:59:59Z");
  for (int64_t s : {int64_t{-62135596800}, int64_t{-1}, int64_t{0}, int64_t{1714564800},
                    int64_t{253402300799}}) {
    auto back = ParseRfc3339(FormatRfc3339(s));
    ASSERT_TRUE(back.has_value()) << s;
    EXPECT_EQ(back->seconds, s);
    EXPECT_EQ(back->nanos, 0);
  }
}

TEST(Rfc3339Test, FractionsOffsetsAndLowerCase) {
  auto t = ParseRfc3339("2024-05-01t12:00:00.123456789z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->seconds, 1714564800);
  EXPECT_EQ(t->nanos, 123456789);
  EXPECT_EQ(ParseRfc3339("2024-05-01T12:00:00.1234567891Z")->nanos, 123456789)
      << "digits past the nanosecond are dropped";
  EXPECT_EQ(ParseRfc3339("2024-05-01T10:00:00-02:00")->seconds, 1714564800);
  EXPECT_EQ(FormatRfc3339Nano({1714564800, 123456789}), "2024-05-01T12:00:00.123456789Z");
  EXPECT_EQ(FormatRfc3339Nano({1714564800, 1000}), "2024-05-01T12:00:00.000001Z");
}

TEST(Rfc3339Test, NanosecondsHoldOnlyTheYears1678To2262) {
  EXPECT_EQ(ParseRfc3339Nanos("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T12:00:00.123456789Z"), 1714564800123456789);
  EXPECT_EQ(ParseRfc3339Nanos("1969-12-31T23:59:59.5Z"), -500000000);
  EXPECT_EQ(ParseRfc3339Nanos("0001-01-01T00:00:00Z"), std::nullopt);
  EXPECT_EQ(ParseRfc3339Nanos("2300-01-01T00:00:00Z"), std::nullopt);
  EXPECT_EQ(ParseRfc3339Nanos("not a time"), std::nullopt);
}

}  // namespace
}  // namespace nodelet
