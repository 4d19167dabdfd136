#include "lib/pod/config_objects.h"

namespace nodelet::pod {

ConfigObjectMap DecodeConfigObjects(
    const flatbuffers::Vector<flatbuffers::Offset<ipc::podwork::ConfigObject>>* list) {
  ConfigObjectMap out;
  if (list == nullptr) return out;
  for (const auto* o : *list) {
    ConfigObject obj;
    obj.namespace_name = o->namespace_name() ? o->namespace_name()->str() : "default";
    obj.name = o->name() ? o->name()->str() : "";
    obj.type = o->type() ? o->type()->str() : "";
    if (o->data()) {
      for (const auto* e : *o->data()) {
        if (!e->key()) continue;
        obj.data[e->key()->str()] =
            e->value() ? std::string(e->value()->begin(), e->value()->end()) : std::string();
      }
    }
    out[obj.namespace_name + "/" + obj.name] = std::move(obj);
  }
  return out;
}

}  // namespace nodelet::pod
