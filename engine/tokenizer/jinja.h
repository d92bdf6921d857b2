// Jinja chat templates: a small interpreter for the part of Jinja2 that models' chat templates
// (GGUF tokenizer.chat_template, tokenizer_config.json chat_template) are written in, rendering
// byte for byte as Hugging Face transformers renders them with jinja2 (trim_blocks,
// lstrip_blocks, the template's final newline dropped).
//
// Supported: text, {{ }}, {% %}, {# #} with -/+ whitespace control; if/elif/else, for (loop.index,
// index0, first, last, length, revindex; tuple targets, `if` filter, else), set (names, tuple
// targets, namespace attributes); literals (strings, numbers, lists, tuples, dicts, true/false/
// none); . and [] access, slices, calls; + - * / // % ** ~, comparisons, in / not in, and/or/not,
// `x if c else y`; tests (defined, undefined, none, string, number, integer, float, boolean,
// mapping, iterable, sequence, true, false, odd, even, equalto, sameas); filters (trim, length,
// count, default/d, tojson, string, upper, lower, title, capitalize, join, items, list, first,
// last, reverse, reject, select, rejectattr, selectattr, map(attribute), replace, int, float,
// abs, safe); string methods (strip, lstrip, rstrip, startswith, endswith, split, upper, lower,
// replace, title); dict methods (items, keys, values, get); globals raise_exception, namespace,
// range. Anything else (macros, call blocks, includes) is a parse error, so the caller can fall
// back to a built-in format.
//
// Data tracking: strings passed in as data (Value::Data: the messages' content) keep the byte
// ranges they cover through concatenation, slicing and trimming, and Render reports which bytes
// of the output came from data. Everything else is the template's own markup, which is what may
// become special tokens.
//
// Templates are immutable after Parse; Render is const and may run on any thread at once.
// Hostile templates (model metadata) end in an error, never a crash: nesting, output size and
// loop lengths are bounded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/tokenizer/tokenizer.h"  // ByteRange

namespace impress::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, as Python's dict

// A template value: Python's data model as far as chat templates need it. Lists and dicts are
// shared (as Python references are); only namespace() objects are ever mutated.
struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunc };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                // kString: the text; kFunc: the function's or method's name
  std::vector<ByteRange> data;  // kString: sorted, disjoint ranges of s that came from data
  std::shared_ptr<List> list;   // kList
  std::shared_ptr<Dict> dict;   // kDict
  bool is_namespace = false;    // kDict made by namespace(): attributes may be set
  std::shared_ptr<Value> self;  // kFunc: the object a method is bound to (null: a global)

  static Value None() { return Make(Kind::kNone); }
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value Str(std::string text);   // template text
  static Value Data(std::string text);  // caller's data (message content): never markup
  static Value MakeList(List items);
  static Value MakeDict(Dict items);
  static Value Func(std::string name, std::shared_ptr<Value> self = nullptr);
  static Value Make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }

  bool defined() const { return kind != Kind::kUndefined; }
  // Python's truth value.
  bool Truthy() const;
  // dict lookup by key (nullptr when absent or not a dict).
  const Value* Find(std::string_view key) const;
};

struct Node;

class Template {
 public:
  // Parses a template source. Errors say what and where (byte offset).
  static Result<Template> Parse(std::string_view source);

  // Renders with `globals` as the top-level variables (raise_exception, namespace and range
  // are always there). `data` (optional) receives the sorted byte ranges of the output that
  // came from Value::Data strings. raise_exception() and runtime type errors are errors.
  Result<std::string> Render(const Dict& globals, std::vector<ByteRange>* data = nullptr) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace impress::jinja
