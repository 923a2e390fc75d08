// Strict single-object JSON line scanner (see flatjson.hpp).
#include "telemetry/flatjson.hpp"

#include <cctype>
#include <charconv>
#include <string>

#include "core/util.hpp"

namespace st::telemetry::flat {
namespace {

struct Scanner {
  std::string_view s;
  size_t i = 0;
  std::string err;

  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  bool fail(const std::string& m) {
    if (err.empty()) err = m + " at column " + std::to_string(i + 1);
    return false;
  }
  bool string(std::string_view& out) {
    if (i >= s.size() || s[i] != '"') return fail("expected '\"'");
    size_t b = ++i;
    bool high = false;  // a byte >= 0x80: the span must be valid UTF-8
    while (i < s.size()) {
      char c = s[i];
      if (c == '"') {
        out = s.substr(b, i - b);
        if (high) {
          const size_t at = utf8_invalid_at(std::string(out));
          if (at != std::string::npos) {
            i = b + at;
            return fail("invalid UTF-8 in string");
          }
        }
        ++i;
        return true;
      }
      high |= static_cast<unsigned char>(c) >= 0x80;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c == '\\') {
        if (++i >= s.size()) break;
        char e = s[i];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k)
            if (++i >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i])))
              return fail("bad \\u escape");
        } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' &&
                   e != 'r' && e != 't') {
          return fail("bad escape");
        }
      }
      ++i;
    }
    return fail("unterminated string");
  }
  bool number(std::string_view& out) {
    size_t b = i;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
      return fail("invalid value");
    if (s[i] == '0')
      ++i;
    else
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
        return fail("bad number");
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
        return fail("bad number");
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    }
    out = s.substr(b, i - b);
    return true;
  }
  bool literal(const char* w) {
    std::string_view lw(w);
    if (s.substr(i, lw.size()) != lw) return fail("invalid value");
    i += lw.size();
    return true;
  }
  // Any value; depth-limited recursion for nested containers.
  bool value(Kind& k, std::string_view& out, int depth) {
    ws();
    if (i >= s.size()) return fail("unexpected end of line");
    if (depth > 64) return fail("nesting too deep");
    char c = s[i];
    size_t b = i;
    if (c == '"') return k = Kind::String, string(out);
    if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      k = c == '{' ? Kind::Object : Kind::Array;
      ++i;
      ws();
      if (i < s.size() && s[i] == close) {
        ++i;
        out = s.substr(b, i - b);
        return true;
      }
      while (true) {
        ws();
        if (c == '{') {
          std::string_view key;
          if (!string(key)) return false;
          ws();
          if (i >= s.size() || s[i] != ':') return fail("expected ':'");
          ++i;
        }
        Kind kk;
        std::string_view vv;
        if (!value(kk, vv, depth + 1)) return false;
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == close) {
          ++i;
          out = s.substr(b, i - b);
          return true;
        }
        return fail(i >= s.size() ? "unexpected end of line" : "expected ',' or closing bracket");
      }
    }
    if (c == 't') return k = Kind::True, literal("true") && (out = s.substr(b, 4), true);
    if (c == 'f') return k = Kind::False, literal("false") && (out = s.substr(b, 5), true);
    if (c == 'n') return k = Kind::Null, literal("null") && (out = s.substr(b, 4), true);
    k = Kind::Number;
    return number(out);
  }
};

}  // namespace

std::string parse_object(std::string_view line, std::vector<Member>& members) {
  members.clear();
  Scanner sc;
  sc.s = line;
  sc.ws();
  if (sc.i >= line.size() || line[sc.i] != '{') {
    sc.fail("expected '{'");
    return sc.err;
  }
  ++sc.i;
  sc.ws();
  if (sc.i < line.size() && line[sc.i] == '}') {
    ++sc.i;
  } else {
    while (true) {
      sc.ws();
      Member m;
      if (!sc.string(m.key)) return sc.err;
      sc.ws();
      if (sc.i >= line.size() || line[sc.i] != ':') return sc.fail("expected ':'"), sc.err;
      ++sc.i;
      if (!sc.value(m.kind, m.value, 1)) return sc.err;
      members.push_back(m);
      sc.ws();
      if (sc.i < line.size() && line[sc.i] == ',') {
        ++sc.i;
        continue;
      }
      if (sc.i < line.size() && line[sc.i] == '}') {
        ++sc.i;
        break;
      }
      sc.fail(sc.i >= line.size() ? "unexpected end of line" : "expected ',' or '}'");
      return sc.err;
    }
  }
  sc.ws();
  if (sc.i != line.size()) sc.fail("trailing characters after the object");
  return sc.err;
}

bool to_double(std::string_view v, double& out) {
  auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  return r.ec == std::errc() && r.ptr == v.data() + v.size();
}

bool to_int64(std::string_view v, long long& out) {
  auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (r.ec == std::errc() && r.ptr == v.data() + v.size()) return true;
  // Accept integral values written as floats ("1e6", "128.0").
  double d;
  if (!to_double(v, d) || d != static_cast<double>(static_cast<long long>(d))) return false;
  out = static_cast<long long>(d);
  return true;
}

}  // namespace st::telemetry::flat
