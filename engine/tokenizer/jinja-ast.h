// The syntax tree of a parsed Jinja template (engine/tokenizer/jinja.h), shared by the parser
// (jinja-parse.cpp) and the evaluator (jinja-eval.cpp); private to those two files.
//
// Inside the interpreter, errors travel as JinjaError exceptions (deeply recursive code stays
// readable); Template::Parse and Template::Render turn them into a Status, so none leaves the
// module. Immutable once parsed.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/tokenizer/jinja.h"

namespace impress::jinja {

struct JinjaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using NodePtr = std::shared_ptr<const Node>;

struct Node {
  enum class Kind {
    // statements
    kBody,     // kids: the statements in order
    kText,     // literal.s: template text
    kOutput,   // kids[0]: the expression printed
    kIf,       // kids: cond, body, cond, body, ..., [null, else body]
    kFor,      // names: targets; kids: iterable, body, filter (or null), else body (or null)
    kSet,      // names: targets; kids[0]: the value
    kSetAttr,  // names: {namespace variable, attribute}; kids[0]: the value
    // expressions
    kLiteral,  // literal
    kName,     // name
    kAttr,     // kids[0].name
    kItem,     // kids[0][kids[1]]
    kSlice,    // kids[0][kids[1]:kids[2]:kids[3]] (null: omitted)
    kCall,     // kids[0](kids[1..]); names[k]: keyword of kids[k + 1] or ""
    kFilter,   // kids[0] | name(kids[1..]); names as for kCall
    kTest,     // kids[0] is name(kids[1..])
    kUnary,    // name: "-", "+" or "not"; kids[0]
    kBinary,   // name: the operator; kids[0], kids[1]
    kTernary,  // kids[1] if kids[0] else kids[2] (null: undefined)
    kList,     // [kids...]
    kTuple,    // (kids...)
    kDict,     // {kids[0]: kids[1], ...}
  };
  Kind kind = Kind::kBody;
  std::string name;
  std::vector<std::string> names;
  std::vector<NodePtr> kids;
  Value literal;
  size_t pos = 0;  // byte offset in the source, for errors
};

}  // namespace impress::jinja
