// ManifestBook: the pod manager's record of what each manifest became (`nodeletctl manifests`)
// and which rejections are new (one FailedToParseManifest event each).
#include "supervisor/manifest_book.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace nodelet::supervisor {
namespace {

using ipc::ctl::PodAdmission;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

ManifestRecord Good(const std::string& origin, const std::string& name, const std::string& uid) {
  ManifestRecord r;
  r.origin = origin;
  r.pods.push_back({"default", name, uid});
  return r;
}

ManifestRecord Bad(const std::string& origin, const std::string& detail) {
  ManifestRecord r;
  r.origin = origin;
  r.errors.push_back(origin + ": " + detail);
  return r;
}

// uid "u-rejected" was refused by admission, "u-other" is nobody's; the rest are admitted.
Admission Lookup(const std::string& uid) {
  Admission a;
  if (uid == "u-rejected") {
    a.state = PodAdmission::Rejected;
    a.reason = "OutOfcpu";
  } else if (uid == "u-other") {
    a.state = PodAdmission::Ignored;
    a.reason = "another source serves its uid";
  }
  return a;
}

const char kBadPort[] =
    "spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, "
    "inclusive";

TEST(ManifestBookTest, ReportsPodsWithAdmissionConfigsAndErrorsWithoutTheOrigin) {
  ManifestBook book;
  book.AddSource("file", "/etc/nodelet/manifests");
  ManifestRecord web = Good("/m/web.yaml", "web-node1", "u-web");
  web.pods.push_back({"default", "big-node1", "u-rejected"});
  web.configs.push_back({"ConfigMap", "default", "web-config"});
  ManifestRecord multi = Good("/m/multi.yaml", "a-node1", "u-other");
  multi.errors.push_back("/m/multi.yaml (document 2): spec.restartPolicy: Unsupported value");
  auto fresh = book.Read("file", {web, Bad("/m/bad.yaml", kBadPort), multi});
  EXPECT_THAT(fresh, ElementsAre("/m/bad.yaml: " + std::string(kBadPort),
                                 "/m/multi.yaml (document 2): spec.restartPolicy: "
                                 "Unsupported value"));

  ManifestReport report = book.Report(Lookup);
  ASSERT_EQ(report.sources.size(), 1u);
  EXPECT_EQ(report.sources[0].source, "file");
  EXPECT_EQ(report.sources[0].location, "/etc/nodelet/manifests");
  EXPECT_TRUE(report.sources[0].ready);
  EXPECT_EQ(report.sources[0].failure, "");
  // By origin.
  ASSERT_EQ(report.manifests.size(), 3u);
  const auto& bad = report.manifests[0];
  EXPECT_EQ(bad.origin, "/m/bad.yaml");
  EXPECT_EQ(bad.source, "file");
  EXPECT_THAT(bad.errors, ElementsAre(kBadPort));
  EXPECT_THAT(bad.pods, IsEmpty());
  const auto& m = report.manifests[1];
  EXPECT_EQ(m.origin, "/m/multi.yaml");
  EXPECT_THAT(m.errors, ElementsAre("(document 2): spec.restartPolicy: Unsupported value"));
  ASSERT_EQ(m.pods.size(), 1u);
  EXPECT_EQ(m.pods[0]->admission, PodAdmission::Ignored);
  const auto& w = report.manifests[2];
  EXPECT_EQ(w.origin, "/m/web.yaml");
  EXPECT_THAT(w.errors, IsEmpty());
  ASSERT_EQ(w.pods.size(), 2u);
  EXPECT_EQ(w.pods[0]->namespace_name, "default");
  EXPECT_EQ(w.pods[0]->name, "web-node1");
  EXPECT_EQ(w.pods[0]->uid, "u-web");
  EXPECT_EQ(w.pods[0]->admission, PodAdmission::Admitted);
  EXPECT_EQ(w.pods[0]->reason, "");
  EXPECT_EQ(w.pods[1]->admission, PodAdmission::Rejected);
  EXPECT_EQ(w.pods[1]->reason, "OutOfcpu");
  ASSERT_EQ(w.configs.size(), 1u);
  EXPECT_EQ(w.configs[0]->kind, "ConfigMap");
  EXPECT_EQ(w.configs[0]->name, "web-config");

  // The next read replaces the record: a file that went is gone from it.
  book.Read("file", {web});
  EXPECT_EQ(book.Report(Lookup).manifests.size(), 1u);
}

TEST(ManifestBookTest, AnErrorIsNewOnceAndAgainOnlyAfterItWasFixed) {
  ManifestBook book;
  book.AddSource("file", "/m");
  const std::string error = "/m/bad.yaml: " + std::string(kBadPort);
  EXPECT_THAT(book.Read("file", {Bad("/m/bad.yaml", kBadPort)}), ElementsAre(error));
  // Every resync reads it again: not new.
  EXPECT_THAT(book.Read("file", {Bad("/m/bad.yaml", kBadPort)}), IsEmpty());
  // Another error in the same file is new; the first, still there, is not.
  ManifestRecord two = Bad("/m/bad.yaml", kBadPort);
  two.errors.push_back("/m/bad.yaml: spec.containers[1].name: Duplicate value: \"app\"");
  EXPECT_THAT(book.Read("file", {two}), ElementsAre(two.errors[1]));
  // Fixed, then broken again: new again.
  EXPECT_THAT(book.Read("file", {Good("/m/bad.yaml", "web-node1", "u-web")}), IsEmpty());
  EXPECT_THAT(book.Read("file", {Bad("/m/bad.yaml", kBadPort)}), ElementsAre(error));
  // A failed read of the directory says nothing about the files: still not new after it.
  book.Failed("file", "unreadable_dir: Permission denied");
  EXPECT_THAT(book.Read("file", {Bad("/m/bad.yaml", kBadPort)}), IsEmpty());
}

TEST(ManifestBookTest, SourcesKeepTheirErrorsApart) {
  ManifestBook book;
  book.AddSource("file", "/m");
  book.AddSource("http", "http://127.0.0.1:1/pods.yaml");
  EXPECT_THAT(book.Read("file", {Bad("/m/bad.yaml", kBadPort)}), ::testing::SizeIs(1));
  // A good read of the URL does not make the directory's error new again.
  EXPECT_THAT(book.Read("http", {Good("http://127.0.0.1:1/pods.yaml", "u-node1", "u-url")}),
              IsEmpty());
  EXPECT_THAT(book.Read("file", {Bad("/m/bad.yaml", kBadPort)}), IsEmpty());
  ManifestReport report = book.Report(Lookup);
  ASSERT_EQ(report.sources.size(), 2u);
  EXPECT_EQ(report.sources[0].source, "file");
  EXPECT_EQ(report.sources[1].source, "http");
  ASSERT_EQ(report.manifests.size(), 2u);
  EXPECT_EQ(report.manifests[0].source, "file");
  EXPECT_EQ(report.manifests[1].source, "http");
}

TEST(ManifestBookTest, AFailedSourceKeepsWhatItServedLastAndSaysWhy) {
  ManifestBook book;
  const std::string url = "http://127.0.0.1:1/pods.yaml";
  book.AddSource("http", url);
  ManifestReport before = book.Report(Lookup);
  ASSERT_EQ(before.sources.size(), 1u);
  EXPECT_FALSE(before.sources[0].ready) << "not read yet";
  EXPECT_THAT(before.manifests, IsEmpty());

  book.Read("http", {Good(url, "u-node1", "u-url")});
  book.Failed("http", "fetch: Connection refused");
  ManifestReport report = book.Report(Lookup);
  EXPECT_EQ(report.sources[0].failure, "fetch: Connection refused");
  EXPECT_TRUE(report.sources[0].ready);
  ASSERT_EQ(report.manifests.size(), 1u);
  ASSERT_EQ(report.manifests[0].pods.size(), 1u);
  EXPECT_EQ(report.manifests[0].pods[0]->uid, "u-url");

  // A body that does not parse: refused whole, its errors new once, the old pods kept.
  const std::string error = url + ": " + kBadPort;
  EXPECT_THAT(book.Refused("http", "parse: " + error, {error}), ElementsAre(error));
  EXPECT_THAT(book.Refused("http", "parse: " + error, {error}), IsEmpty());
  report = book.Report(Lookup);
  EXPECT_EQ(report.sources[0].failure, "parse: " + error);
  ASSERT_EQ(report.manifests.size(), 1u);
  EXPECT_EQ(report.manifests[0].pods[0]->uid, "u-url");

  // Read again: the failure is gone.
  book.Read("http", {Good(url, "u-node1", "u-url")});
  EXPECT_EQ(book.Report(Lookup).sources[0].failure, "");
}

TEST(ManifestBookTest, AMovedSourceStartsAfreshAndADroppedOneIsNoLongerListed) {
  ManifestBook book;
  book.AddSource("file", "/etc/nodelet/manifests");
  book.AddSource("http", "http://127.0.0.1:1/pods.yaml");
  book.Read("file", {Good("/etc/nodelet/manifests/a.yaml", "a", "u-a")});
  book.MoveSource("file", "/srv/manifests");
  ManifestReport moved = book.Report(Lookup);
  ASSERT_EQ(moved.sources.size(), 2u);
  EXPECT_EQ(moved.sources[1].source, "file");
  EXPECT_EQ(moved.sources[1].location, "/srv/manifests");
  EXPECT_FALSE(moved.sources[1].ready) << "not read at its new place yet";
  EXPECT_THAT(moved.manifests, IsEmpty());
  book.MoveSource("http", "");
  ManifestReport dropped = book.Report(Lookup);
  ASSERT_EQ(dropped.sources.size(), 1u);
  EXPECT_EQ(dropped.sources[0].source, "file");
}

TEST(ManifestBookTest, ErrorsAreBoundedInNumberAndLength) {
  ManifestBook book;
  book.AddSource("file", "/m");
  ManifestRecord r;
  r.origin = "/m/many.yaml";
  for (int i = 0; i < 15; ++i) {
    r.errors.push_back("/m/many.yaml (document " + std::to_string(i + 1) + "): bad");
  }
  // A long message whose cut would fall inside a two-byte character ("é"): the detail is 23
  // bytes, 997 x, then "é"s, so byte 1021 (where 1024 less "..." cuts) continues one.
  std::string longer = "/m/many.yaml: image: Invalid value: \"" + std::string(997, 'x');
  for (int i = 0; i < 100; ++i) longer += "\xC3\xA9";
  r.errors.insert(r.errors.begin(), longer);
  EXPECT_EQ(book.Read("file", {r}).size(), 16u) << "every new error is reported";
  ManifestReport report = book.Report(Lookup);
  ASSERT_EQ(report.manifests.size(), 1u);
  const auto& errors = report.manifests[0].errors;
  ASSERT_EQ(errors.size(), kMaxReportedErrors + 1);
  EXPECT_EQ(errors.back(), "... and 6 more");
  EXPECT_LE(errors[0].size(), kMaxReportedErrorBytes);
  EXPECT_EQ(errors[0].substr(errors[0].size() - 3), "...");
  // No character is cut in half: the byte before "..." is not a lead byte of "é".
  EXPECT_NE(static_cast<unsigned char>(errors[0][errors[0].size() - 4]), 0xC3u);
  EXPECT_EQ(errors[1], "(document 1): bad");
}

TEST(ManifestBookTest, RejectedManifestEventIsAWarningOnTheNode) {
  const std::string error = "/m/bad.yaml: " + std::string(kBadPort);
  status::PodEvent e = RejectedManifestEvent("node1", error, 1700000000);
  EXPECT_EQ(e.pod_uid, "node");
  EXPECT_EQ(e.pod_name, "node1");
  EXPECT_EQ(e.type, "Warning");
  EXPECT_EQ(e.reason, "FailedToParseManifest");
  EXPECT_EQ(e.message, "Rejected manifest " + error);
  EXPECT_EQ(e.source, "nodelet");
  EXPECT_EQ(e.first_unix_s, 1700000000);
  EXPECT_EQ(e.last_unix_s, 1700000000);
  EXPECT_LE(RejectedManifestEvent("node1", std::string(5000, 'y'), 1).message.size(),
            std::string("Rejected manifest ").size() + kMaxReportedErrorBytes);
}

// A pod kept out by another source's pod is a Warning on the node that names both and the rule.
TEST(ManifestBookTest, SourceConflictEventNamesThePodKeptOutAndTheWinner) {
  status::PodEvent e = SourceConflictEvent(
      "node1", {"name", "etcd", "e1", "default/web-node1", "file", "f1"}, 1700000000);
  EXPECT_EQ(e.pod_uid, "node");
  EXPECT_EQ(e.pod_name, "node1");
  EXPECT_EQ(e.type, "Warning");
  EXPECT_EQ(e.reason, "PodSourceConflict");
  EXPECT_EQ(e.message,
            "Pod default/web-node1 (uid e1) from the etcd source is not run: a pod of the file "
            "source holds its name default/web-node1 (under uid f1); the file source wins (file, "
            "then http, then etcd); this pod runs once that one is gone");
  EXPECT_EQ(e.first_unix_s, 1700000000);
  status::PodEvent u =
      SourceConflictEvent("node1", {"uid", "http", "u1", "default/a", "file", "u1"}, 1);
  EXPECT_NE(u.message.find("holds its uid;"), std::string::npos) << u.message;
}

TEST(ManifestBookTest, ErrorDetailDropsOnlyALeadingOrigin) {
  EXPECT_EQ(ErrorDetail("/m/a.yaml", "/m/a.yaml: metadata.name: Required value"),
            "metadata.name: Required value");
  EXPECT_EQ(ErrorDetail("/m/a.yaml", "/m/a.yaml (document 3): kind: Unsupported value"),
            "(document 3): kind: Unsupported value");
  EXPECT_EQ(ErrorDetail("/m/a.yaml", "something else: /m/a.yaml"), "something else: /m/a.yaml");
  EXPECT_EQ(ErrorDetail("/m/a", "/m/a.yaml: x"), "/m/a.yaml: x") << "a longer path is not it";
}

}  // namespace
}  // namespace nodelet::supervisor
