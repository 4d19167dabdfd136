#include "lib/pod/quantity.h"

#include <gtest/gtest.h>

#include <limits>

namespace nodelet::pod {
namespace {

struct Good {
  const char* text;
  int64_t milli;
  int64_t value;
};

TEST(QuantityTest, ParsesGoodQuantities) {
  const Good kGood[] = {
      {"100m", 100, 1},
      {"0.5", 500, 1},
      {"1", 1000, 1},
      {"0", 0, 0},
      {"64Mi", 64LL * 1024 * 1024 * 1000, 64LL * 1024 * 1024},
      {"1Gi", 1073741824000LL, 1073741824LL},
      {"1G", 1000000000000LL, 1000000000LL},
      {"1e3", 1000000, 1000},
      {"1E3", 1000000, 1000},
      {"1e+3", 1000000, 1000},
      {"1e-3", 1, 1},
      {"500k", 500000000, 500000},
      {"1.5Gi", 1610612736000LL, 1610612736LL},
      {"0.1Ki", 102400, 103},  // 102.4 bytes: Value rounds up
      {"1Ki", 1024000, 1024},
      {"2Ti", 2LL * 1099511627776LL * 1000, 2LL * 1099511627776LL},
      {"1Ei", std::numeric_limits<int64_t>::max(), 1LL << 60},  // milli saturates
      {"1E", std::numeric_limits<int64_t>::max(), 1000000000000000000LL},
      {"+5", 5000, 5},
      {"-5m", -5, -1},
      {".5", 500, 1},
      {"5.", 5000, 5},
      {"00010", 10000, 10},
      {"1n", 1, 1},
      {"1u", 1, 1},
      {"1500u", 2, 1},
      {"0.0000000001", 1, 1},  // below 1n: rounded up to 1n
      {"9223372036854775807", std::numeric_limits<int64_t>::max(),
       std::numeric_limits<int64_t>::max()},
      {"7Ei", std::numeric_limits<int64_t>::max(), 7LL << 60},
      {"12345678901234567890m", std::numeric_limits<int64_t>::max(), 12345678901234568LL},
  };
  for (const Good& g : kGood) {
    auto q = Quantity::Parse(g.text);
    ASSERT_TRUE(q.ok()) << g.text << ": " << q.status().ToString();
    EXPECT_EQ(q->MilliValue(), g.milli) << g.text;
    EXPECT_EQ(q->Value(), g.value) << g.text;
    EXPECT_EQ(q->text(), g.text);
  }
}

TEST(QuantityTest, ExactNanos) {
  EXPECT_EQ(Quantity::Parse("1n")->NanosString(), "1");
  EXPECT_EQ(Quantity::Parse("0.1Ki")->NanosString(), "102400000000");
  EXPECT_EQ(Quantity::Parse("1Ei")->NanosString(), "1152921504606846976000000000");
  EXPECT_EQ(Quantity::Parse("-1.5")->NanosString(), "-1500000000");
}

struct Bad {
  const char* text;
  const char* reason;  // a substring of the error
};

TEST(QuantityTest, RejectsBadQuantitiesWithAReason) {
  const std::string regex =
      "quantities must match the regular expression "
      "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
  const Bad kBad[] = {
      {"", "empty quantity"},
      {"12xyz", "cannot parse \"xyz\" after the number"},
      {"1kb", "cannot parse \"kb\""},
      {"abc", "no digits before \"abc\""},
      {".", "no digits"},
      {"+", "no digits"},
      {"Gi", "no digits before \"Gi\""},
      {"1 Gi", "cannot parse \" Gi\""},
      {"1.2.3", "cannot parse \".3\""},
      {"--1", "no digits"},
      {"1Mii", "unable to parse quantity's suffix \"Mii\""},
      {"1e", "unable to parse quantity's suffix \"e\""},
      {"1e+", "unable to parse quantity's suffix \"e+\""},
      {"1Gi5", "unable to parse quantity's suffix \"Gi5\""},
      {"1kk", "unable to parse quantity's suffix \"kk\""},
      {"1e1000", "too large"},
      {"9223372036854775808", "too large"},
      {"8Ei", "too large"},
      {"100000000000000000000000000000000000000000", "too large"},
      {"12\n", "cannot parse \"\\x0a\""},
  };
  for (const Bad& b : kBad) {
    auto q = Quantity::Parse(b.text);
    ASSERT_FALSE(q.ok()) << "accepted: " << b.text;
    EXPECT_NE(q.status().message().find(b.reason), std::string::npos)
        << b.text << " -> " << q.status().message();
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
  }
  // The format errors carry the API server's wording.
  EXPECT_EQ(Quantity::Parse("12xyz").status().message().rfind(regex, 0), 0u);
}

TEST(QuantityTest, HugeInputsStayBounded) {
  // Many digits with a huge negative exponent: rounds up to 1n, no overflow.
  std::string many(100000, '9');
  auto q = Quantity::Parse("0." + many + "e-999999999999");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->NanosString(), "1");
  EXPECT_FALSE(Quantity::Parse(many).ok());
  EXPECT_EQ(Quantity::Parse("0." + std::string(5000, '0') + "1")->NanosString(), "1");
}

TEST(QuantityTest, CompareByValue) {
  EXPECT_EQ(Quantity::Parse("1000m")->Compare(*Quantity::Parse("1")), 0);
  EXPECT_LT(Quantity::Parse("999m")->Compare(*Quantity::Parse("1")), 0);
  EXPECT_GT(Quantity::Parse("1Ki")->Compare(*Quantity::Parse("1k")), 0);
  EXPECT_NE(*Quantity::Parse("1000m"), *Quantity::Parse("1"));  // text differs
  EXPECT_TRUE(Quantity::Parse("-0")->IsZero());
  EXPECT_TRUE(Quantity::Parse("-1m")->IsNegative());
}

TEST(QuantityTest, Builders) {
  EXPECT_EQ(Quantity::FromMilli(1500).text(), "1500m");
  EXPECT_EQ(Quantity::FromMilli(2000).text(), "2");
  EXPECT_EQ(Quantity::FromMilli(1500).MilliValue(), 1500);
  EXPECT_EQ(Quantity::FromValue(1024).Value(), 1024);
  EXPECT_EQ(Quantity().text(), "0");
  EXPECT_TRUE(Quantity().IsZero());
}

}  // namespace
}  // namespace nodelet::pod
