// Jinja template parsing: the source split into text and tags with jinja2's whitespace rules
// (trim_blocks, lstrip_blocks, -/+ markers), tags lexed into tokens, and a recursive-descent
// parser with jinja2's operator precedence (jinja2/parser.py) building the tree of jinja-ast.h.
#include <cctype>
#include <string>

#include "engine/tokenizer/jinja-ast.h"

namespace impress::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting of blocks and expressions: bounds the recursion

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

struct Tok {
  enum Type { kName, kNumber, kString, kOp, kEnd } type = kEnd;
  std::string text;  // name, operator, or decoded string
  Value number;
  size_t pos = 0;
};

// One piece of the source: text, a {{ }} or a {% %} with its tokens (ending in kEnd).
struct Segment {
  enum Kind { kText, kVar, kBlock } kind;
  std::string text;
  std::vector<Tok> toks;
  size_t pos;
};

[[noreturn]] void Fail(size_t pos, const std::string& what) {
  throw JinjaError("template byte " + std::to_string(pos) + ": " + what);
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    *out += char(c);
  } else if (c < 0x800) {
    *out += char(0xC0 | (c >> 6));
    *out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    *out += char(0xE0 | (c >> 12));
    *out += char(0x80 | ((c >> 6) & 0x3F));
    *out += char(0x80 | (c & 0x3F));
  } else {
    *out += char(0xF0 | (c >> 18));
    *out += char(0x80 | ((c >> 12) & 0x3F));
    *out += char(0x80 | ((c >> 6) & 0x3F));
    *out += char(0x80 | (c & 0x3F));
  }
}

// A string literal at src[p] (a quote): decoded as jinja2 does (Python's unicode-escape).
// Returns the offset after the closing quote.
size_t LexString(std::string_view src, size_t p, std::string* out) {
  const char q = src[p++];
  while (p < src.size() && src[p] != q) {
    if (src[p] != '\\') {
      *out += src[p++];
      continue;
    }
    if (++p >= src.size()) break;
    const char e = src[p++];
    switch (e) {
      case 'n': *out += '\n'; break;
      case 't': *out += '\t'; break;
      case 'r': *out += '\r'; break;
      case 'b': *out += '\b'; break;
      case 'f': *out += '\f'; break;
      case 'v': *out += '\v'; break;
      case 'a': *out += '\a'; break;
      case '0': *out += '\0'; break;
      case '\\': *out += '\\'; break;
      case '\'': *out += '\''; break;
      case '"': *out += '"'; break;
      case '\n': break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (p + n > src.size()) Fail(p, "truncated escape");
        uint32_t c = 0;
        for (size_t k = 0; k < n; ++k) {
          const char h = src[p + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) Fail(p, "bad escape");
          c = c * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (c > 0x10FFFF) Fail(p, "bad escape");
        AppendUtf8(c, out);
        p += n;
        break;
      }
      default:  // Python keeps unknown escapes as written
        *out += '\\';
        *out += e;
    }
  }
  if (p >= src.size()) Fail(p, "unterminated string");
  return p + 1;
}

// Lexes the inside of a tag from src[p] to its closing delimiter ("}}" or "%}", at bracket
// depth 0). Returns the offset after the delimiter; *strip_after: '-', '+' or 0.
size_t LexTag(std::string_view src, size_t p, bool var, std::vector<Tok>* toks, char* strip_after) {
  const char close = var ? '}' : '%';
  int depth = 0;
  while (true) {
    while (p < src.size() && IsSpace(src[p])) ++p;
    if (p >= src.size()) Fail(p, "unclosed tag");
    if (depth == 0) {
      for (char sign : {'-', '+', '\0'}) {
        const size_t q = p + (sign ? 1 : 0);
        if ((!sign || src[p] == sign) && q + 1 < src.size() && src[q] == close && src[q + 1] == '}') {
          if (sign == '+' && var) continue;
          toks->push_back({Tok::kEnd, "", {}, p});
          *strip_after = sign;
          return q + 2;
        }
      }
    }
    Tok t;
    t.pos = p;
    const char c = src[p];
    if (c == '\'' || c == '"') {
      t.type = Tok::kString;
      p = LexString(src, p, &t.text);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = p;
      bool is_float = false;
      while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
        is_float = true;
        for (++e; e < src.size() && std::isdigit(static_cast<unsigned char>(src[e])); ++e) {
        }
      }
      std::string digits;
      for (size_t k = p; k < e; ++k)
        if (src[k] != '_') digits += src[k];
      t.type = Tok::kNumber;
      try {
        t.number = is_float ? Value::Float(std::stod(digits)) : Value::Int(std::stoll(digits));
      } catch (const std::exception&) {
        Fail(p, "bad number");
      }
      p = e;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p;
      while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      t.type = Tok::kName;
      t.text = std::string(src.substr(p, e - p));
      p = e;
    } else {
      t.type = Tok::kOp;
      for (std::string_view op : {"//", "**", "==", "!=", "<=", ">="}) {
        if (src.substr(p, 2) == op) t.text = std::string(op);
      }
      if (t.text.empty()) {
        if (std::string_view("+-*/%~<>=()[]{}.,:|").find(c) == std::string_view::npos) {
          Fail(p, std::string("unexpected character '") + c + "'");
        }
        t.text = std::string(1, c);
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      p += t.text.size();
    }
    toks->push_back(std::move(t));
  }
}

