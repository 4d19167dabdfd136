// The manifest decoder on whole files: several documents and the errors of one, YAML syntax
// errors, kinds and apiVersions, document markers and directives, the size, depth, alias and
// document limits, binary content, and how its messages name the file and the document. The
// fields of a pod are manifest_fields_test.cc's.
#include "lib/pod/manifest_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/harness.h"
#include "tests/unit/pod/manifest_parser_fixture.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

TEST(ManifestParserTest, SeveralDocumentsOneBadOthersGoOn) {
  std::string content = std::string("---\n") + testing::kMinimalPodYaml + "---\n# empty\n---\n" +
                        "apiVersion: v1\nkind: Pod\nmetadata: {name: two}\nspec:\n  containers:\n"
                        "  - name: c\n    image: busybox\n    ports: [{containerPort: abc}]\n" +
                        "---\n" + testing::kSmallPodJson + "\n...\n";
  auto r = Decode(content);
  EXPECT_EQ(r.documents, 3);
  ASSERT_EQ(r.pods.size(), 2u);
  EXPECT_EQ(r.pods[0].pod.metadata.name, "web");
  EXPECT_EQ(r.pods[0].document, 1);
  EXPECT_EQ(r.pods[1].pod.metadata.name, "api");
  EXPECT_EQ(r.pods[1].document, 3);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].document, 2);
  EXPECT_EQ(r.errors[0].message, std::string(kSource) +
                                     " (document 2): spec.containers[0].ports[0].containerPort: "
                                     "Invalid value: \"abc\": must be an integer");
}

TEST(ManifestParserTest, SyntaxErrorInOneDocumentNamesTheFileAndLine) {
  std::string content = std::string(testing::kMinimalPodYaml) +
                        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: [oops\n";
  auto r = Decode(content);
  ASSERT_EQ(r.pods.size(), 1u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, StartsWith(std::string(kSource) + " (document 2): line "));
  EXPECT_THAT(r.errors[0].message, HasSubstr("YAML syntax error"));
  // The line number counts from the top of the file.
  EXPECT_EQ(
      r.errors[0].message,
      std::string(kSource) +
          " (document 2): line 14, column 1: YAML syntax error: end of sequence flow not found");
}

TEST(ManifestParserTest, SyntaxErrorSingleDocument) {
  std::string msg = OnlyError(Decode("apiVersion: v1\nkind: Pod\nspec: {containers: [\n"));
  EXPECT_THAT(msg, StartsWith(std::string(kSource) + ": line "));
  EXPECT_THAT(msg, HasSubstr("YAML syntax error"));
}

TEST(ManifestParserTest, UnknownKindIsRejectedUnlessAccepted) {
  constexpr char kDeployment[] = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n";
  EXPECT_EQ(OnlyError(Decode(kDeployment)),
            std::string(kSource) +
                ": kind: Unsupported value: \"Deployment\": supported values: "
                "\"Pod\"");
  ParseOptions options;
  options.other_kinds = {"ConfigMap", "Secret"};
  std::string content = std::string(testing::kMinimalPodYaml) +
                        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: "
                        "prod}\ndata: {a: b}\n---\n" +
                        kDeployment;
  auto r = Decode(content, options);
  ASSERT_EQ(r.pods.size(), 1u);
  ASSERT_EQ(r.others.size(), 1u);
  EXPECT_EQ(r.others[0].kind, "ConfigMap");
  EXPECT_EQ(r.others[0].api_version, "v1");
  EXPECT_EQ(r.others[0].name, "cfg");
  EXPECT_EQ(r.others[0].namespace_name, "prod");
  EXPECT_EQ(r.others[0].document, 2);
  EXPECT_EQ(r.others[0].object["data"]["a"].Scalar(), "b");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, std::string(kSource) +
                                     " (document 3): kind: Unsupported value: \"Deployment\": "
                                     "supported values: \"Pod\", \"ConfigMap\", \"Secret\"");
}

