#include "support/json_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <istream>
#include <iterator>
#include <new>
#include <unordered_set>
#include <vector>

namespace charm {

namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxDepth = kMaxJsonDepth;
/// An object's keys are kept in a sorted vector up to this many, in a hash set past it,
/// so that an object of 400,000 keys costs no quadratic insertion.
constexpr std::size_t kMaxSortedKeys = 32;

/// nlohmann's own DOM builder, driven by its SAX parser, with two more checks: a key
/// repeated in one object and nesting past kMaxDepth stop the parse at once. (A DOM
/// parse with a per-event callback is about eight times slower on a 135 MB plan, and a
/// separate SAX pass doubles the parse; this adds a lookup per key.) sax_parse is a
/// template on the handler, so nothing here is virtual.
class StrictDomParser {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit StrictDomParser(json& root) : dom_(root, /*allow_exceptions=*/true) {}
  std::string duplicate, where;
  bool too_deep = false;  // `where` is then the path of the deepest array or object

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) { return open(true) && dom_.start_object(n); }
  bool key(string_t& k) {
    if (!open_[depth_ - 1].insert(k)) {
      duplicate = k;
      where = path();
      return false;
    }
    last_key_ = k;
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return open(false) && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t pos, const std::string& token, const Exception& ex) {
    return dom_.parse_error(pos, token, ex);  // throws: allow_exceptions
  }

 private:
  struct Frame {
    bool object = false;
    std::vector<std::string> keys;         // sorted: most objects have a handful of keys
    std::unordered_set<std::string> many;  // all of them, once there are more than kMaxSortedKeys
    std::string name;                      // the key this object or array hangs under ("" inside an array)
    /// False when `k` is a key of this object already.
    bool insert(const std::string& k) {
      if (!many.empty()) return many.insert(k).second;
      const auto at = std::lower_bound(keys.begin(), keys.end(), k);
      if (at != keys.end() && *at == k) return false;
      if (keys.size() < kMaxSortedKeys) {
        keys.insert(at, k);
        return true;
      }
      many.insert(std::make_move_iterator(keys.begin()), std::make_move_iterator(keys.end()));
      keys.clear();
      return many.insert(k).second;
    }
  };
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  // Frames are reused level by level (depth_ of them are open), so that a plan's
  // hundreds of thousands of small objects cost no allocation each.
  std::vector<Frame> open_;
  std::size_t depth_ = 0;
  std::string last_key_;

  bool open(bool object) {
    if (depth_ == kMaxDepth) {
      too_deep = true;
      where = path();
      return false;
    }
    if (depth_ == open_.size()) open_.emplace_back();
    Frame& f = open_[depth_];
    f.name = depth_ > 0 && open_[depth_ - 1].object ? last_key_ : std::string();
    f.object = object;
    f.keys.clear();
    if (!f.many.empty()) f.many = {};  // clear() would walk a large object's buckets for every small one after it
    ++depth_;
    return true;
  }
  [[nodiscard]] std::string path() const {
    std::string p;
    for (std::size_t i = 0; i < depth_; ++i)
      if (!open_[i].name.empty()) p += (p.empty() ? "" : ".") + open_[i].name;
    return p.empty() ? std::string("the top level") : p;
  }
};

template <class Input>
Expected<json> parse_strict(Input&& input, const std::string& source) {
  try {
    json j;
    StrictDomParser p(j);
    try {
      // strict: nothing but whitespace may follow the document.
      json::sax_parse(std::forward<Input>(input), &p, json::input_format_t::json, /*strict=*/true);
    } catch (const std::bad_alloc&) {
      release_json(j);  // before its destructor, which would allocate
      throw;
    }
    if (p.too_deep)
      return Error{source, fmt::format("malformed JSON: arrays and objects nested more than {} deep (at {})", kMaxDepth,
                                       p.where)};
    if (!p.duplicate.empty())
      return Error{source, fmt::format("malformed JSON: duplicate key '{}' in {} (JSON would keep only the last one)",
                                       p.duplicate, p.where)};
    return j;
  } catch (const json::exception& e) {
    // parse_error, but also out_of_range for a number like 1e400 (found by fuzzing).
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> keep the part after the id.
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return Error{source, "malformed JSON: " + what};
  }
}

}  // namespace

void release_json(nlohmann::json& j) noexcept {
  if (j.is_array()) {
    auto& a = j.get_ref<json::array_t&>();
    for (; !a.empty(); a.pop_back()) release_json(a.back());
  } else if (j.is_object()) {
    auto& o = j.get_ref<json::object_t&>();
    for (auto it = o.begin(); it != o.end(); it = o.erase(it)) release_json(it->second);
  }
}

Expected<nlohmann::json> parse_json_strict(const std::string& text, const std::string& source) {
  return parse_strict(text, source);
}

Expected<nlohmann::json> parse_json_strict(std::istream& in, const std::string& source) {
  return parse_strict(in, source);
}

}  // namespace charm
