// InitInfo::from_yaml lives with the YAML support (libwt_yaml), so the minimal core needs no YAML.
#include <wt/init_info.hpp>
#include <wt/services/yaml_json.hpp>

namespace wt {

InitInfo InitInfo::from_yaml(std::string_view text, const std::string& origin) {
  return from_object(yaml_to_json(load_yaml(text, origin), origin), origin);
}

}  // namespace wt
