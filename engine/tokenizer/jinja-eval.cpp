// Jinja evaluation: statements and expressions of a parsed template (jinja-ast.h) run with
// jinja2's semantics (its Undefined, scoping of loops and namespaces, attribute-then-item
// lookup), the filters, tests and methods listed in jinja.h.
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/tokenizer/jinja-value.h"

namespace impress::jinja {
namespace {

constexpr size_t kMaxOutput = size_t(64) << 20;  // bytes a template may write
constexpr size_t kMaxSteps = 20'000'000;         // nodes evaluated: bounds loops over ranges
constexpr int64_t kMaxRange = 1'000'000;         // items of a range or a list sum
constexpr size_t kMaxWork = size_t(256) << 20;   // bytes of the values a render makes (see Eval)
constexpr size_t kPieceWork = 160;               // the same for each piece a replace or split makes

using Kind = Value::Kind;
using Args = std::vector<Value>;
using Kwargs = std::map<std::string, Value>;

[[noreturn]] void Fail(const std::string& what) { throw JinjaError(what); }

// Integer arithmetic as Python's where the result fits an int64_t, an error where it does not
// (Python's integers are unbounded; a template that needs 2^63 is not a chat template).
int64_t AddInt(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) Fail("integer overflow");
  return r;
}
int64_t SubInt(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) Fail("integer overflow");
  return r;
}
int64_t MulInt(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) Fail("integer overflow");
  return r;
}

const Value* Arg(const Args& a, const Kwargs& kw, size_t k, const char* name) {
  if (k < a.size()) return &a[k];
  auto it = kw.find(name);
  return it == kw.end() ? nullptr : &it->second;
}

void NeedString(const Value& v, const char* what) {
  if (v.kind != Kind::kString) Fail(std::string(what) + " needs a string, got " + Repr(v));
}

// The byte offset `n` code points after byte `at` of s (n <= 0: at).
size_t SkipCodepoints(const std::string& s, size_t at, int64_t n) {
  for (int64_t c = 0; c < n; ++c) NextCodepoint(s, &at);
  return at;
}

// The items a for loop (or list()) walks: list items, dict keys, string characters.
List Iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList: return *v.list;
    case Kind::kDict: {
      List keys;
      for (const auto& [k, x] : *v.dict) keys.push_back(Value::Str(k));
      return keys;
    }
    case Kind::kString: {
      // A value per code point: bounded like a range (a chat template walks short strings).
      if (v.s.size() > size_t(kMaxRange)) Fail("string too long to iterate");
      List chars;
      for (size_t i = 0; i < v.s.size();) {
        const size_t b = i;
        NextCodepoint(v.s, &i);
        chars.push_back(Substr(v, b, i));
      }
      return chars;
    }
    default: Fail("cannot iterate over " + Repr(v));
  }
}

int64_t Length(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return int64_t(CodepointCount(v.s));
    case Kind::kList: return int64_t(v.list->size());
    case Kind::kDict: return int64_t(v.dict->size());
    default: Fail("object of this type has no length: " + Repr(v));
  }
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kUndefined: return false;
    case Kind::kString: NeedString(item, "'in <string>'"); return container.s.find(item.s) != std::string::npos;
    case Kind::kList:
      return std::any_of(container.list->begin(), container.list->end(),
                         [&](const Value& x) { return Equal(x, item); });
    case Kind::kDict: return item.kind == Kind::kString && container.Find(item.s) != nullptr;
    default: Fail("argument of this type is not iterable: " + Repr(container));
  }
}

