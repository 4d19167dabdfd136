// `nodeletctl manifests [-o json]`: what each manifest of each pod source became, from the
// supervisor's pod manager (ctl socket, RequestKind::Manifests). One row per manifest: the source
// ("file" or "http"), the manifest (the file's path or the URL), its status and then its pods
// (namespace/name, uid, and whether admission took each), its ConfigMaps and Secrets, or why it
// was rejected, one item per line; a source that could not be read gets a row of its own with
// why (its manifests, as last read, stay below it).
//
// Statuses: Taken (every document taken), Rejected (nothing taken), Partial (some documents
// rejected), and for a source row Failed (its last read failed), Pending (not read yet) or Empty
// (read, and it holds no manifests).
//
// Exit: 0 when every manifest was taken and every source read; 1 when a manifest (or a document
// of one) was rejected or a source failed its last read; 2 for an unknown output format; 4 when
// nodelet cannot be reached.
#pragma once

#include <ostream>
#include <string>

#include "ctl/service_commands.h"
#include "ctl_generated.h"

namespace nodelet::ctl {

// Taken, Rejected or Partial.
std::string ManifestStatusName(const ipc::ctl::ManifestStatusT& m);
// The table (with `SOURCE  MANIFEST  STATUS  PODS/REASON` as its header).
std::string FormatManifests(const ipc::ctl::CtlReplyT& reply);
// The document of `manifests -o json|yaml`.
nlohmann::json ManifestsJson(const ipc::ctl::CtlReplyT& reply);
// kExitOk when nothing was rejected and no source failed, kExitFailed otherwise.
int ManifestsExitCode(const ipc::ctl::CtlReplyT& reply);

// -o name prints each manifest's origin (its file or URL); wide is the table.
int RunManifests(const CtlOptions& o, OutputFormat format, std::ostream& out, std::ostream& err);

}  // namespace nodelet::ctl
