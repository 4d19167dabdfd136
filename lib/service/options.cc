#include "lib/service/options.h"

#include <charconv>
#include <chrono>
#include <fstream>
#include <sstream>

#include "lib/ipc/peer_access.h"

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
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ConversionError(std::string("config file is not valid YAML: ") + e.what());
  }
  if (root.IsNull()) return items;
  if (!root.IsMap()) throw CLI::ConversionError("config file must be a YAML mapping");
  for (const auto& kv : root) {
    AppendScalarOrList(kv.first.as<std::string>(), kv.second, items);
  }
  if (root[section_] && root[section_].IsMap()) {
    for (const auto& kv : root[section_]) {
      AppendScalarOrList(kv.first.as<std::string>(), kv.second, items);
    }
  }
  return items;
}

void AddCommonOptions(CLI::App& app, CommonOptions& opts, const std::string& section) {
  app.config_formatter(std::make_shared<YamlConfigReader>(section));
  app.allow_config_extras(CLI::config_extras_mode::ignore);
  app.set_config("--config", "", "YAML configuration file (flags override it)")
      ->check(CLI::ExistingFile);
  app.add_option("--root-dir", opts.root_dir, "State directory")->capture_default_str();
  app.add_option("--run-dir", opts.run_dir, "Runtime directory for sockets")->capture_default_str();
  app.add_option("--log-dir", opts.log_dir, "Log directory")->capture_default_str();
  app.add_option("--log-level", opts.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--heartbeat-interval", opts.heartbeat_interval_ms,
                 "Milliseconds between heartbeats to the supervisor")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  app.add_option("--admin-group", opts.admin_group_flag,
                 "Group (name or gid) whose members may use nodelet's sockets and nodeletctl, "
                 "besides root (default: none)");
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

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin || value < 0) {
    return InvalidArgument("'" + text + "' is not a duration (e.g. 500ms, 2s, 1m)");
  }
  std::string unit(ptr, end);
  double ms = 0;
  if (unit.empty() || unit == "ms") {
    ms = value;
  } else if (unit == "s") {
    ms = value * 1000;
  } else if (unit == "m") {
    ms = value * 60'000;
  } else if (unit == "h") {
    ms = value * 3'600'000;
  } else if (unit == "us") {
    ms = value / 1000;
  } else {
    return InvalidArgument("'" + text + "' has an unknown unit '" + unit + "' (ms, s, m, h)");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

}  // namespace nodelet