TEST(ManifestParserTest, KindAndApiVersionChecks) {
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\nmetadata: {name: x}\n")),
            std::string(kSource) + ": kind: Required value");
  EXPECT_EQ(OnlyError(Decode("kind: Pod\nmetadata: {name: x}\n")),
            std::string(kSource) + ": apiVersion: Required value");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v2\nkind: Pod\nspec: {}\n")),
            std::string(kSource) +
                ": apiVersion: Unsupported value: \"v2\": supported values: "
                "\"v1\"");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")),
            std::string(kSource) + ": spec: Required value");
  EXPECT_EQ(OnlyError(Decode("- a\n- b\n")),
            std::string(kSource) + ": the document must be a mapping (an object), not a list");
  EXPECT_EQ(OnlyError(Decode("hello\n")),
            std::string(kSource) + ": the document must be a mapping (an object), not a scalar");
}

TEST(ManifestParserTest, EmptyContentHasNoDocuments) {
  for (const char* content : {"", "\n\n", "# only a comment\n", "---\n---\n"}) {
    auto r = Decode(content);
    EXPECT_TRUE(r.pods.empty() && r.errors.empty() && r.others.empty()) << content;
    EXPECT_EQ(r.documents, 0);
  }
}

TEST(ManifestParserTest, DirectivesBeforeTheFirstDocument) {
  auto r = Decode(std::string("%YAML 1.2\n---\n") + testing::kMinimalPodYaml);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.size(), 1u);
}

TEST(ManifestParserTest, DocumentEndMarkersAndDirectivesBetweenDocuments) {
  std::string content = std::string(testing::kMinimalPodYaml) + "...\n%YAML 1.2\n---\n" +
                        testing::kSmallPodJson + "\n...\n# trailing comment\n...\n";
  auto r = Decode(content);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  ASSERT_EQ(r.pods.size(), 2u);
  EXPECT_EQ(r.pods[1].pod.metadata.name, "api");
  // A document after "..." without "---" is a document of its own.
  r = Decode(std::string(testing::kMinimalPodYaml) + "...\n" + testing::kSmallPodJson);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.size(), 2u);
}

TEST(ManifestParserTest, ContentAfterAFlowDocumentIsAnErrorNotAHang) {
  // yaml-cpp 0.7's LoadAll loops forever, allocating, on these (found by fuzz-manifest).
  for (const char* content : {"{}\n,\n", "[1],\n x\n", "{\"a\": 1},\n \"b\": [{\"c\": 1\n"}) {
    std::string msg = OnlyError(Decode(content));
    EXPECT_THAT(msg, StartsWith(std::string(kSource) + ": line "));
    EXPECT_THAT(msg, HasSubstr("YAML syntax error")) << content;
  }
  EXPECT_EQ(OnlyError(Decode("{}\n,\n")),
            std::string(kSource) +
                ": line 2, column 1: YAML syntax error: unexpected content after the end of the "
                "document");
}

TEST(ManifestParserTest, DuplicateKeyAtTheRoot) {
  EXPECT_EQ(OnlyError(Decode(std::string(testing::kMinimalPodYaml) + "kind: Pod\n")),
            std::string(kSource) + ": kind: Invalid value: \"Pod\": duplicate key");
}

// --- bad manifests and hostile input ---

TEST(ManifestParserTest, RejectsOversizedContent) {
  std::string big(10 * 1024 * 1024, '#');
  EXPECT_EQ(OnlyError(Decode(big)),
            std::string(kSource) + ": the manifest is larger than the limit of 1048576 bytes");
  ParseOptions small;
  small.limits.max_file_bytes = 100;
  EXPECT_THAT(OnlyError(Decode(testing::kFullPodYaml, small)),
              HasSubstr("larger than the limit of 100 bytes"));
}

TEST(ManifestParserTest, RejectsA10MegabyteFileWithoutReadingItAll) {
  nodelet::testing::TempDir dir;
  std::string path = dir.path() + "/big.yaml";
  {
    std::ofstream out(path);
    out << testing::kMinimalPodYaml;
    std::string filler(1024 * 1024, ' ');
    for (int i = 0; i < 10; ++i) out << "#" << filler << "\n";
  }
  auto r = DecodeManifestFile(path);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, path + ": the manifest is larger than the limit of 1048576 bytes");
  EXPECT_TRUE(r.pods.empty());
}

