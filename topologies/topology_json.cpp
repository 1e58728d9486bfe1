#include "topologies/topology_json.hpp"

#include <fmt/format.h>

#include <cctype>
#include <string>
#include <vector>

#include "support/input_file.hpp"
#include "support/json_text.hpp"
#include "topologies/topology_reader.hpp"

// The loader's entry points and the document's "routes"; its other parts are in the files topology_reader.hpp
// lists.

namespace charm::topo {

namespace reader {

/// "routes": [{"src", "dst", "via": [switch, ...]}] fixes the route of a GPU
/// pair; each also fixes its reverse unless the file gives that one too. Two
/// vertices joined by several links use the first of them in the file.
Status parse_routes(const Node& root, Topology& t, int num_gpus) {
  if (!root.has("routes")) return {};
  const Node rs = root.at("routes");
  if (!rs.j.is_array()) return rs.error("must be an array of routes {\"src\", \"dst\", \"via\"}");
  std::map<std::string, int> index;
  for (std::size_t v = 0; v < t.vertex_names.size(); ++v) index.emplace(t.vertex_names[v], int(v));
  std::map<std::pair<int, int>, std::int32_t> channel;
  for (std::size_t i = 0; i < t.links.size(); ++i) {
    channel.emplace(std::pair{t.links[i].a, t.links[i].b}, std::int32_t(2 * i));
    channel.emplace(std::pair{t.links[i].b, t.links[i].a}, std::int32_t(2 * i + 1));
  }
  std::map<std::pair<int, int>, std::size_t> given;
  for (std::size_t i = 0; i < rs.j.size(); ++i) {
    const Node r = rs.at(i);
    if (!r.j.is_object()) return r.error("must be an object {\"src\", \"dst\", \"via\"}");
    if (auto s = check_fields(r, {"src", "dst", "via"}); !s) return s;
    const auto gpu = [&](const char* key) -> Ex<int> {
      CHARM_TRY_LET(nm, get_string(r, key, true, ""));
      const auto it = index.find(nm);
      if (it == index.end()) return r.at(key).error(fmt::format("unknown GPU \"{}\"", nm));
      if (it->second >= num_gpus) return r.at(key).error(fmt::format("\"{}\" is a switch, not a GPU", nm));
      return it->second;
    };
    CHARM_TRY_LET(src, gpu("src"));
    CHARM_TRY_LET(dst, gpu("dst"));
    if (src == dst)
      return r.at("dst").error(fmt::format("\"{}\" is also the source", t.vertex_names[std::size_t(dst)]));
    std::vector<int> stops{src};
    std::vector<std::string> stop_path{r.at("src").path};
    if (r.has("via")) {
      const Node via = r.at("via");
      if (!via.j.is_array()) return via.error("must be an array of switch names");
      for (std::size_t k = 0; k < via.j.size(); ++k) {
        const Node h = via.at(k);
        if (!h.j.is_string()) return h.error(fmt::format("must be a switch name, got {}", h.j.dump()));
        const auto nm = h.j.get<std::string>();
        const auto it = index.find(nm);
        if (it == index.end()) return h.error(fmt::format("unknown switch \"{}\"", nm));
        if (it->second < num_gpus)
          return h.error(fmt::format("\"{}\" is a GPU: a route never passes through another GPU", nm));
        if (std::find(stops.begin(), stops.end(), it->second) != stops.end())
          return h.error(fmt::format("\"{}\" comes twice: a route passes a switch once", nm));
        stops.push_back(it->second);
        stop_path.push_back(h.path);
      }
    }
    stops.push_back(dst);
    stop_path.push_back(r.at("dst").path);
    if (stops.size() - 1 > std::size_t(kMaxHops))
      return r.at("via").error(fmt::format("{} hops, more than the {} supported", stops.size() - 1, kMaxHops));
    RouteOverride o{src, dst, {}};
    for (std::size_t k = 1; k < stops.size(); ++k) {
      const auto it = channel.find({stops[k - 1], stops[k]});
      if (it == channel.end())
        return Error{root.src,
                     fmt::format("{}: no link joins \"{}\" and \"{}\"", stop_path[k],
                                 t.vertex_names[std::size_t(stops[k - 1])], t.vertex_names[std::size_t(stops[k])])};
      o.channels.push_back(it->second);
    }
    if (const auto [it, fresh] = given.emplace(std::pair{src, dst}, i); !fresh)
      return r.error(fmt::format("a second route from \"{}\" to \"{}\" (routes[{}] is the first)",
                                 t.vertex_names[std::size_t(src)], t.vertex_names[std::size_t(dst)], it->second));
    t.route_overrides.push_back(std::move(o));
  }
  const std::size_t m = t.route_overrides.size();
  for (std::size_t k = 0; k < m; ++k) {
    RouteOverride back{t.route_overrides[k].dst, t.route_overrides[k].src, t.route_overrides[k].channels};
    if (given.count({back.src, back.dst}) != 0) continue;
    std::reverse(back.channels.begin(), back.channels.end());
    for (auto& ch : back.channels) ch ^= 1;  // the other direction of the same link
    t.route_overrides.push_back(std::move(back));
  }
  return {};
}

}  // namespace reader

Expected<Topology> parse_topology(const nlohmann::json& j, const std::string& source, const GpuOverrides& over) {
  using namespace reader;  // NOLINT(google-build-using-namespace): the loader's own reader
  const Node root{j, "", source};
  if (!j.is_object()) return Error{source, "the topology must be a JSON object"};
  Topology t;
  auto name_ex = get_string(root, "name", false, source);
  if (!name_ex) return name_ex.error();
  // A topology without a name is named after its file, and a name reaches terminals, scripts and CSV rows.
  if (const auto i = json_fields::control_character_at(name_ex.value()); i != std::string::npos)
    return Error{source, fmt::format("the file name holds a control character (byte {:#04x} at offset {}) and the "
                                     "topology has no \"name\" to show instead: rename the file or give it a name",
                                     static_cast<unsigned char>(name_ex.value()[i]), i)};
  t.name = name_ex.value();
  if (root.has("notes")) {
    const Node n = root.at("notes");
    if (n.j.is_string()) {
      CHARM_TRY_LET(note, text_of(n));
      t.notes = std::move(note);
    } else if (n.j.is_array()) {
      for (std::size_t k = 0; k < n.j.size(); ++k) {
        CHARM_TRY_LET(note, text_of(n.at(k), "a string or an array of strings"));
        t.notes += (t.notes.empty() ? "" : "\n") + note;
      }
    } else
      return n.error("must be a string or an array of strings");
  }
  if (root.has("schema")) {
    const Node s = root.at("schema");
    if (!s.j.is_number_integer()) return s.error(fmt::format("must be an integer, got {}", s.j.dump()));
    if (s.j != 1) return s.error(fmt::format("unsupported schema version {} (expected 1)", s.j.dump()));
  }
  // What `charm calibrate` fitted and from what: kept with the values, not read.
  if (root.has("calibration") && !root.at("calibration").j.is_object())
    return root.at("calibration").error("must be an object");
  if (!root.has("gpu")) return root.missing("gpu");
  if (auto s = parse_stack(root, t.stack, t.sources); !s) return s.error();
  if (auto s = parse_gpu(root.at("gpu"), over, t); !s) return s.error();
  int num_gpus = 0;
  Status st = root.has("nodes") ? parse_generator(root, t, num_gpus) : parse_explicit(root, t, num_gpus);
  if (!st) return st.error();
  if (auto s = parse_routes(root, t, num_gpus); !s) return s.error();
  if (auto s = t.finalize(num_gpus, source); !s) return s.error();
  return t;
}

namespace {

Expected<nlohmann::json> parse_json_text(const std::string& text, const std::string& source) {
  return parse_json_strict(text, source);
}

}  // namespace

Expected<nlohmann::json::json_pointer> field_pointer(const std::string& path, std::string_view noun) {
  auto bad = [&](const std::string& why) {
    return Error{
        path, fmt::format("not a {} path ({}); write it like inter.bandwidth_gbps or links[3].latency_us", noun, why)};
  };
  if (path.empty()) return bad("empty");
  std::string ptr;
  std::size_t i = 0;
  while (i < path.size()) {
    std::size_t j = i;
    while (j < path.size() && (std::isalnum(static_cast<unsigned char>(path[j])) || path[j] == '_')) ++j;
    if (j == i) return bad(fmt::format("expected a field name at character {}", i + 1));
    ptr.append(1, '/').append(path, i, j - i);
    while (j < path.size() && path[j] == '[') {
      std::size_t k = j + 1;
      while (k < path.size() && std::isdigit(static_cast<unsigned char>(path[k]))) ++k;
      if (k == j + 1 || k >= path.size() || path[k] != ']')
        return bad(fmt::format("expected [index] at character {}", j + 1));
      ptr.append(1, '/').append(path, j + 1, k - j - 1);
      j = k + 1;
    }
    if (j < path.size()) {
      if (path[j] != '.' || j + 1 == path.size())
        return bad(fmt::format("unexpected '{}' at character {}", path[j], j + 1));
      ++j;
    }
    i = j;
  }
  return nlohmann::json::json_pointer(ptr);
}

Expected<Topology> parse_topology_text(const std::string& text, const std::string& source) {
  auto j = parse_json_text(text, source);
  if (!j) return j.error();
  return parse_topology(*j, source);
}

Expected<nlohmann::json> read_topology_json(const std::string& path) {
  auto text = read_input_file(path, "a topology file", "cannot open the topology file");
  if (!text) return text.error();
  return parse_json_text(*text, path);
}

Expected<Topology> load_topology(const std::string& path, const GpuOverrides& over) {
  auto j = read_topology_json(path);
  if (!j) return j.error();
  return parse_topology(*j, path, over);
}

}  // namespace charm::topo
