// nodeletctl's one grammar on the real binary, against a real nodelet (its services running,
// no runtime): global flags before or after the subcommand and from NODELET_RUN_DIR, -o on the
// listing commands, the exit-code table of ctl/cli_output.h (docs/nodeletctl.md), one error
// prefix, and `version` while nodelet is down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

CommandResult Nodeletctl(std::vector<std::string> args, std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(BinDir() + "/nodeletctl");
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, 15s);
}

// Every line of `output` that is an error starts with the one prefix (no "Error:", "error:").
void ExpectOnePrefix(const CommandResult& r) {
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_THAT(line, ::testing::Not(::testing::ContainsRegex("^(Error|error|ERROR)"))) << r.output;
  }
}

TEST(CtlGrammarTest, WithoutNodeletUsageAndUnreachableHaveTheirCodesAndOnePrefix) {
  TempDir dir;
  const std::string run = dir.Sub("run");
  std::filesystem::create_directories(run);

  // version: the client's line whatever happens; 4 when nodelet is not there.
  auto version = Nodeletctl({"--run-dir", run, "version"});
  EXPECT_EQ(version.exit_code, 4) << version.output;
  EXPECT_THAT(version.output, StartsWith("Client Version: "));
  EXPECT_THAT(version.output, HasSubstr("nodeletctl: nodelet is not running"));
  auto client = Nodeletctl({"version", "--client", "--run-dir", run});
  EXPECT_EQ(client.exit_code, 0) << client.output;
  EXPECT_THAT(client.output, StartsWith("Client Version: "));
  EXPECT_THAT(client.output, ::testing::Not(HasSubstr("Server")));

  // The run directory before the subcommand, after it, and from the environment.
  const std::string unreachable = "cannot reach nodelet at " + run + "/ctl.sock";
  for (const auto& r :
       {Nodeletctl({"--run-dir", run, "status"}), Nodeletctl({"status", "--run-dir", run}),
        Nodeletctl({"status", "--run-dir=" + run}),
        Nodeletctl({"status"}, {"NODELET_RUN_DIR=" + run})}) {
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_THAT(r.output, StartsWith("nodeletctl: "));
    EXPECT_THAT(r.output, HasSubstr(unreachable));
  }
  // The flag wins over the environment.
  auto both = Nodeletctl({"status", "--run-dir", run}, {"NODELET_RUN_DIR=/nonexistent"});
  EXPECT_THAT(both.output, HasSubstr(unreachable));

  // 4 for each service nodeletctl asks directly, too.
  for (const auto& r :
       {Nodeletctl({"pods", "--timeout", "500", "--run-dir", run}),
        Nodeletctl({"pod", "web", "--timeout", "500", "--run-dir", run}),
        Nodeletctl({"volumes", "--run-dir", run}), Nodeletctl({"manifests", "--run-dir", run}),
        Nodeletctl({"top", "pods", "--run-dir", run}),
        Nodeletctl({"logs", "web", "--run-dir", run})}) {
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_THAT(r.output, StartsWith("nodeletctl: "));
    ExpectOnePrefix(r);
  }

  // 2: usage, before anything is asked.
  for (const auto& r : {Nodeletctl({"--run-dir", run, "nosuchcommand"}),
                        Nodeletctl({"status", "--bogus", "--run-dir", run}),
                        Nodeletctl({"pods", "-o", "xml", "--run-dir", run}),
                        Nodeletctl({"status", "-o", "table", "--run-dir", run}),
                        Nodeletctl({"status", "--json", "-o", "yaml", "--run-dir", run}),
                        Nodeletctl({"pods", "-A", "-n", "kube-system", "--run-dir", run}),
                        Nodeletctl({"pods", "-w", "-o", "json", "--run-dir", run}),
                        Nodeletctl({"logs", "web", "--since", "soon", "--run-dir", run}),
                        Nodeletctl({"restart", "--run-dir", run})}) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, StartsWith("nodeletctl: "));
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("cannot reach"))) << "nothing was asked";
  }
  auto format = Nodeletctl({"pods", "-o", "xml", "--run-dir", run});
  EXPECT_THAT(format.output,
              HasSubstr("unknown output format 'xml' (known: json, yaml, wide, name)"));
}

class CtlGrammarNodeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string manifests = dir_.Sub("manifests");
    std::filesystem::create_directories(manifests);
    // A manifest that validation refuses: `manifests` exits 1.
    std::ofstream(manifests + "/bad.yaml")
        << "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n"
           "  - name: app\n    image: nodelet.local/busybox:1.0\n    ports:\n"
           "    - containerPort: 0\n";
    nodelet_ = std::make_unique<Subprocess>(
        std::vector<std::string>{BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir",
                                 dir_.Sub("run"), "--log-dir", dir_.Sub("log"),
                                 "--runtime-endpoint", "unix://" + dir_.Sub("no-runtime.sock"),
                                 "--failing-grace", "1h", "--cgroup-root",
                                 TestCgroupRoot(dir_.path()), "--pod-manifest-path", manifests,
                                 "--node-name", "testnode"},
        std::map<std::string, std::string>{{"NOTIFY_SOCKET", notify_.path()}},
        dir_.Sub("nodelet.log"));
    // READY=1: every service RUNNING.
    ASSERT_TRUE(notify_.WaitFor("READY=1", 30s)) << ReadTextFile(dir_.Sub("nodelet.log"));
  }
  CommandResult Ctl(std::vector<std::string> args) {
    args.push_back("--run-dir");
    args.push_back(dir_.Sub("run"));
    return Nodeletctl(args);
  }

  TempDir dir_;
  NotifyListener notify_{dir_.Sub("notify.sock")};
  std::unique_ptr<Subprocess> nodelet_;
};

