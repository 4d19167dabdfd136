// Each nodelet binary's CLI11 app, built as the binary builds it (MakeSupervisorFlags,
// MakeServiceApp with the service's spec), for tests that parse flags and config files through
// the real option parsers without running anything. Links the supervisor and every service.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lib/service/service_runtime.h"
#include "supervisor/supervisor_options.h"
#include "svc-plegd/plegd_service.h"
#include "svc-podworkerd/podworkerd_service.h"
#include "svc-statusd/statusd_service.h"
#include "svc-volumed/volumed_service.h"

namespace nodelet::testing {

class BinaryApp {
 public:
  // `section`: "supervisor", "plegd", "podworkerd", "statusd" or "volumed".
  explicit BinaryApp(const std::string& section) : section_(section) {
    if (section == "supervisor") {
      supervisor_ = supervisor::MakeSupervisorFlags(&supervisor_options_);
      return;
    }
    if (section == "plegd") spec_ = plegd::MakeSpec();
    if (section == "podworkerd") spec_ = podworkerd::MakeSpec();
    if (section == "statusd") spec_ = statusd::MakeSpec();
    if (section == "volumed") spec_ = volumed::MakeSpec();
    service_ = MakeServiceApp(spec_, common_);
  }
  BinaryApp(const BinaryApp&) = delete;
  BinaryApp& operator=(const BinaryApp&) = delete;

  const std::string& section() const { return section_; }
  CLI::App& app() { return supervisor_ ? supervisor_->app : *service_; }
  // The supervisor's options as parsed (only for "supervisor").
  const supervisor::SupervisorOptions& supervisor_options() const { return supervisor_options_; }

  // The first long name of each option that the file may set, without dashes, sorted: what its
  // config section takes (the others are the kubelet's names, accepted on the command line).
  std::vector<std::string> Keys() {
    std::vector<std::string> keys;
    for (const CLI::Option* opt : app().get_options()) {
      const auto& names = opt->get_lnames();
      if (names.empty() || !opt->get_configurable()) continue;
      if (names.front() != "help" && names.front() != "config") keys.push_back(names.front());
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  // Parses `args` (no argv[0]); "" on success, else CLI11's message.
  std::string Parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector back to front
    try {
      app().parse(args);
    } catch (const CLI::ParseError& e) {
      return std::string(e.what()).empty() ? "parse error" : e.what();
    }
    return "";
  }

 private:
  std::string section_;
  supervisor::SupervisorOptions supervisor_options_;
  std::unique_ptr<supervisor::SupervisorFlags> supervisor_;
  CommonOptions common_;
  ServiceSpec spec_;
  std::unique_ptr<CLI::App> service_;
};

inline const std::vector<std::string>& BinarySections() {
  static const std::vector<std::string> kSections = {"supervisor", "plegd", "podworkerd", "statusd",
                                                     "volumed"};
  return kSections;
}

}  // namespace nodelet::testing
