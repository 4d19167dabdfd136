// Serializing JSON that holds bytes nodelet does not control. nlohmann::json::dump throws
// type_error.316 on a string that is not valid UTF-8; JsonText never throws on content: an
// invalid sequence is written as U+FFFD. Every dump of a document that may hold a pod's,
// a container's or a manifest's text goes through here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace nodelet {

inline std::string JsonText(const nlohmann::json& doc, int indent = -1) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace nodelet
