// Jinja values: construction, truth, Python's str() and repr(), comparison, JSON, and the
// data-range bookkeeping of strings (engine/tokenizer/jinja.h).
#include "engine/tokenizer/jinja-value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace impress::jinja {

Value Value::Bool(bool v) {
  Value r = Make(Kind::kBool);
  r.b = v;
  return r;
}
Value Value::Int(int64_t v) {
  Value r = Make(Kind::kInt);
  r.i = v;
  return r;
}
Value Value::Float(double v) {
  Value r = Make(Kind::kFloat);
  r.f = v;
  return r;
}
Value Value::Str(std::string text) {
  Value r = Make(Kind::kString);
  r.s = std::move(text);
  return r;
}
Value Value::Data(std::string text) {
  Value r = Str(std::move(text));
  if (!r.s.empty()) r.data.push_back({0, r.s.size()});
  return r;
}
Value Value::MakeList(List items) {
  Value r = Make(Kind::kList);
  r.list = std::make_shared<List>(std::move(items));
  return r;
}
Value Value::MakeDict(Dict items) {
  Value r = Make(Kind::kDict);
  r.dict = std::make_shared<Dict>(std::move(items));
  return r;
}
Value Value::Func(std::string name, std::shared_ptr<Value> self) {
  Value r = Make(Kind::kFunc);
  r.s = std::move(name);
  r.self = std::move(self);
  return r;
}

bool Value::Truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0;
    case Kind::kString: return !s.empty();
    case Kind::kList: return !list->empty();
    case Kind::kDict: return is_namespace || !dict->empty();
    case Kind::kFunc: return true;
  }
  return false;
}

const Value* Value::Find(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

namespace {

void AddRange(std::vector<ByteRange>* out, size_t b, size_t e) {
  if (b >= e) return;
  if (!out->empty() && out->back().end == b) {
    out->back().end = e;
  } else {
    out->push_back({b, e});
  }
}

std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, r.ptr);
  // Python: repr(1.0) == "1.0", repr(1e16) == "1e+16", repr(1e-05) == "1e-05".
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    const bool neg = !ex.empty() && ex[0] == '-';
    if (!ex.empty() && (ex[0] == '-' || ex[0] == '+')) ex.erase(0, 1);
    if (ex.size() < 2) ex = "0" + ex;
    return mant + "e" + (neg ? "-" : "+") + ex;
  }
  if (s.find('.') == std::string::npos && s.find("inf") == std::string::npos) s += ".0";
  return s;
}

std::string StrRepr(const std::string& s) {
  // Python's repr of a str: single quotes unless the text has ' and no ".
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + q;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += char(c);
        }
    }
  }
  *out += '"';
}

void Json(const Value& v, int indent, int level, std::string* out) {
  auto newline = [&](int l) {
    if (indent < 0) return;
    *out += '\n';
    out->append(size_t(indent) * size_t(l), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind) {
    case Value::Kind::kUndefined: throw JinjaError("tojson of an undefined value");
    case Value::Kind::kNone: *out += "null"; break;
    case Value::Kind::kBool: *out += v.b ? "true" : "false"; break;
    case Value::Kind::kInt: *out += std::to_string(v.i); break;
    case Value::Kind::kFloat:
      *out += std::isfinite(v.f) ? FloatRepr(v.f) : (std::isnan(v.f) ? "NaN" : v.f > 0 ? "Infinity" : "-Infinity");
      break;
    case Value::Kind::kString: JsonString(v.s, out); break;
    case Value::Kind::kList:
      if (v.list->empty()) {
        *out += "[]";
        break;
      }
      *out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) *out += item_sep;
        newline(level + 1);
        Json((*v.list)[k], indent, level + 1, out);
      }
      newline(level);
      *out += ']';
      break;
    case Value::Kind::kDict:
      if (v.dict->empty()) {
        *out += "{}";
        break;
      }
      *out += '{';
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k) *out += item_sep;
        newline(level + 1);
        JsonString((*v.dict)[k].first, out);
        *out += ": ";
        Json((*v.dict)[k].second, indent, level + 1, out);
      }
      newline(level);
      *out += '}';
      break;
    case Value::Kind::kFunc: throw JinjaError("tojson of a function");
  }
}

}  // namespace

Value Concat(const Value& a, const Value& b) {
  Value r = a;
  Append(&r, b);
  return r;
}

void Append(Value* a, const Value& b) {
  if (a->s.size() + b.s.size() > kMaxStringBytes) throw JinjaError("string too large");
  for (const ByteRange& d : b.data) AddRange(&a->data, d.begin + a->s.size(), d.end + a->s.size());
  a->s += b.s;
}

