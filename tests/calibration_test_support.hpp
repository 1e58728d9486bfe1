// Helpers shared by the calibration tests: paths in the source tree, their JSON, the measurements header.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace charm::calib::test_support {

using nlohmann::json;

inline std::string source_path(const std::string& rel) { return std::string(CHARM_SOURCE_DIR) + "/" + rel; }

inline json load_json(const std::string& rel) {
  std::ifstream in(source_path(rel));
  return json::parse(in);
}

inline const char* kHeader = "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms\n";

}  // namespace charm::calib::test_support