// The source as jinja2 sees it: newlines normalized to \n, one final newline dropped.
std::string Normalize(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<Segment> Split(const std::string& src) {
  std::vector<Segment> segs;
  size_t pos = 0;
  bool line_starting = true;
  while (pos < src.size()) {
    size_t p = pos;
    while ((p = src.find('{', p)) != std::string::npos) {
      if (p + 1 < src.size() && (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#')) break;
      ++p;
    }
    if (p == std::string::npos) {
      segs.push_back({Segment::kText, src.substr(pos), {}, pos});
      break;
    }
    std::string text = src.substr(pos, p - pos);
    const char kind = src[p + 1];
    const char sign = p + 2 < src.size() && (src[p + 2] == '-' || src[p + 2] == '+') ? src[p + 2] : 0;
    if (sign == '-') {
      while (!text.empty() && IsSpace(text.back())) text.pop_back();
    } else if (sign != '+' && kind != '{') {  // lstrip_blocks: a block or comment alone on its line
      const size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
      bool blank = l < text.size();
      for (size_t k = l; k < text.size() && blank; ++k) blank = IsSpace(text[k]);
      if ((l > 0 || line_starting) && blank) text.resize(l);
    }
    if (!text.empty()) segs.push_back({Segment::kText, std::move(text), {}, pos});
    size_t q = p + 2 + (sign ? 1 : 0);
    char strip_after = 0;
    if (kind == '#') {
      const size_t e = src.find("#}", q);
      if (e == std::string::npos) Fail(p, "unclosed comment");
      strip_after = e > q && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
      q = e + 2;
    } else {
      Segment seg{kind == '{' ? Segment::kVar : Segment::kBlock, "", {}, p};
      q = LexTag(src, q, kind == '{', &seg.toks, &strip_after);
      segs.push_back(std::move(seg));
    }
    if (strip_after == '-') {
      while (q < src.size() && IsSpace(src[q])) ++q;
    } else if (strip_after != '+' && kind != '{' && q < src.size() && src[q] == '\n') {
      ++q;  // trim_blocks
    }
    line_starting = src[q - 1] == '\n';
    pos = q;
  }
  return segs;
}

NodePtr Make(Node::Kind k, size_t pos, std::vector<NodePtr> kids = {}, std::string name = "") {
  auto n = std::make_shared<Node>();
  n->kind = k;
  n->pos = pos;
  n->kids = std::move(kids);
  n->name = std::move(name);
  return n;
}

// Expressions of one tag (jinja2's precedence: condexpr < or < and < not < compare < + - <
// ~ < * / // % < ** < unary < postfix and filters).
class ExprParser {
 public:
  ExprParser(const std::vector<Tok>& toks, int depth) : t_(toks), depth_(depth) {}

  const Tok& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t ahead = 0) const { return Peek(ahead).type == Tok::kOp && Peek(ahead).text == op; }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kName && Peek(ahead).text == name;
  }
  bool AtEnd() const { return Peek().type == Tok::kEnd; }
  const Tok& Next() {
    const Tok& t = Peek();
    if (i_ < t_.size() - 1) ++i_;
    return t;
  }
  bool SkipOp(const char* op) { return IsOp(op) ? (Next(), true) : false; }
  bool SkipName(const char* name) { return IsName(name) ? (Next(), true) : false; }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Fail(Peek().pos, std::string("expected '") + op + "'");
  }
  std::string ExpectName() {
    if (Peek().type != Tok::kName) Fail(Peek().pos, "expected a name");
    return Next().text;
  }
  void ExpectEnd() {
    if (!AtEnd()) Fail(Peek().pos, "unexpected '" + Peek().text + "'");
  }

  NodePtr Expression(bool with_condexpr = true) {
    Enter guard(this);
    NodePtr e = Or();
    while (with_condexpr && SkipName("if")) {
      NodePtr cond = Or();
      NodePtr other = SkipName("else") ? Expression() : nullptr;
      e = Make(Node::Kind::kTernary, cond->pos, {cond, e, other});
    }
    return e;
  }
  // An expression or a comma-separated tuple of them (set values, for iterables).
  NodePtr Tuple(bool with_condexpr = true) {
    const size_t pos = Peek().pos;
    std::vector<NodePtr> items{Expression(with_condexpr)};
    bool tuple = false;
    while (SkipOp(",")) {
      tuple = true;
      if (AtEnd() || IsName("in") || IsOp("=") || IsOp(")")) break;
      items.push_back(Expression(with_condexpr));
    }
    return tuple ? Make(Node::Kind::kTuple, pos, std::move(items)) : items[0];
  }
  // Assignment targets: names separated by commas, optionally in parentheses.
  std::vector<std::string> Targets() {
    const bool paren = SkipOp("(");
    std::vector<std::string> names{ExpectName()};
    while (SkipOp(",")) names.push_back(ExpectName());
    if (paren) ExpectOp(")");
    return names;
  }

 private:
  struct Enter {
    explicit Enter(ExprParser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) Fail(p->Peek().pos, "nested too deeply");
    }
    ~Enter() { --p->depth_; }
    ExprParser* p;
  };

  NodePtr Binary(const std::string& op, NodePtr a, NodePtr b) {
    const size_t pos = a->pos;
    return Make(Node::Kind::kBinary, pos, {std::move(a), std::move(b)}, op);
  }
  NodePtr Or() {
    NodePtr e = And();
    while (SkipName("or")) e = Binary("or", e, And());
    return e;
  }
  NodePtr And() {
    NodePtr e = Not();
    while (SkipName("and")) e = Binary("and", e, Not());
    return e;
  }
  NodePtr Not() {
    if (IsName("not")) {
      const size_t pos = Next().pos;
      Enter guard(this);
      return Make(Node::Kind::kUnary, pos, {Not()}, "not");
    }
    return Compare();
  }
  NodePtr Compare() {
    NodePtr e = Math1();
    while (true) {
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="})
        if (IsOp(o)) op = o;
      if (!op.empty()) {
        Next();
      } else if (SkipName("in")) {
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next(), Next();
        op = "not in";
      } else {
        return e;
      }
      e = Binary(op, e, Math1());
    }
  }
  NodePtr Math1() {
    NodePtr e = Concat();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Next().text;  // before the operand is parsed
      e = Binary(op, e, Concat());
    }
    return e;
  }
  NodePtr Concat() {
    NodePtr e = Math2();
    while (SkipOp("~")) e = Binary("~", e, Math2());
    return e;
  }
  NodePtr Math2() {
    NodePtr e = Pow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Next().text;
      e = Binary(op, e, Pow());
    }
    return e;
  }
  NodePtr Pow() {
    NodePtr e = Unary(true);
    while (SkipOp("**")) e = Binary("**", e, Unary(true));
    return e;
  }
  NodePtr Unary(bool with_filter) {
    Enter guard(this);
    NodePtr e;
    if (IsOp("-") || IsOp("+")) {
      const Tok& t = Next();
      e = Make(Node::Kind::kUnary, t.pos, {Unary(false)}, t.text);
    } else {
      e = Postfix(Primary());
    }
    return with_filter ? FilterExpr(e) : e;
  }
  NodePtr Primary() {
    const Tok& t = Next();
    switch (t.type) {
      case Tok::kName: {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kLiteral;
        n->pos = t.pos;
        if (t.text == "true" || t.text == "True") {
          n->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          n->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          n->literal = Value::None();
        } else {
          n->kind = Node::Kind::kName;
          n->name = t.text;
        }
        return n;
      }
      case Tok::kString: {
        std::string s = t.text;
        while (Peek().type == Tok::kString) s += Next().text;  // adjacent literals concatenate
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kLiteral;
        n->pos = t.pos;
        n->literal = Value::Str(std::move(s));
        return n;
      }
      case Tok::kNumber: {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kLiteral;
        n->pos = t.pos;
        n->literal = t.number;
        return n;
      }
      case Tok::kOp:
        if (t.text == "(") {
          if (SkipOp(")")) return Make(Node::Kind::kTuple, t.pos);
          NodePtr e = Tuple();
          ExpectOp(")");
          return e;
        }
        if (t.text == "[") {
          std::vector<NodePtr> items;
          while (!IsOp("]")) {
            items.push_back(Expression());
            if (!SkipOp(",")) break;
          }
          ExpectOp("]");
          return Make(Node::Kind::kList, t.pos, std::move(items));
        }
        if (t.text == "{") {
          std::vector<NodePtr> items;
          while (!IsOp("}")) {
            items.push_back(Expression());
            ExpectOp(":");
            items.push_back(Expression());
            if (!SkipOp(",")) break;
          }
          ExpectOp("}");
          return Make(Node::Kind::kDict, t.pos, std::move(items));
        }
        break;
      case Tok::kEnd: break;
    }
    Fail(t.pos, t.type == Tok::kEnd ? "unexpected end of tag" : "unexpected '" + t.text + "'");
  }
  // Arguments after '(' up to ')': positional, then name=value.
  void CallArgs(Node* n) {
    while (!IsOp(")")) {
      if (Peek().type == Tok::kName && IsOp("=", 1)) {
        n->names.push_back(Next().text);
        Next();
      } else {
        n->names.push_back("");
      }
      n->kids.push_back(Expression());
      if (!SkipOp(",")) break;
    }
    ExpectOp(")");
  }
  NodePtr Postfix(NodePtr e) {
    while (true) {
      if (IsOp(".")) {
        const size_t pos = Next().pos;
        const Tok& t = Next();
        if (t.type == Tok::kName) {
          e = Make(Node::Kind::kAttr, pos, {e}, t.text);
        } else if (t.type == Tok::kNumber && t.number.kind == Value::Kind::kInt) {
          auto idx = std::make_shared<Node>();
          idx->kind = Node::Kind::kLiteral;
          idx->literal = t.number;
          e = Make(Node::Kind::kItem, pos, {e, idx});
        } else {
          Fail(t.pos, "expected an attribute name");
        }
      } else if (IsOp("[")) {
        const size_t pos = Next().pos;
        std::vector<NodePtr> parts{e};
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          parts.push_back(IsOp(":") || IsOp("]") ? nullptr : Expression());
          if (!SkipOp(":")) break;
          slice = true;
        }
        ExpectOp("]");
        if (!slice && !parts[1]) Fail(pos, "empty subscript");
        if (slice) {
          parts.resize(4);
          e = Make(Node::Kind::kSlice, pos, std::move(parts));
        } else {
          e = Make(Node::Kind::kItem, pos, {e, parts[1]});
        }
      } else if (IsOp("(")) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kCall;
        n->pos = Next().pos;
        n->kids.push_back(e);
        CallArgs(n.get());
        e = n;
      } else {
        return e;
      }
    }
  }
  NodePtr FilterExpr(NodePtr e) {
    while (true) {
      if (IsOp("|")) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kFilter;
        n->pos = Next().pos;
        n->name = ExpectName();
        n->kids.push_back(e);
        if (SkipOp("(")) CallArgs(n.get());
        e = n;
      } else if (IsName("is")) {
        const size_t pos = Next().pos;
        const bool negated = SkipName("not");
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kTest;
        n->pos = pos;
        n->name = ExpectName();
        n->kids.push_back(e);
        if (SkipOp("(")) {
          CallArgs(n.get());
        } else if ((Peek().type == Tok::kString || Peek().type == Tok::kNumber ||
                    (Peek().type == Tok::kName && !IsName("else") && !IsName("or") && !IsName("and")) || IsOp("[") ||
                    IsOp("{")) &&
                   !AtEnd()) {
          n->names.push_back("");
          n->kids.push_back(Postfix(Primary()));
        }
        e = negated ? Make(Node::Kind::kUnary, pos, {NodePtr(n)}, "not") : NodePtr(n);
      } else if (IsOp("(")) {
        e = Postfix(e);
      } else {
        return e;
      }
    }
  }

  const std::vector<Tok>& t_;
  size_t i_ = 0;
  int depth_;
};