class Evaluator {
 public:
  Evaluator(const Dict& globals, std::vector<ByteRange>* data) : data_(data) {
    scopes_.emplace_back();
    for (const char* f : {"raise_exception", "namespace", "range"}) scopes_[0][f] = Value::Func(f);
    for (const auto& [k, v] : globals) scopes_[0][k] = v;
    scopes_.emplace_back();  // the template's own variables
  }
  // A namespace is the only value a template can change after making it, so it is the only way to
  // a reference cycle (`{% set ns.me = ns %}`); emptying every namespace at the end breaks them all.
  ~Evaluator() {
    for (const std::weak_ptr<Dict>& w : namespaces_) {
      if (std::shared_ptr<Dict> d = w.lock()) Dict().swap(*d);
    }
  }
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  void Exec(const Node& n) {
    Step();
    switch (n.kind) {
      case Node::Kind::kBody:
        for (const NodePtr& k : n.kids) Exec(*k);
        break;
      case Node::Kind::kText: Write(n.literal); break;
      case Node::Kind::kOutput: Write(ToStr(Eval(*n.kids[0]))); break;
      case Node::Kind::kIf:
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          if (!n.kids[k] || Eval(*n.kids[k]).Truthy()) {
            Exec(*n.kids[k + 1]);
            break;
          }
        }
        break;
      case Node::Kind::kFor: For(n); break;
      case Node::Kind::kSet: Assign(n.names, Eval(*n.kids[0])); break;
      case Node::Kind::kSetAttr: {
        Value ns = Lookup(n.names[0]);
        if (ns.kind != Kind::kDict || !ns.is_namespace) Fail("cannot assign attribute on a non-namespace object");
        Value v = Eval(*n.kids[0]);
        for (auto& [k, x] : *ns.dict) {
          if (k == n.names[1]) {
            x = std::move(v);
            return;
          }
        }
        ns.dict->emplace_back(n.names[1], std::move(v));
        break;
      }
      default: Fail("not a statement");
    }
  }

  std::string TakeOutput() { return std::move(out_); }

 private:
  void Charge(size_t bytes) {
    work_ += bytes;
    if (work_ > kMaxWork) Fail("template ran too long");
  }
  void Step() {
    if (++steps_ > kMaxSteps) Fail("template ran too long");
  }
  void Write(const Value& s) {
    if (out_.size() + s.s.size() > kMaxOutput) Fail("template output too large");
    if (data_) {
      for (const ByteRange& d : s.data) {
        const ByteRange r{d.begin + out_.size(), d.end + out_.size()};
        if (!data_->empty() && data_->back().end == r.begin) {
          data_->back().end = r.end;
        } else {
          data_->push_back(r);
        }
      }
    }
    out_ += s.s;
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }
  void Assign(const std::vector<std::string>& names, const Value& v) {
    if (names.size() == 1) {
      scopes_.back()[names[0]] = v;
      return;
    }
    const List items = Iterate(v);
    if (items.size() != names.size()) Fail("cannot unpack " + std::to_string(items.size()) + " values");
    for (size_t k = 0; k < names.size(); ++k) scopes_.back()[names[k]] = items[k];
  }

  void For(const Node& n) {
    List items;
    {
      const List all = Iterate(Eval(*n.kids[0]));
      for (const Value& x : all) {
        if (n.kids[2]) {
          scopes_.emplace_back();
          Assign(n.names, x);
          const bool keep = Eval(*n.kids[2]).Truthy();
          scopes_.pop_back();
          if (!keep) continue;
        }
        items.push_back(x);
      }
    }
    if (items.empty()) {
      if (n.kids[3]) Exec(*n.kids[3]);
      return;
    }
    const int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
      scopes_.emplace_back();
      Assign(n.names, items[size_t(k)]);
      Dict loop = {{"index", Value::Int(k + 1)},
                   {"index0", Value::Int(k)},
                   {"revindex", Value::Int(len - k)},
                   {"revindex0", Value::Int(len - k - 1)},
                   {"first", Value::Bool(k == 0)},
                   {"last", Value::Bool(k == len - 1)},
                   {"length", Value::Int(len)},
                   {"previtem", k > 0 ? items[size_t(k - 1)] : Value()},
                   {"nextitem", k + 1 < len ? items[size_t(k + 1)] : Value()}};
      scopes_.back()["loop"] = Value::MakeDict(std::move(loop));
      Exec(*n.kids[1]);
      scopes_.pop_back();
    }
  }

  // jinja2's environment.getattr: the attribute (methods of strings and dicts), else the item.
  Value GetAttr(const Value& obj, const std::string& name) {
    if (obj.kind == Kind::kUndefined) Fail("'" + name + "' of an undefined value");
    static const char* const kStrMethods[] = {"strip", "lstrip", "rstrip",  "startswith", "endswith",  "split",
                                              "upper", "lower",  "replace", "title",      "capitalize"};
    static const char* const kDictMethods[] = {"items", "keys", "values", "get"};
    if (obj.kind == Kind::kString) {
      for (const char* m : kStrMethods)
        if (name == m) return Value::Func(name, std::make_shared<Value>(obj));
    }
    if (obj.kind == Kind::kDict && !obj.is_namespace) {
      for (const char* m : kDictMethods)
        if (name == m) return Value::Func(name, std::make_shared<Value>(obj));
    }
    if (const Value* v = obj.Find(name)) return *v;
    return Value();
  }
  // jinja2's environment.getitem: the item, else the attribute for a string key.
  Value GetItem(const Value& obj, const Value& key) {
    if (obj.kind == Kind::kUndefined) Fail("subscript of an undefined value");
    if ((obj.kind == Kind::kList || obj.kind == Kind::kString) && (key.kind == Kind::kInt || key.kind == Kind::kBool)) {
      const int64_t n = obj.kind == Kind::kList ? int64_t(obj.list->size()) : int64_t(obj.s.size());
      int64_t k = AsInt(key);
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value();
      if (obj.kind == Kind::kList) return (*obj.list)[size_t(k)];
      // Strings index by code point.
      const int64_t m = int64_t(CodepointCount(obj.s));
      k = AsInt(key) < 0 ? AsInt(key) + m : AsInt(key);
      if (k < 0 || k >= m) return Value();
      const size_t at = SkipCodepoints(obj.s, 0, k);
      return Substr(obj, at, SkipCodepoints(obj.s, at, 1));
    }
    if (obj.kind == Kind::kDict && key.kind == Kind::kString) {
      if (const Value* v = obj.Find(key.s)) return *v;
    }
    if (key.kind == Kind::kString) return GetAttr(obj, key.s);
    return Value();
  }
  Value Slice(const Value& obj, const Value& b, const Value& e, const Value& st) {
    const bool is_str = obj.kind == Kind::kString;
    if (!is_str && obj.kind != Kind::kList) Fail("cannot slice " + Repr(obj));
    const int64_t n = is_str ? int64_t(CodepointCount(obj.s)) : int64_t(obj.list->size());
    int64_t step = st.defined() && st.kind != Kind::kNone ? AsInt(st) : 1;
    if (step == 0) Fail("slice step cannot be zero");
    step = std::clamp<int64_t>(step, -(n + 1), n + 1);  // a longer step takes one item all the same
    auto bound = [&](const Value& v, int64_t dflt) {
      if (!v.defined() || v.kind == Kind::kNone) return dflt;
      int64_t x = AsInt(v);
      if (x < 0) x += n;
      return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t from = bound(b, step > 0 ? 0 : n - 1), to = bound(e, step > 0 ? n : -1);
    if (is_str && step == 1) {  // s[i:j], the usual slice: code point offsets, no copy per code point
      const size_t at = SkipCodepoints(obj.s, 0, from);
      return Substr(obj, at, SkipCodepoints(obj.s, at, to - from));
    }
    const List items = is_str ? Iterate(obj) : *obj.list;
    List out;
    for (int64_t k = from; step > 0 ? k < to : k > to; k += step) out.push_back(items[size_t(k)]);
    if (!is_str) return Value::MakeList(std::move(out));
    Value s = Value::Str("");
    for (const Value& c : out) Append(&s, c);
    return s;
  }

  Value Binary(const std::string& op, const Node& n) {
    if (op == "and") {
      Value a = Eval(*n.kids[0]);
      return a.Truthy() ? Eval(*n.kids[1]) : a;
    }
    if (op == "or") {
      Value a = Eval(*n.kids[0]);
      return a.Truthy() ? a : Eval(*n.kids[1]);
    }
    const Value a = Eval(*n.kids[0]), b = Eval(*n.kids[1]);
    if (op == "~") return Concat(ToStr(a), ToStr(b));
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "<") return Value::Bool(Compare(a, b) < 0);
    if (op == ">") return Value::Bool(Compare(a, b) > 0);
    if (op == "<=") return Value::Bool(Compare(a, b) <= 0);
    if (op == ">=") return Value::Bool(Compare(a, b) >= 0);
    if (op == "in") return Value::Bool(Contains(b, a));
    if (op == "not in") return Value::Bool(!Contains(b, a));
    if (op == "+") {
      if (a.kind == Kind::kString && b.kind == Kind::kString) return Concat(a, b);
      if (a.kind == Kind::kList && b.kind == Kind::kList) {
        List r = *a.list;
        if (r.size() + b.list->size() > size_t(kMaxRange)) Fail("list too long");
        r.insert(r.end(), b.list->begin(), b.list->end());
        return Value::MakeList(std::move(r));
      }
    }
    if (op == "*" && a.kind == Kind::kString && (b.kind == Kind::kInt || b.kind == Kind::kBool)) {
      return Repeat(a, AsInt(b));
    }
    if (!IsNumber(a) || !IsNumber(b)) {
      Fail("unsupported operand types for " + op + ": " + Repr(a) + " and " + Repr(b));
    }
    const bool ints = a.kind != Kind::kFloat && b.kind != Kind::kFloat;
    const double x = AsDouble(a), y = AsDouble(b);
    if (op == "/") {
      if (y == 0) Fail("division by zero");
      return Value::Float(x / y);
    }
    if (ints) {
      const int64_t p = AsInt(a), q = AsInt(b);
      if (op == "+") return Value::Int(AddInt(p, q));
      if (op == "-") return Value::Int(SubInt(p, q));
      if (op == "*") return Value::Int(MulInt(p, q));
      if (op == "//" || op == "%") {
        if (q == 0) Fail("division by zero");
        if (q == -1) return Value::Int(op == "//" ? SubInt(0, p) : 0);  // INT64_MIN / -1 overflows
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) --d, m += q;  // Python floors
        return Value::Int(op == "//" ? d : m);
      }
      if (op == "**" && q >= 0) {
        int64_t r = 1;
        if (p == 1 || p == -1) return Value::Int(p == -1 && q % 2 == 1 ? -1 : 1);
        for (int64_t k = 0; k < q && r != 0; ++k) r = MulInt(r, p);  // overflows within 64 steps
        return Value::Int(r);
      }
    }
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "**") return Value::Float(std::pow(x, y));
    if (y == 0) Fail("division by zero");
    if (op == "//") return Value::Float(std::floor(x / y));
    if (op == "%") return Value::Float(x - y * std::floor(x / y));
    Fail("unknown operator " + op);
  }

  // Evaluates a call's arguments (kids[first..], keywords in names[k - first]).
  void CallArgs(const Node& n, size_t first, Args* args, Kwargs* kw) {
    for (size_t k = first; k < n.kids.size(); ++k) {
      const std::string& name = n.names[k - first];
      if (name.empty()) {
        args->push_back(Eval(*n.kids[k]));
      } else {
        (*kw)[name] = Eval(*n.kids[k]);
      }
    }
  }

  bool Test(const std::string& name, const Value& v, const Args& a) {
    if (name == "defined") return v.defined();
    if (name == "undefined") return !v.defined();
    if (name == "none") return v.kind == Kind::kNone;
    if (name == "string") return v.kind == Kind::kString;
    if (name == "number") return IsNumber(v) && v.kind != Kind::kBool;
    if (name == "integer") return v.kind == Kind::kInt;
    if (name == "float") return v.kind == Kind::kFloat;
    if (name == "boolean") return v.kind == Kind::kBool;
    if (name == "true") return v.kind == Kind::kBool && v.b;
    if (name == "false") return v.kind == Kind::kBool && !v.b;
    if (name == "mapping") return v.kind == Kind::kDict;
    if (name == "iterable") return v.kind == Kind::kList || v.kind == Kind::kDict || v.kind == Kind::kString;
    if (name == "sequence") return v.kind == Kind::kList || v.kind == Kind::kDict || v.kind == Kind::kString;
    if (name == "callable") return v.kind == Kind::kFunc;
    if (name == "odd" || name == "even") {
      if (v.kind != Kind::kInt) Fail("odd/even of a non-integer");
      return ((v.i % 2) != 0) == (name == "odd");
    }
    if (a.empty()) Fail("test '" + name + "' needs an argument or is not supported");
    if (name == "equalto" || name == "eq" || name == "==") return Equal(v, a[0]);
    if (name == "ne" || name == "!=") return !Equal(v, a[0]);
    if (name == "sameas") return v.kind == a[0].kind && (IsNumber(v) || v.kind == Kind::kNone) && Equal(v, a[0]);
    if (name == "in") return Contains(a[0], v);
    Fail("unsupported test '" + name + "'");
  }

  // select/reject/selectattr/rejectattr: items (or their attribute) passing a test.
  Value SelectFilter(const std::string& name, const Value& v, const Args& a) {
    const bool attr = name.ends_with("attr"), keep = name.starts_with("select");
    size_t k = 0;
    if (attr && a.empty()) Fail(name + " needs an attribute");
    const std::string attr_name = attr ? a[k++].s : "";
    const std::string test = k < a.size() ? a[k++].s : "";
    const Args rest(a.begin() + std::ptrdiff_t(std::min(k, a.size())), a.end());
    List out;
    for (const Value& x : Iterate(v)) {
      const Value subject = attr ? GetAttr(x, attr_name) : x;
      const bool pass = test.empty() ? subject.Truthy() : Test(test, subject, rest);
      if (pass == keep) out.push_back(x);
    }
    return Value::MakeList(std::move(out));
  }

  Value Filter(const std::string& name, const Value& v, const Args& a, const Kwargs& kw) {
    if (name == "default" || name == "d") {
      const Value* dflt = Arg(a, kw, 0, "default_value");
      const Value* boolean = Arg(a, kw, 1, "boolean");
      const bool use = !v.defined() || (boolean && boolean->Truthy() && !v.Truthy());
      return use ? (dflt ? *dflt : Value::Str("")) : v;
    }
    if (name == "length" || name == "count") return Value::Int(Length(v));
    if (name == "trim") return Strip(ToStr(v), true, true, Arg(a, kw, 0, "chars"));
    if (name == "string") return ToStr(v);
    if (name == "safe") return v;
    if (name == "tojson") {
      const Value* indent = Arg(a, kw, 0, "indent");
      return Derived(ToJson(v, indent && indent->kind != Kind::kNone ? int(AsInt(*indent)) : -1), v);
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return Method(name, ToStr(v), a);
    if (name == "replace") return Method(name, ToStr(v), a);
    if (name == "items") {
      if (v.kind != Kind::kDict) Fail("items of a non-mapping");
      List out;
      for (const auto& [k, x] : *v.dict) out.push_back(Value::MakeList({Value::Str(k), x}));
      return Value::MakeList(std::move(out));
    }
    if (name == "list") return Value::MakeList(Iterate(v));
    if (name == "first" || name == "last") {
      const List items = Iterate(v);
      return items.empty() ? Value() : name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
      List items = Iterate(v);
      std::reverse(items.begin(), items.end());
      if (v.kind != Kind::kString) return Value::MakeList(std::move(items));
      Value s = Value::Str("");
      for (const Value& c : items) Append(&s, c);
      return s;
    }
    if (name == "join") {
      const Value* sep = Arg(a, kw, 0, "d");
      const Value* attr = Arg(a, kw, 1, "attribute");
      Value s = Value::Str("");
      bool first = true;
      for (const Value& x : Iterate(v)) {
        if (!first && sep) Append(&s, ToStr(*sep));
        first = false;
        Append(&s, ToStr(attr ? GetAttr(x, attr->s) : x));
      }
      return s;
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      return SelectFilter(name, v, a);
    }
    if (name == "map") {
      const Value* attr = Arg(a, kw, 99, "attribute");
      List out;
      for (const Value& x : Iterate(v)) {
        if (attr) {
          out.push_back(GetAttr(x, attr->s));
        } else if (!a.empty()) {
          out.push_back(Filter(a[0].s, x, Args(a.begin() + 1, a.end()), {}));
        } else {
          out.push_back(x);
        }
      }
      return Value::MakeList(std::move(out));
    }
    if (name == "int") {
      if (IsNumber(v)) return Value::Int(AsInt(v));
      try {
        return Value::Int(v.kind == Kind::kString ? std::stoll(v.s) : 0);
      } catch (const std::exception&) {
        return Value::Int(0);
      }
    }
    if (name == "float") return Value::Float(IsNumber(v) ? AsDouble(v) : 0.0);
    if (name == "abs")
      return v.kind == Kind::kFloat ? Value::Float(std::fabs(v.f))
                                    : Value::Int(AsInt(v) < 0 ? SubInt(0, AsInt(v)) : AsInt(v));
    Fail("unsupported filter '" + name + "'");
  }

  Value Method(const std::string& name, const Value& self, const Args& a) {
    if (self.kind == Kind::kString) {
      const Value* chars = a.empty() ? nullptr : &a[0];
      if (name == "strip") return Strip(self, true, true, chars);
      if (name == "lstrip") return Strip(self, true, false, chars);
      if (name == "rstrip") return Strip(self, false, true, chars);
      if (name == "startswith" || name == "endswith") {
        if (a.empty()) Fail(name + " needs an argument");
        NeedString(a[0], name.c_str());
        return Value::Bool(name == "startswith" ? self.s.starts_with(a[0].s) : self.s.ends_with(a[0].s));
      }
      if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
        std::string s = self.s;
        const bool upper = name == "upper", title = name == "title", capitalize = name == "capitalize";
        bool word_start = true;
        for (size_t k = 0; k < s.size(); ++k) {
          const unsigned char c = static_cast<unsigned char>(s[k]);
          const bool up = upper || (title && word_start) || (capitalize && k == 0);
          s[k] = char(up ? std::toupper(c) : std::tolower(c));
          word_start = !std::isalpha(c);
        }
        return Derived(std::move(s), self);
      }
      if (name == "replace") {
        if (a.size() < 2) Fail("replace needs two arguments");
        NeedString(a[0], "replace");
        NeedString(a[1], "replace");
        if (a[0].s.empty()) Fail("replace of an empty string is not supported");
        std::string s;
        size_t at = 0;
        for (size_t p; (p = self.s.find(a[0].s, at)) != std::string::npos; at = p + a[0].s.size()) {
          s.append(self.s, at, p - at).append(a[1].s);
          if (s.size() > kMaxStringBytes) Fail("string too large");
          Charge(kPieceWork);
        }
        s += self.s.substr(at);
        return Derived(std::move(s), self);
      }
      if (name == "split") {
        List out;
        if (a.empty() || a[0].kind == Kind::kNone) {
          size_t i = 0;
          while (i < self.s.size()) {
            size_t b = i, n = i;
            while (b < self.s.size() && (n = b, IsPyWs(self.s, &n))) b = n;
            if (b >= self.s.size()) break;
            size_t e = b;
            while (e < self.s.size() && !(n = e, IsPyWs(self.s, &n))) NextCodepoint(self.s, &e);
            out.push_back(Substr(self, b, e));
            Charge(kPieceWork + (e - b));
            i = e;
          }
        } else {
          NeedString(a[0], "split");
          if (a[0].s.empty()) Fail("empty separator");
          size_t at = 0;
          for (size_t p; (p = self.s.find(a[0].s, at)) != std::string::npos; at = p + a[0].s.size()) {
            out.push_back(Substr(self, at, p));
            Charge(kPieceWork + (p - at));
          }
          out.push_back(Substr(self, at, self.s.size()));
        }
        return Value::MakeList(std::move(out));
      }
    }
    if (self.kind == Kind::kDict) {
      if (name == "items") return Filter("items", self, {}, {});
      if (name == "keys") return Value::MakeList(Iterate(self));
      if (name == "values") {
        List out;
        for (const auto& [k, x] : *self.dict) out.push_back(x);
        return Value::MakeList(std::move(out));
      }
      if (name == "get") {
        if (a.empty()) Fail("get needs a key");
        const Value* v = a[0].kind == Kind::kString ? self.Find(a[0].s) : nullptr;
        return v ? *v : a.size() > 1 ? a[1] : Value::None();
      }
    }
    Fail("unsupported method '" + name + "'");
  }
  static bool IsPyWs(const std::string& s, size_t* i) { return IsPyWhitespace(NextCodepoint(s, i)); }

  Value Call(const Value& f, const Args& a, const Kwargs& kw) {
    if (f.kind != Kind::kFunc) Fail("not callable: " + Repr(f));
    if (f.self) return Method(f.s, *f.self, a);
    if (f.s == "raise_exception") Fail("raise_exception: " + (a.empty() ? std::string() : ToStr(a[0]).s));
    if (f.s == "namespace") {
      Value ns = Value::MakeDict({});
      ns.is_namespace = true;
      namespaces_.push_back(ns.dict);
      if (!a.empty() && a[0].kind == Kind::kDict) *ns.dict = *a[0].dict;
      for (const auto& [k, v] : kw) ns.dict->emplace_back(k, v);
      return ns;
    }
    if (f.s == "range") {
      if (a.empty()) Fail("range needs an argument");
      const int64_t b = a.size() > 1 ? AsInt(a[0]) : 0, e = a.size() > 1 ? AsInt(a[1]) : AsInt(a[0]);
      const int64_t st = a.size() > 2 ? AsInt(a[2]) : 1;
      if (st == 0) Fail("range step cannot be zero");
      List out;
      for (int64_t k = b; st > 0 ? k < e : k > e;) {
        if (int64_t(out.size()) >= kMaxRange) Fail("range too long");
        out.push_back(Value::Int(k));
        if (__builtin_add_overflow(k, st, &k)) break;  // past every int64_t end
      }
      return Value::MakeList(std::move(out));
    }
    Fail("unknown function " + f.s);
  }

 public:
  // Every value an expression makes is copied, so the bytes of the strings and the items of the
  // lists made bound the render's work (a loop that copies a long string each step ends too).
  Value Eval(const Node& n) {
    Value v = EvalNode(n);
    Charge(v.kind == Kind::kString ? v.s.size() : v.kind == Kind::kList ? v.list->size() * sizeof(Value) : 0);
    return v;
  }

 private:
  Value EvalNode(const Node& n) {
    Step();
    switch (n.kind) {
      case Node::Kind::kLiteral: return n.literal;
      case Node::Kind::kName: return Lookup(n.name);
      case Node::Kind::kAttr: return GetAttr(Eval(*n.kids[0]), n.name);
      case Node::Kind::kItem: return GetItem(Eval(*n.kids[0]), Eval(*n.kids[1]));
      case Node::Kind::kSlice: {
        auto opt = [&](size_t k) { return n.kids[k] ? Eval(*n.kids[k]) : Value(); };
        return Slice(Eval(*n.kids[0]), opt(1), opt(2), opt(3));
      }
      case Node::Kind::kCall: {
        Args a;
        Kwargs kw;
        const Value f = Eval(*n.kids[0]);
        CallArgs(n, 1, &a, &kw);
        return Call(f, a, kw);
      }
      case Node::Kind::kFilter: {
        Args a;
        Kwargs kw;
        const Value v = Eval(*n.kids[0]);
        CallArgs(n, 1, &a, &kw);
        return Filter(n.name, v, a, kw);
      }
      case Node::Kind::kTest: {
        Args a;
        Kwargs kw;
        const Value v = Eval(*n.kids[0]);
        CallArgs(n, 1, &a, &kw);
        return Value::Bool(Test(n.name, v, a));
      }
      case Node::Kind::kUnary: {
        const Value v = Eval(*n.kids[0]);
        if (n.name == "not") return Value::Bool(!v.Truthy());
        if (!IsNumber(v)) Fail("bad operand for unary " + n.name);
        if (n.name == "+") return v;
        return v.kind == Kind::kFloat ? Value::Float(-v.f) : Value::Int(SubInt(0, AsInt(v)));
      }
      case Node::Kind::kBinary: return Binary(n.name, n);
      case Node::Kind::kTernary:
        if (Eval(*n.kids[0]).Truthy()) return Eval(*n.kids[1]);
        return n.kids[2] ? Eval(*n.kids[2]) : Value();
      case Node::Kind::kList:
      case Node::Kind::kTuple: {
        List items;
        for (const NodePtr& k : n.kids) items.push_back(Eval(*k));
        return Value::MakeList(std::move(items));
      }
      case Node::Kind::kDict: {
        Dict items;
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          const Value key = Eval(*n.kids[k]);
          NeedString(key, "dict key");
          items.emplace_back(key.s, Eval(*n.kids[k + 1]));
        }
        return Value::MakeDict(std::move(items));
      }
      default: Fail("not an expression");
    }
  }

 private:
  std::vector<std::map<std::string, Value>> scopes_;  // [0]: globals; [1]: the template's; then loops
  std::string out_;
  std::vector<ByteRange>* data_;
  std::vector<std::weak_ptr<Dict>> namespaces_;
  size_t steps_ = 0;
  size_t work_ = 0;  // bytes of the values Eval made
};

}  // namespace

Result<std::string> Template::Render(const Dict& globals, std::vector<ByteRange>* data) const {
  if (data) data->clear();
  if (!root_) return Status::InvalidArgument("chat template: not parsed");
  try {
    Evaluator ev(globals, data);
    ev.Exec(*root_);
    return ev.TakeOutput();
  } catch (const JinjaError& e) {
    if (data) data->clear();
    return Status::InvalidArgument(std::string("chat template: ") + e.what());
  }
}

}  // namespace impress::jinja
