#include "lib/common/safe_path.h"

namespace nodelet {

Result<std::string> JoinComponent(std::string_view base, std::string_view component) {
  if (component.empty() || component == "." || component == ".." ||
      component.find('/') != std::string_view::npos ||
      component.find('\0') != std::string_view::npos) {
    return InvalidArgument("path component \"" +
                           std::string(component.substr(0, component.find('\0'))) +
                           "\" is not a single name");
  }
  std::string out(base);
  if (out.empty() || out.back() != '/') out += '/';
  out += component;
  return out;
}

}  // namespace nodelet
