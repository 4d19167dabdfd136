// Container text is data, never structure, on the real processes and a real containerd: a
// container that writes bytes that are not UTF-8 and terminal escape sequences (OSC, CSI, a C1
// control) to /dev/termination-log and exits. /pods must answer valid UTF-8 JSON (the supervisor
// used to abort on such bytes), the supervisor must still run, and `nodeletctl pod NAME` (its
// human output and its JSON) must hold no raw ESC, BEL or C1 control.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "lib/common/utf8.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;

// Invalid bytes (0xFF 0xFE, a lone continuation byte, a sequence cut short at the end), an OSC
// that sets the terminal's title, a screen clear, and CSI as the C1 character U+009B.
constexpr char kNoisyScript[] =
    "      printf 'bad \\377\\376 lone \\200 osc \\033]0;pwned\\007 clear \\033[2J "
    "c1 \\302\\2332J end \\342\\202' > /dev/termination-log\n"
    "      exit 1\n";

std::string NoisyPodYaml() {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: noisy\nspec:\n  hostNetwork: true\n"
         "  restartPolicy: Never\n  terminationGracePeriodSeconds: 2\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command:\n    - sh\n    - -c\n    - |\n" +
         std::string(kNoisyScript);
}

// The terminated message of the pod's container in a v1 Pod object ("" while there is none).
std::string TerminatedMessage(const nlohmann::json& pod) {
  if (!pod.is_object() || !pod.contains("status")) return "";
  const auto& st = pod["status"];
  if (!st.contains("containerStatuses")) return "";
  for (const auto& c : st["containerStatuses"]) {
    if (c.contains("state") && c["state"].contains("terminated")) {
      return c["state"]["terminated"].value("message", "");
    }
  }
  return "";
}

// A raw terminal control in `text`: ESC, BEL, CR, or a C1 control as a UTF-8 character.
bool HasRawControl(const std::string& text) {
  if (text.find_first_of("\x1b\x07\r") != std::string::npos) return true;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const auto a = static_cast<unsigned char>(text[i]);
    const auto b = static_cast<unsigned char>(text[i + 1]);
    if (a == 0xC2 && b >= 0x80 && b <= 0x9F) return true;
  }
  return false;
}

class ContainerTextE2eTest : public NodeletTest {};

TEST_F(ContainerTextE2eTest, TerminationMessageBytesNeverBreakPodsOrTheTerminal) {
  const int port = FreeLoopbackPort();
  Write("noisy.yaml", NoisyPodYaml());
  StartNodelet({"--http-address", "127.0.0.1:" + std::to_string(port)});
  if (HasFatalFailure()) return;

  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(2s);
  http.set_read_timeout(5s);
  // /pods is asked until the message is there: each ask is a chance for the old abort.
  std::string body;
  std::string message;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = http.Get("/pods");
        if (!r || r->status != 200) return false;
        body = r->body;
        auto list = nlohmann::json::parse(body, nullptr, false);
        if (list.is_discarded() || !list.contains("items")) return false;
        for (const auto& p : list["items"]) {
          if (p["metadata"].value("name", "") == "noisy-node1") message = TerminatedMessage(p);
        }
        return !message.empty();
      },
      60s))
      << "GET /pods never showed the termination message; supervisor alive: "
      << ProcessAlive(nodelet_->pid()) << "\n"
      << body;
  EXPECT_TRUE(IsValidUtf8(body)) << "GET /pods must answer valid UTF-8";
  EXPECT_NE(message.find("bad \xEF\xBF\xBD"), std::string::npos)
      << "invalid bytes are replaced by U+FFFD: " << message;
  EXPECT_NE(message.find("osc \x1b]0;pwned\x07"), std::string::npos)
      << "JSON carries the text as it is (escaped by the encoder): " << message;

  // The supervisor answered and is still there.
  auto healthz = http.Get("/healthz");
  EXPECT_TRUE(healthz && healthz->status == 200);
  EXPECT_TRUE(ProcessAlive(nodelet_->pid())) << "the supervisor must survive the pod's bytes";

  // The operator's terminal: `nodeletctl pod NAME`, the human output and -o json.
  const std::string ctl = BinDir() + "/nodeletctl";
  auto human = RunCommand({ctl, "--run-dir", dir_.Sub("run"), "pod", "noisy-node1"}, 10s);
  EXPECT_EQ(human.exit_code, 0) << human.output;
  EXPECT_NE(human.output.find("Message:"), std::string::npos) << human.output;
  EXPECT_FALSE(HasRawControl(human.output)) << human.output;
  EXPECT_TRUE(IsValidUtf8(human.output));
  EXPECT_NE(human.output.find("osc ^[]0;pwned\\u0007 clear ^[[2J c1 \\u009b2J"), std::string::npos)
      << "the controls show as text: " << human.output;

  auto json =
      RunCommand({ctl, "--run-dir", dir_.Sub("run"), "pod", "noisy-node1", "-o", "json"}, 10s);
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_FALSE(HasRawControl(json.output)) << json.output;
  auto pod = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_FALSE(pod.is_discarded()) << "the escaped JSON stays JSON: " << json.output;
  EXPECT_EQ(TerminatedMessage(pod), message) << "and means the same";

  // -o yaml: the controls are YAML escapes inside a quoted string, never raw bytes.
  auto yaml =
      RunCommand({ctl, "--run-dir", dir_.Sub("run"), "pod", "noisy-node1", "-o", "yaml"}, 10s);
  EXPECT_EQ(yaml.exit_code, 0) << yaml.output;
  EXPECT_FALSE(HasRawControl(yaml.output)) << yaml.output;
  EXPECT_TRUE(IsValidUtf8(yaml.output));
  EXPECT_NE(yaml.output.find("osc \\x1B]0;pwned\\x07 clear \\x1B[2J c1 \\x9B2J"), std::string::npos)
      << yaml.output;
}

}  // namespace
}  // namespace nodelet::testing