TEST(ManifestParserTest, MissingFileNamesIt) {
  auto r = DecodeManifestFile("/nonexistent/dir/pod.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, StartsWith("/nonexistent/dir/pod.yaml: "));
  EXPECT_THAT(r.errors[0].message, HasSubstr("No such file"));
}

TEST(ManifestParserTest, RejectsBinaryContent) {
  std::string elf(
      "\x7f"
      "ELF\x02\x01\x01\x00\x00\x00",
      10);
  EXPECT_EQ(OnlyError(Decode(elf)),
            std::string(kSource) + ": not a text file: control byte 0x02 at offset 4");
  EXPECT_EQ(OnlyError(Decode(std::string("kind: Pod\0", 10))),
            std::string(kSource) + ": not a text file: it contains a NUL byte at offset 9");
  EXPECT_EQ(OnlyError(Decode("apiVersion: v1\x01\n")),
            std::string(kSource) + ": not a text file: control byte 0x01 at offset 14");
  EXPECT_EQ(OnlyError(Decode("name: \xff\xfe\n")),
            std::string(kSource) + ": not UTF-8 text: invalid byte 0xff at offset 6");
  EXPECT_EQ(OnlyError(Decode("name: \xc3\n")),
            std::string(kSource) + ": not UTF-8 text: invalid byte 0x0a at offset 7");
  EXPECT_EQ(OnlyError(Decode("name: \xed\xa0\x80\n")),  // a UTF-16 surrogate
            std::string(kSource) + ": not UTF-8 text: invalid sequence at offset 6");
  // A UTF-8 BOM and non-ASCII text are fine.
  auto r = Decode(std::string("\xef\xbb\xbf") + testing::kMinimalPodYaml +
                  "    env: [{name: GREETING, value: \"gr\xc3\xbc\xc3\x9f dich\"}]\n");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  EXPECT_EQ(r.pods.at(0).pod.spec.containers[0].env[0].value, "gr\xc3\xbc\xc3\x9f dich");
}

TEST(ManifestParserTest, RejectsDeepNesting) {
  // Flow style, deeper than the limit but shallow for yaml-cpp.
  std::string flow =
      "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {x: " + std::string(100, '[') +
      std::string(100, ']') + "}\n";
  EXPECT_EQ(OnlyError(Decode(flow)),
            std::string(kSource) + ": the document nests deeper than 64 levels");
  // Block style.
  std::string block = "apiVersion: v1\nkind: Pod\nspec:\n";
  for (int i = 1; i <= 80; ++i) block += std::string(i * 2, ' ') + "k:\n";
  EXPECT_EQ(OnlyError(Decode(block)),
            std::string(kSource) + ": the document nests deeper than 64 levels");
  // Deep enough to hit yaml-cpp's own recursion guard.
  std::string very_deep = "a: " + std::string(50000, '[') + "\n";
  std::string msg = OnlyError(Decode(very_deep));
  EXPECT_THAT(msg, StartsWith(std::string(kSource) + ": "));
  ParseOptions tight;
  tight.limits.max_depth = 3;
  EXPECT_THAT(OnlyError(Decode(testing::kMinimalPodYaml, tight)), HasSubstr("deeper than 3"));
}

TEST(ManifestParserTest, AliasesCannotMultiplyWork) {
  // "Billion laughs": each level refers to the previous one ten times.
  std::string yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  a0: &a0 [x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "  a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) yaml += (j ? ", *a" : "*a") + std::to_string(i - 1);
    yaml += "]\n";
  }
  EXPECT_EQ(OnlyError(Decode(yaml)),
            std::string(kSource) +
                ": the document has more than 200000 nodes (aliases count each "
                "time they are used)");
  // A self-referencing alias is either refused by yaml-cpp or cut by the depth limit.
  auto r = Decode("apiVersion: v1\nkind: Pod\nspec: &s {x: *s}\n");
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.errors.size(), 1u);
}

TEST(ManifestParserTest, DocumentCountLimit) {
  ParseOptions options;
  options.limits.max_documents = 2;
  std::string content;
  for (int i = 0; i < 3; ++i) content += std::string("---\n") + testing::kMinimalPodYaml;
  EXPECT_EQ(OnlyError(Decode(content, options)),
            std::string(kSource) + ": the manifest holds more than 2 documents");
}

TEST(ManifestParserTest, MessageFormat) {
  EXPECT_EQ(ManifestMessage("f.yaml", 2, true, "x: Required value"),
            "f.yaml (document 2): x: Required value");
  EXPECT_EQ(ManifestMessage("f.yaml", 2, false, "x: Required value"), "f.yaml: x: Required value");
  EXPECT_EQ(ManifestMessage("f.yaml", 0, true, "too big"), "f.yaml: too big");
}

}  // namespace
}  // namespace nodelet::pod
