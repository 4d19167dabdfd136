// ParseGoDuration is Go's time.ParseDuration; ParseDuration, what every flag takes, is that
// without negatives, in whole milliseconds.
#include "lib/common/duration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace nodelet {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::chrono::nanoseconds Go(const std::string& text) {
  auto d = ParseGoDuration(text);
  EXPECT_TRUE(d.ok()) << text << ": " << d.status().message();
  return d.ok() ? *d : std::chrono::nanoseconds(-42);
}

std::string GoError(const std::string& text) {
  auto d = ParseGoDuration(text);
  EXPECT_FALSE(d.ok()) << text << " parsed as " << d->count() << "ns";
  return d.ok() ? "" : d.status().message();
}

TEST(DurationTest, TakesGosGrammar) {
  // Go's own test table (time_test.go, parseDurationTests), the valid half.
  EXPECT_EQ(Go("0"), 0ns);
  EXPECT_EQ(Go("5s"), 5s);
  EXPECT_EQ(Go("30s"), 30s);
  EXPECT_EQ(Go("1478s"), 1478s);
  EXPECT_EQ(Go("-5s"), -5s);
  EXPECT_EQ(Go("+5s"), 5s);
  EXPECT_EQ(Go("-0"), 0ns);
  EXPECT_EQ(Go("+0"), 0ns);
  EXPECT_EQ(Go("5.0s"), 5s);
  EXPECT_EQ(Go("5.6s"), 5600ms);
  EXPECT_EQ(Go("5.s"), 5s);
  EXPECT_EQ(Go(".5s"), 500ms);
  EXPECT_EQ(Go("1.0s"), 1s);
  EXPECT_EQ(Go("1.00s"), 1s);
  EXPECT_EQ(Go("1.004s"), 1004ms);
  EXPECT_EQ(Go("1.0040s"), 1004ms);
  EXPECT_EQ(Go("100.00100s"), 100001ms);
  EXPECT_EQ(Go("10ns"), 10ns);
  EXPECT_EQ(Go("11us"), 11us);
  EXPECT_EQ(Go("12\xC2\xB5s"), 12us);  // U+00B5
  EXPECT_EQ(Go("12\xCE\xBCs"), 12us);  // U+03BC
  EXPECT_EQ(Go("13ms"), 13ms);
  EXPECT_EQ(Go("14s"), 14s);
  EXPECT_EQ(Go("15m"), 15min);
  EXPECT_EQ(Go("16h"), 16h);
  EXPECT_EQ(Go("3h30m"), 3h + 30min);
  EXPECT_EQ(Go("10.5s4m"), 4min + 10500ms);
  EXPECT_EQ(Go("-2m3.4s"), -(2min + 3400ms));
  EXPECT_EQ(Go("1h2m3s4ms5us6ns"), 1h + 2min + 3s + 4ms + 5us + 6ns);
  EXPECT_EQ(Go("39h9m14.425s"), 39h + 9min + 14425ms);
  EXPECT_EQ(Go("52763797000ns"), 52763797000ns);
  EXPECT_EQ(Go("0.3333333333333333333h"), 20min);
  EXPECT_EQ(Go("9007199254740993ns"), std::chrono::nanoseconds((int64_t{1} << 53) + 1));
  EXPECT_EQ(Go("9223372036854775807ns"), std::chrono::nanoseconds(INT64_MAX));
  EXPECT_EQ(Go("9223372036854775.807us"), std::chrono::nanoseconds(INT64_MAX));
  EXPECT_EQ(Go("-9223372036854775808ns"), std::chrono::nanoseconds(INT64_MIN));
  EXPECT_EQ(Go("0.100000000000000000000h"), 6min);
  EXPECT_EQ(Go("0.830103483285477580700h"), 49min + 48s + 372539827ns);
  // What the kubelet's flags and this project's examples write.
  EXPECT_EQ(Go("1m30s"), 90s);
  EXPECT_EQ(Go("1h2m3.5s"), 1h + 2min + 3500ms);
  EXPECT_EQ(Go("300ms"), 300ms);
  EXPECT_EQ(Go("1.5h"), 90min);
}

TEST(DurationTest, RefusesWhatGoRefusesNamingWhy) {
  for (const char* bad : {"", "3", "-", "s", ".", "-.", ".s", "+.s", "1d",
                          "\xE2\x80\x9C"
                          "1s",
                          "1s\xE2\x80\x9D", "1x", "1 s", " 1s", "1s ", "1.2.3s", "1sm"}) {
    GoError(bad);
  }
  EXPECT_THAT(GoError("1x"), HasSubstr("unknown unit 'x'"));
  EXPECT_THAT(GoError("1d"), HasSubstr("unknown unit 'd'"));
  EXPECT_THAT(GoError("500"), HasSubstr("unit is missing"));
  EXPECT_THAT(GoError("1m30"), HasSubstr("unit is missing"));
  // Out of int64 nanoseconds, as Go: in the integer, the product, the fraction's sum, the total.
  EXPECT_THAT(GoError("9223372036854775808ns"), HasSubstr("too large"));
  EXPECT_THAT(GoError("9223372036854775.808us"), HasSubstr("too large"));
  EXPECT_THAT(GoError("9223372036854ms775us808ns"), HasSubstr("too large"));
  EXPECT_THAT(GoError("-9223372036854775809ns"), HasSubstr("too large"));
  EXPECT_THAT(GoError("3000000h"), HasSubstr("too large"));
  EXPECT_THAT(GoError("99999999999999999999s"), HasSubstr("too large"));
}

TEST(DurationTest, FlagsTakeNoNegativeAndCountWholeMilliseconds) {
  EXPECT_EQ(*ParseDuration("1m30s"), 90s);
  EXPECT_EQ(*ParseDuration("1h2m3.5s"), 1h + 2min + 3500ms);
  EXPECT_EQ(*ParseDuration("300ms"), 300ms);
  EXPECT_EQ(*ParseDuration("1.5h"), 90min);
  EXPECT_EQ(*ParseDuration("0"), 0ms);
  EXPECT_EQ(*ParseDuration("-0s"), 0ms);
  // A positive duration never becomes 0 ("never" to several flags): rounded up.
  EXPECT_EQ(*ParseDuration("300us"), 1ms);
  EXPECT_EQ(*ParseDuration("1500us"), 2ms);
  auto negative = ParseDuration("-1s");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("'-1s' is negative"));
  auto unit = ParseDuration("1x");
  ASSERT_FALSE(unit.ok());
  EXPECT_THAT(unit.status().message(), HasSubstr("unknown unit 'x'"));
  auto bare = ParseDuration("1000");
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.status().message(), HasSubstr("unit is missing"));
  EXPECT_FALSE(ParseDuration("99999999999999999999s").ok());
}

}  // namespace
}  // namespace nodelet
