// -o's formats: the names it takes, and YAML that reads back as the JSON document it came from
// (types kept: a string that YAML would read as a number, a boolean, null or a date is quoted).
#include "ctl/cli_output.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>

namespace nodelet::ctl {
namespace {

// The YAML 1.2 core schema's reading of a node, as a JSON value: a quoted scalar is a string, a
// plain one null, a boolean, an integer, a float or else a string.
nlohmann::json FromYaml(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = FromYaml(kv.second);
    return o;
  }
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& item : n) a.push_back(FromYaml(item));
    return a;
  }
  if (n.IsNull()) return nullptr;
  const std::string s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  if (s == "true" || s == "false") return s == "true";
  if (auto j = nlohmann::json::parse(s, nullptr, false); !j.is_discarded() && j.is_number()) {
    return j;
  }
  return s;
}

TEST(CliOutputTest, OutputFormatsAreTheFiveKnownOnes) {
  EXPECT_EQ(*ParseOutputFormat(""), OutputFormat::kTable);
  EXPECT_EQ(*ParseOutputFormat("wide"), OutputFormat::kWide);
  EXPECT_EQ(*ParseOutputFormat("json"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("yaml"), OutputFormat::kYaml);
  EXPECT_EQ(*ParseOutputFormat("name"), OutputFormat::kName);
  auto bad = ParseOutputFormat("JSON");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown output format 'JSON' (known: json, yaml, wide, name)");
}

TEST(CliOutputTest, YamlIsKubectlsBlockStyle) {
  const auto doc = nlohmann::json::parse(R"({"apiVersion": "v1", "kind": "Pod",
      "metadata": {"name": "web", "labels": {"app": "web"}},
      "spec": {"containers": [{"name": "app", "args": ["sleep", "3600"]}], "volumes": []},
      "status": {"phase": "Running", "restarts": 3, "ready": true, "ip": null}})");
  EXPECT_EQ(YamlText(doc),
            "apiVersion: v1\n"
            "kind: Pod\n"
            "metadata:\n"
            "  labels:\n"
            "    app: web\n"
            "  name: web\n"
            "spec:\n"
            "  containers:\n"
            "  - args:\n"
            "    - sleep\n"
            "    - \"3600\"\n"
            "    name: app\n"
            "  volumes: []\n"
            "status:\n"
            "  ip: null\n"
            "  phase: Running\n"
            "  ready: true\n"
            "  restarts: 3\n");
  EXPECT_EQ(YamlText(nlohmann::json::array({nlohmann::json::array({1, 2}), "a"})),
            "- - 1\n  - 2\n- a\n");
  EXPECT_EQ(YamlText(nlohmann::json::object()), "{}\n");
}

TEST(CliOutputTest, EveryStringReadsBackAsItself) {
  nlohmann::json doc = nlohmann::json::object();
  const std::vector<std::string> hostile = {"",
                                            " ",
                                            "true",
                                            "False",
                                            "yes",
                                            "NO",
                                            "on",
                                            "y",
                                            "~",
                                            "null",
                                            "Null",
                                            "1",
                                            "-1",
                                            "0x1F",
                                            "1e3",
                                            ".5",
                                            ".inf",
                                            "-.Inf",
                                            ".NaN",
                                            "2026-11-29",
                                            "2026-11-29T07:38:30Z",
                                            "1:30",
                                            "a: b",
                                            "a #b",
                                            "#x",
                                            "- x",
                                            "-",
                                            "? x",
                                            "[1]",
                                            "{a: 1}",
                                            "*ref",
                                            "&anchor",
                                            "!tag",
                                            "|",
                                            ">",
                                            "'q'",
                                            "\"q\"",
                                            "%x",
                                            "@x",
                                            "`x`",
                                            "a\nb",
                                            "tab\there",
                                            " lead",
                                            "trail ",
                                            "\x1b[2J",
                                            "\r",
                                            "\x7f",
                                            "\xc2\x85",
                                            "\xe2\x80\xa8",
                                            "\xef\xbb\xbf",
                                            "caf\xc3\xa9",
                                            "\xf0\x9f\x98\x80",
                                            "back\\slash",
                                            "=",
                                            "<none>",
                                            "Running (2m ago)",
                                            "1/2"};
  for (size_t i = 0; i < hostile.size(); ++i) {
    doc["k" + std::to_string(i)] = hostile[i];
    doc[hostile[i].empty() ? "empty" : hostile[i]] = static_cast<int>(i);
  }
  doc["list"] = hostile;
  doc["numbers"] = {0, -3, 2.5, 1e300};
  doc["flags"] = {true, false, nullptr};
  const std::string text = YamlText(doc);
  YAML::Node back;
  ASSERT_NO_THROW(back = YAML::Load(text)) << text;
  EXPECT_EQ(FromYaml(back), doc) << text;
  // Nothing a terminal acts on is written raw.
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_TRUE(u >= 0x20 || c == '\n') << "raw control byte " << static_cast<int>(u);
    EXPECT_NE(u, 0x7f);
  }
}

TEST(CliOutputTest, BytesThatAreNotUtf8BecomeTheReplacementCharacter) {
  const std::string text = YamlText({{"message", std::string("ok\xff\xfe")}});
  EXPECT_EQ(text, "message: \"ok\xEF\xBF\xBD\xEF\xBF\xBD\"\n");
}

}  // namespace
}  // namespace nodelet::ctl