Value Repeat(const Value& a, int64_t n) {
  if (n <= 0 || a.s.empty()) return Value::Str("");
  if (uint64_t(n) > kMaxStringBytes / a.s.size()) throw JinjaError("string too large");
  Value r = Value::Str("");
  r.s.reserve(a.s.size() * size_t(n));
  for (int64_t k = 0; k < n; ++k) Append(&r, a);
  return r;
}

Value Substr(const Value& a, size_t begin, size_t end) {
  Value r = Value::Str(a.s.substr(begin, end - begin));
  for (const ByteRange& d : a.data) AddRange(&r.data, std::max(d.begin, begin) - begin, std::min(d.end, end) - begin);
  return r;
}

Value Derived(std::string text, const Value& from) {
  if (text.size() > kMaxStringBytes) throw JinjaError("string too large");
  return from.data.empty() ? Value::Str(std::move(text)) : Value::Data(std::move(text));
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return StrRepr(v.s);
    case Value::Kind::kList: {
      std::string s = "[";
      for (size_t k = 0; k < v.list->size(); ++k) s += (k ? ", " : "") + Repr((*v.list)[k]);
      return s + "]";
    }
    case Value::Kind::kDict: {
      if (v.is_namespace) return "<Namespace>";
      std::string s = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        s += (k ? ", " : "") + StrRepr((*v.dict)[k].first) + ": " + Repr((*v.dict)[k].second);
      }
      return s + "}";
    }
    default: return ToStr(v).s;
  }
}

Value ToStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return Value::Str("");
    case Value::Kind::kNone: return Value::Str("None");
    case Value::Kind::kBool: return Value::Str(v.b ? "True" : "False");
    case Value::Kind::kInt: return Value::Str(std::to_string(v.i));
    case Value::Kind::kFloat: return Value::Str(FloatRepr(v.f));
    case Value::Kind::kString: return v;
    case Value::Kind::kList:
    case Value::Kind::kDict: return Value::Str(Repr(v));
    case Value::Kind::kFunc: return Value::Str("<function " + v.s + ">");
  }
  return Value::Str("");
}

bool IsNumber(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kFloat || v.kind == Value::Kind::kBool;
}
int64_t AsInt(const Value& v) {
  if (v.kind == Value::Kind::kBool) return int64_t(v.b);
  if (v.kind != Value::Kind::kFloat) return v.i;
  // [-2^63, 2^63): the doubles that truncate to an int64_t (NaN fails every comparison).
  if (!(v.f >= -0x1p63 && v.f < 0x1p63)) throw JinjaError("integer out of range");
  return int64_t(v.f);
}
double AsDouble(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : v.kind == Value::Kind::kBool ? double(v.b) : double(v.i);
}

bool Equal(const Value& a, const Value& b) {
  if (IsNumber(a) && IsNumber(b)) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat) return AsDouble(a) == AsDouble(b);
    return AsInt(a) == AsInt(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::kDict:
      if (a.dict == b.dict) return true;
      if (a.dict->size() != b.dict->size() || a.is_namespace || b.is_namespace) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* w = b.Find(k);
        if (!w || !Equal(v, *w)) return false;
      }
      return true;
    case Value::Kind::kFunc: return a.s == b.s && a.self == b.self;
    default: return false;
  }
}

int Compare(const Value& a, const Value& b) {
  if (IsNumber(a) && IsNumber(b)) return AsDouble(a) < AsDouble(b) ? -1 : AsDouble(a) > AsDouble(b) ? 1 : 0;
  if (a.kind == Value::Kind::kString && b.kind == Value::Kind::kString)
    return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
  if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (!Equal((*a.list)[k], (*b.list)[k])) return Compare((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw JinjaError("cannot order these values");
}

std::string ToJson(const Value& v, int indent) {
  std::string out;
  Json(v, indent, 0, &out);
  return out;
}

uint32_t NextCodepoint(const std::string& s, size_t* i) {
  const unsigned char c = static_cast<unsigned char>(s[*i]);
  const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (*i + n > s.size()) {
    ++*i;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += n;
  return cp;
}

size_t CodepointCount(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) NextCodepoint(s, &i);
  return n;
}

bool IsPyWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

Value Strip(const Value& v, bool left, bool right, const Value* chars) {
  auto strip_this = [&](uint32_t c) {
    if (!chars || chars->kind == Value::Kind::kNone) return IsPyWhitespace(c);
    for (size_t i = 0; i < chars->s.size();)
      if (NextCodepoint(chars->s, &i) == c) return true;
    return false;
  };
  const std::string& s = v.s;
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t n = b;
      if (!strip_this(NextCodepoint(s, &n))) break;
      b = n;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t n = start;
      if (!strip_this(NextCodepoint(s, &n)) || n != e) break;
      e = start;
    }
  }
  return Substr(v, b, e);
}

}  // namespace impress::jinja
