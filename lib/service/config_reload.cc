#include "lib/service/config_reload.h"

#include <algorithm>
#include <fstream>

#include "lib/service/options.h"

namespace nodelet {
namespace {

std::string Joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

bool GivenOnCommandLine(const std::vector<std::string>& argv, const std::string& key) {
  const std::string flag = "--" + key;
  return std::any_of(argv.begin(), argv.end(), [&](const std::string& arg) {
    return arg == flag || arg.rfind(flag + "=", 0) == 0;
  });
}

}  // namespace

Result<FileSettings> ReadFileSettings(const std::string& path, const std::string& section,
                                      const CLI::App& app) {
  FileSettings out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) return InvalidArgument(path + ": cannot be read");
  try {
    YamlConfigReader reader(section, &app, path);
    for (const auto& item : reader.from_config(in)) out[item.name] = item.inputs;
  } catch (const CLI::Error& e) {
    return InvalidArgument(e.what());
  }
  return out;
}

ReloadPlan PlanReload(const FileSettings& before, const FileSettings& after,
                      const std::set<std::string>& live, const std::vector<std::string>& argv) {
  std::set<std::string> changed;
  for (const auto& [key, value] : before) {
    auto it = after.find(key);
    if (it == after.end() || it->second != value) changed.insert(key);
  }
  for (const auto& [key, value] : after) {
    if (before.count(key) == 0) changed.insert(key);
  }
  ReloadPlan plan;
  for (const auto& key : changed) {
    if (GivenOnCommandLine(argv, key)) {
      plan.overridden.push_back(key);
    } else if (live.count(key) != 0) {
      plan.apply.push_back(key);
    } else {
      plan.restart.push_back(key);
    }
  }
  return plan;
}

std::string ReloadPlan::Summary() const {
  if (empty()) return "nothing changed";
  std::string out;
  auto part = [&out](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    out += (out.empty() ? "" : "; ") + std::string(what) + Joined(keys);
  };
  part("applied ", apply);
  part("not applied (a restart is needed): ", restart);
  part("ignored (given on the command line, which wins): ", overridden);
  return out;
}

FileSettings SettingsAfterReload(const FileSettings& before, const FileSettings& after,
                                 const ReloadPlan& plan) {
  FileSettings out = after;
  for (const auto* keys : {&plan.restart, &plan.overridden}) {
    for (const auto& key : *keys) {
      auto it = before.find(key);
      if (it == before.end()) {
        out.erase(key);
      } else {
        out[key] = it->second;
      }
    }
  }
  return out;
}

std::string SettingOr(const FileSettings& settings, const std::string& key,
                      const std::string& fallback) {
  auto it = settings.find(key);
  if (it == settings.end()) return fallback;
  std::string joined;
  for (const auto& v : it->second) joined += (joined.empty() ? "" : ",") + v;
  return joined;
}

bool Applies(const ReloadPlan& plan, const std::string& key) {
  return std::find(plan.apply.begin(), plan.apply.end(), key) != plan.apply.end();
}

const std::vector<std::string>& LogLevels() {
  static const std::vector<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                   "error", "critical", "off"};
  return kLevels;
}

bool IsLogLevel(const std::string& level) {
  return std::find(LogLevels().begin(), LogLevels().end(), level) != LogLevels().end();
}

}  // namespace nodelet