TEST_F(CtlGrammarNodeletTest, ExitCodesOutputFormatsAndNamespaces) {
  // -o on the listing commands: json and yaml carry the same document; name one per line.
  auto json = Ctl({"status", "-o", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  auto doc = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_TRUE(doc.is_array()) << json.output;
  auto yaml = Ctl({"status", "-o", "yaml"});
  EXPECT_EQ(yaml.exit_code, 0);
  for (const auto& s : doc) {
    EXPECT_THAT(yaml.output, HasSubstr("\n  name: " + s["name"].get<std::string>() + "\n"));
  }
  auto names = Ctl({"status", "-o", "name"});
  EXPECT_EQ(names.output, "plegd\nstatusd\nvolumed\npodworkerd\n");
  auto wide = Ctl({"status", "-o", "wide"});
  EXPECT_THAT(wide.output, ::testing::ContainsRegex("plegd +RUNNING +0 +"));

  // Pods of every namespace by default, with NAMESPACE first; -n drops it.
  auto pods = Ctl({"pods", "-A"});
  EXPECT_EQ(pods.exit_code, 0) << pods.output;
  auto listed = Ctl({"pods", "-o", "yaml"});
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("kind: PodList\n"));
  EXPECT_EQ(Ctl({"events", "-o", "json"}).exit_code, 0);
  EXPECT_EQ(Ctl({"node", "-o", "name"}).output, "node/testnode\n");
  auto node_yaml = Ctl({"node", "-o", "yaml"});
  EXPECT_THAT(node_yaml.output, HasSubstr("kind: Node\n"));
  EXPECT_THAT(node_yaml.output, HasSubstr("\n  name: testnode\n"));

  // 1: done, and refused; 4: the name is unknown.
  auto manifests = Ctl({"manifests", "-o", "name"});
  EXPECT_EQ(manifests.exit_code, 1) << manifests.output;
  EXPECT_THAT(manifests.output, HasSubstr("/bad.yaml\n"));
  for (const auto& r :
       {Ctl({"pod", "nosuch"}), Ctl({"logs", "nosuch"}), Ctl({"events", "nosuch"}),
        Ctl({"restart", "nosuch"}), Ctl({"tail", "nosuch"}), Ctl({"pid", "nosuch"})}) {
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_THAT(r.output, HasSubstr("nosuch"));
    ExpectOnePrefix(r);
  }
  // 3: a service not RUNNING; 0 again once it is.
  ASSERT_EQ(Ctl({"stop", "volumed"}).exit_code, 0);
  auto stopped = Ctl({"status"});
  EXPECT_EQ(stopped.exit_code, 3) << stopped.output;
  EXPECT_EQ(Ctl({"start", "volumed"}).exit_code, 0);
  EXPECT_EQ(Ctl({"status", "volumed"}).exit_code, 0);
  // version: both lines.
  auto version = Ctl({"version"});
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_THAT(version.output,
              ::testing::ContainsRegex("^Client Version: .+\nServer Version: .+\n$"));
}

// The bash completion offers only what the binary takes: each command it lists is in
// `nodeletctl --help`, and each flag it offers a command is in that command's --help.
TEST(CtlGrammarTest, BashCompletionOffersWhatTheBinaryTakes) {
  const char* source = std::getenv("NODELET_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "NODELET_SOURCE_DIR is not set (run through meson test)";
  const std::string text = ReadTextFile(std::string(source) + "/deploy/nodeletctl.bash-completion");
  ASSERT_FALSE(text.empty());
  auto words = [](const std::string& list) {
    std::vector<std::string> out;
    std::istringstream in(list);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  // Whether `flag` appears in `help` as a whole word.
  auto offers = [](const std::string& help, const std::string& flag) {
    for (size_t at = help.find(flag); at != std::string::npos; at = help.find(flag, at + 1)) {
      const char next = at + flag.size() < help.size() ? help[at + flag.size()] : ' ';
      if (!std::isalnum(static_cast<unsigned char>(next)) && next != '-') return true;
    }
    return false;
  };
  const size_t list_at = text.find("local commands=\"");
  ASSERT_NE(list_at, std::string::npos);
  const size_t list_start = list_at + std::string("local commands=\"").size();
  const auto commands = words(text.substr(list_start, text.find('"', list_start) - list_start));
  EXPECT_GE(commands.size(), 20u);
  const std::string top_help = Nodeletctl({"--help"}).output;
  for (const auto& c : commands) EXPECT_TRUE(offers(top_help, c)) << c;

  // Each "    CMD|CMD) flags+=\" ... \"" of the completion (a list may span lines), and fleet's
  // "      flags+=..." and "        SUB) flags+=...".
  const std::regex entry(R"re(\n    ([a-z|-]+)\) flags\+="([^"]*)")re");
  const std::regex fleet(R"re(\n    fleet\)\n      flags\+="([^"]*)")re");
  const std::regex fleet_sub(R"re(\n        ([a-z]+)\) flags\+="([^"]*)")re");
  std::vector<std::pair<std::vector<std::string>, std::string>> lists;  // command line, flags
  for (auto m = std::sregex_iterator(text.begin(), text.end(), entry); m != std::sregex_iterator();
       ++m) {
    std::string names = (*m)[1].str();
    std::replace(names.begin(), names.end(), '|', ' ');
    for (const auto& c : words(names)) lists.push_back({{c}, (*m)[2].str()});
  }
  std::smatch own;
  ASSERT_TRUE(std::regex_search(text, own, fleet));
  lists.push_back({{"fleet"}, own[1].str()});
  for (auto m = std::sregex_iterator(text.begin(), text.end(), fleet_sub);
       m != std::sregex_iterator(); ++m) {
    lists.push_back({{"fleet", (*m)[1].str()}, (*m)[2].str()});
  }
  size_t checked = 0;
  for (const auto& [command, list] : lists) {
    const std::string c = command.size() == 1 ? command[0] : command[0] + " " + command[1];
    {
      std::vector<std::string> argv = command;
      argv.push_back("--help");
      const std::string help = Nodeletctl(argv).output;
      for (const auto& f : words(list)) {
        // --run-dir and --help are nodeletctl's own, taken anywhere.
        EXPECT_TRUE(offers(help, f) || offers(top_help, f))
            << "nodeletctl " << c << " has no " << f << ":\n"
            << help;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 50u);
}

}  // namespace
}  // namespace nodelet::testing
