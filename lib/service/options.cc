#include "lib/service/options.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "lib/ipc/peer_access.h"
#include "lib/service/config_keys.h"
#include "lib/service/config_reload.h"
#include "lib/service/kubelet_config.h"
#include "lib/service/kubelet_names.h"

namespace nodelet {
namespace {

void AppendScalarOrList(const std::string& name, const YAML::Node& value,
                        std::vector<CLI::ConfigItem>& out) {
  CLI::ConfigItem item;
  item.name = name;
  if (value.IsScalar()) {
    item.inputs.push_back(value.as<std::string>());
  } else if (value.IsSequence()) {
    for (const auto& v : value) {
      if (!v.IsScalar()) throw CLI::ConversionError("config key '" + name + "' must hold scalars");
      item.inputs.push_back(v.as<std::string>());
    }
  } else if (value.IsNull()) {
    return;
  } else {
    return;  // maps are sections read by the binaries themselves
  }
  out.push_back(std::move(item));
}

}  // namespace

std::string YamlConfigReader::to_config(const CLI::App*, bool, bool, std::string) const {
  return "";
}

std::vector<CLI::ConfigItem> YamlConfigReader::from_config(std::istream& input) const {
  std::vector<CLI::ConfigItem> items;
  const std::string file = file_.empty() ? app_->get_config_ptr()->as<std::string>() : file_;
  YAML::Node root;
  try {
    root = YAML::Load(input);
    // A kubelet's configuration file: its fields in nodelet's keys, or refused by name.
    if (IsKubeletConfiguration(root)) {
      auto translated = FromKubeletConfiguration(root, file);
      if (!translated.ok()) throw CLI::ConfigError(translated.status().message());
      root = *translated;
    }
    if (Status s = CheckConfigKeys(root, file); !s.ok()) throw CLI::ConfigError(s.message());
    if (root.IsNull()) return items;
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      // Top-level keys of other binaries are theirs (CheckConfigKeys knows them all).
      if (ConfigSectionKeys(key) != nullptr) continue;
      if (app_->get_option_no_throw("--" + key) == nullptr) continue;
      AppendScalarOrList(key, kv.second, items);
    }
    if (root[section_] && root[section_].IsMap()) {
      for (const auto& kv : root[section_]) {
        AppendScalarOrList(kv.first.as<std::string>(), kv.second, items);
      }
    }
  } catch (const YAML::Exception& e) {
    throw CLI::ConversionError(file + ": not valid YAML: " + e.what());
  }
  return items;
}

void AddCommonOptions(CLI::App& app, CommonOptions& opts, const std::string& section) {
  app.config_formatter(std::make_shared<YamlConfigReader>(section, &app));
  // The reader passes on only keys the table gives this binary: one the app lacks is the table
  // drifting from the flags, refused rather than dropped.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.set_config("--config", "", "YAML configuration file (flags override it)")
      ->check(CLI::ExistingFile);
  app.add_option("--root-dir", opts.root_dir, "State directory")->capture_default_str();
  app.add_option("--run-dir", opts.run_dir, "Runtime directory for sockets")->capture_default_str();
  app.add_option("--log-dir", opts.log_dir, "Log directory")->capture_default_str();
  app.add_option("--log-level", opts.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember(LogLevels()))
      ->capture_default_str();
  app.add_option("--log-format,--logging-format", opts.log_format,
                 "text, or json: one object a line for log shippers (timestamps in UTC)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  // klog's -v, as the kubelet takes it: a log level unless --log-level is given (on the command
  // line or in the file). Command line only.
  app.add_option_function<int>(
         "-v,--v",
         [&opts, &app](const int& verbosity) {
           if (app.count("--log-level") == 0) opts.log_level = LogLevelOfVerbosity(verbosity);
         },
         "The kubelet's verbosity: 0-2 info, 3-4 debug, 5 and more trace (--log-level wins)")
      ->check(CLI::NonNegativeNumber)
      ->configurable(false);
  app.add_option("--heartbeat-interval", opts.heartbeat_interval_ms,
                 "Milliseconds between heartbeats to the supervisor")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  app.add_option("--admin-group", opts.admin_group_flag,
                 "Group (name or gid) whose members may use nodelet's sockets and nodeletctl, "
                 "besides root (default: none)");
}

int ExitOnParseError(const CLI::App& app, const CLI::ParseError& error) {
  int code = app.exit(error);
  if (dynamic_cast<const CLI::ExtrasError*>(&error) == nullptr) return code == 0 ? 0 : 2;
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& name : opt->get_lnames()) flags.push_back("--" + name);
  }
  for (const auto& arg : app.remaining()) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::string flag = arg.substr(0, arg.find('='));
    std::string nearest = NearestKey(flag, flags);
    if (!nearest.empty()) {
      std::fprintf(stderr, "%s: unknown flag %s; nearest known flag: %s\n", app.get_name().c_str(),
                   flag.c_str(), nearest.c_str());
    }
  }
  return 2;
}

Status ResolveCommonOptions(CommonOptions& opts) {
  opts.admin_group.reset();
  if (opts.admin_group_flag.empty()) return Status::Ok();
  auto gid = ipc::ResolveAdminGroup(opts.admin_group_flag);
  if (!gid.ok()) return gid.status();
  opts.admin_group = *gid;
  return Status::Ok();
}

Result<YAML::Node> LoadYamlFile(const std::string& path) {
  if (path.empty()) return YAML::Node();
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("Failed to read config '" + path + "': " + e.what());
  }
}

CLI::Validator DurationValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto d = ParseDuration(text);
        return d.ok() ? std::string() : d.status().message();
      },
      "DURATION");
}

}  // namespace nodelet