// Statements: the segments in order, blocks nested by their end tags.
class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  NodePtr Template() {
    std::string end;
    NodePtr body = Body({}, &end, 0);
    return body;
  }

 private:
  // Statements until a block whose keyword is in `stops` (returned in *stop, its parser left
  // positioned after the keyword in *rest).
  NodePtr Body(const std::vector<std::string>& stops, std::string* stop, int depth) {
    if (depth > kMaxDepth) Fail(pos_ < segs_.size() ? segs_[pos_].pos : 0, "blocks nested too deeply");
    auto body = std::make_shared<Node>();
    body->kind = Node::Kind::kBody;
    while (pos_ < segs_.size()) {
      const Segment& s = segs_[pos_++];
      if (s.kind == Segment::kText) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kText;
        n->pos = s.pos;
        n->literal = Value::Str(s.text);
        body->kids.push_back(n);
        continue;
      }
      ExprParser p(s.toks, depth);
      if (s.kind == Segment::kVar) {
        NodePtr e = p.Tuple();
        p.ExpectEnd();
        body->kids.push_back(Make(Node::Kind::kOutput, s.pos, {e}));
        continue;
      }
      const std::string kw = p.ExpectName();
      for (const std::string& st : stops) {
        if (kw == st) {
          *stop = kw;
          current_ = &s;
          return body;
        }
      }
      if (kw == "if") {
        body->kids.push_back(If(p, s.pos, depth));
      } else if (kw == "for") {
        body->kids.push_back(For(p, s.pos, depth));
      } else if (kw == "set") {
        body->kids.push_back(Set(p, s.pos));
      } else {
        Fail(s.pos, "unsupported or unexpected tag '" + kw + "'");
      }
    }
    if (!stops.empty()) Fail(segs_.empty() ? 0 : segs_.back().pos, "missing {% " + stops.back() + " %}");
    return body;
  }
  NodePtr If(ExprParser& p, size_t pos, int depth) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kIf;
    n->pos = pos;
    NodePtr cond = p.Expression();
    p.ExpectEnd();
    while (true) {
      std::string stop;
      NodePtr body = Body({"elif", "else", "endif"}, &stop, depth + 1);
      n->kids.push_back(cond);
      n->kids.push_back(body);
      ExprParser q(current_->toks, depth);
      q.Next();
      if (stop == "endif") {
        q.ExpectEnd();
        return n;
      }
      if (stop == "else") {
        q.ExpectEnd();
        n->kids.push_back(nullptr);
        n->kids.push_back(Body({"endif"}, &stop, depth + 1));
        ExprParser r(current_->toks, depth);
        r.Next();
        r.ExpectEnd();
        return n;
      }
      cond = q.Expression();
      q.ExpectEnd();
    }
  }
  NodePtr For(ExprParser& p, size_t pos, int depth) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kFor;
    n->pos = pos;
    n->names = p.Targets();
    if (!p.SkipName("in")) Fail(pos, "expected 'in'");
    n->kids.push_back(p.Tuple(/*with_condexpr=*/false));
    NodePtr filter = p.SkipName("if") ? p.Expression() : nullptr;
    if (p.IsName("recursive")) Fail(pos, "recursive loops are not supported");
    p.ExpectEnd();
    std::string stop;
    n->kids.push_back(Body({"else", "endfor"}, &stop, depth + 1));
    n->kids.push_back(filter);
    NodePtr else_body;
    if (stop == "else") else_body = Body({"endfor"}, &stop, depth + 1);
    n->kids.push_back(else_body);
    return n;
  }
  NodePtr Set(ExprParser& p, size_t pos) {
    auto n = std::make_shared<Node>();
    n->pos = pos;
    if (p.Peek().type == Tok::kName && p.IsOp(".", 1)) {
      n->kind = Node::Kind::kSetAttr;
      n->names.push_back(p.ExpectName());
      p.Next();
      n->names.push_back(p.ExpectName());
    } else {
      n->kind = Node::Kind::kSet;
      n->names = p.Targets();
    }
    if (!p.SkipOp("=")) Fail(pos, "block {% set %} is not supported");
    n->kids.push_back(p.Tuple());
    p.ExpectEnd();
    return n;
  }

  std::vector<Segment> segs_;
  size_t pos_ = 0;
  const Segment* current_ = nullptr;  // the block tag that ended the last Body
};

}  // namespace

Result<Template> Template::Parse(std::string_view source) {
  try {
    Template t;
    t.root_ = Parser(Split(Normalize(source))).Template();
    return t;
  } catch (const JinjaError& e) {
    return Status::InvalidArgument(std::string("chat template: ") + e.what());
  }
}

}  // namespace impress::jinja
