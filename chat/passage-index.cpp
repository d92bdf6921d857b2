#include "chat/passage-index.h"

#include <algorithm>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "base/sqlite.h"
#include "chat/private-file.h"
#include "store/store-dir.h"

namespace impress::persist {

using sqlite::SqliteDb;
using sqlite::Stmt;
using sqlite::Txn;

namespace {

constexpr int32_t kAppId = 0x494d5070;  // "IMPp"

const char* kSchemaV1 = R"(
CREATE TABLE pidx_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE pidx_documents(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  doc_key TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  n_bytes INTEGER NOT NULL);
CREATE TABLE pidx_passages(
  id INTEGER PRIMARY KEY,
  doc INTEGER NOT NULL REFERENCES pidx_documents(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  byte_offset INTEGER NOT NULL,
  byte_length INTEGER NOT NULL,
  UNIQUE(doc, idx));
CREATE VIRTUAL TABLE pidx_fts USING fts5(body, tokenize = 'unicode61');
)";

// Common English words that carry no retrieval signal; a question made only of these has no
// searchable terms.
const std::unordered_set<std::string>& StopWords() {
  static const std::unordered_set<std::string> k = {
      "a",      "about", "above",      "after",    "again",      "all",     "am",        "an",    "and",    "any",
      "are",    "as",    "at",         "be",       "because",    "been",    "before",    "being", "below",  "between",
      "both",   "but",   "by",         "can",      "could",      "did",     "do",        "does",  "doing",  "down",
      "during", "each",  "few",        "for",      "from",       "further", "had",       "has",   "have",   "having",
      "he",     "her",   "here",       "hers",     "herself",    "him",     "himself",   "his",   "how",    "i",
      "if",     "in",    "into",       "is",       "it",         "its",     "itself",    "just",  "me",     "more",
      "most",   "my",    "myself",     "no",       "nor",        "not",     "now",       "of",    "off",    "on",
      "once",   "only",  "or",         "other",    "our",        "ours",    "ourselves", "out",   "over",   "own",
      "same",   "she",   "should",     "so",       "some",       "such",    "than",      "that",  "the",    "their",
      "theirs", "them",  "themselves", "then",     "there",      "these",   "they",      "this",  "those",  "through",
      "to",     "too",   "under",      "until",    "up",         "very",    "was",       "we",    "were",   "what",
      "when",   "where", "which",      "while",    "who",        "whom",    "why",       "will",  "with",   "would",
      "you",    "your",  "yours",      "yourself", "yourselves", "s",       "t",         "tell",  "please", "whats"};
  return k;
}

sqlite::SchemaHistory PassageHistory() {
  sqlite::SchemaHistory h;
  h.name = "passage index";
  h.version_table = "pidx_meta";
  h.latest = PassageIndex::kSchemaVersion;
  h.create = sqlite::CreateWithApplicationId(kSchemaV1, kAppId, "creating the passage index");
  h.newer_advice = "delete the file to rebuild the index";
  return h;
}

bool IsBlankLine(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Where to end a piece of an over-long paragraph that starts at `start` and may reach `limit`
// (exclusive, < text.size()): after a line end, else a sentence end, else a space, in the
// second half; else at `limit` moved back to a UTF-8 sequence start.
size_t CutPoint(std::string_view text, size_t start, size_t limit) {
  const size_t lo = start + (limit - start) / 2;
  for (size_t p = limit; p > lo; --p)
    if (text[p - 1] == '\n') return p;
  for (size_t p = limit; p > lo + 1; --p)
    if ((text[p - 1] == ' ' || text[p - 1] == '\t') && (text[p - 2] == '.' || text[p - 2] == '!' || text[p - 2] == '?'))
      return p;
  for (size_t p = limit; p > lo; --p)
    if (text[p - 1] == ' ' || text[p - 1] == '\t') return p;
  // Valid UTF-8 has at most 3 continuation bytes in a row; on invalid text cut at the limit.
  size_t cut = limit;
  while (cut > lo && IsContinuation(static_cast<unsigned char>(text[cut]))) --cut;
  return IsContinuation(static_cast<unsigned char>(text[cut])) ? limit : cut;
}

// A passage from the columns doc_key, name, idx, byte_offset, byte_length, body and the
// document's id (its add order), in this order from column 0 on.
Passage PassageColumns(const Stmt& s) {
  Passage p;
  p.doc_key = s.Text(0);
  p.name = s.Text(1);
  p.index = int(s.Int(2));
  p.offset = uint64_t(s.Int(3));
  p.length = uint64_t(s.Int(4));
  p.text = s.Text(5);
  p.doc_order = s.Int(6);
  return p;
}

}  // namespace

std::vector<PassageSpan> SplitPassages(std::string_view text, size_t target_bytes) {
  target_bytes = std::max<size_t>(target_bytes, 16);
  // Paragraph units: a new one starts at each non-blank line that follows a blank line.
  std::vector<size_t> starts = {0};
  bool prev_blank = false;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    bool blank = IsBlankLine(text.substr(pos, end - pos));
    if (!blank && prev_blank && pos > 0) starts.push_back(pos);
    prev_blank = blank;
    pos = end;
  }
  std::vector<PassageSpan> out;
  size_t cur = 0, cur_end = 0;  // the passage being packed: [cur, cur_end)
  for (size_t i = 0; i < starts.size() && starts[i] < text.size(); ++i) {
    size_t u0 = starts[i];
    size_t u1 = i + 1 < starts.size() ? starts[i + 1] : text.size();
    if (cur_end > cur && (cur_end - cur) + (u1 - u0) > target_bytes) {
      out.push_back({cur, cur_end - cur});
      cur = cur_end;
    }
    cur_end = u1;
    // Too long even alone: cut pieces off the front until the rest fits.
    while (cur_end - cur > target_bytes) {
      size_t cut = CutPoint(text, cur, cur + target_bytes);
      out.push_back({cur, cut - cur});
      cur = cut;
    }
  }
  if (cur_end > cur) out.push_back({cur, cur_end - cur});
  return out;
}

std::vector<std::string> QueryTerms(std::string_view question, size_t max_terms) {
  std::vector<std::string> terms;
  std::unordered_set<std::string> seen;
  const auto& stop = StopWords();
  size_t i = 0;
  while (i < question.size() && terms.size() < max_terms) {
    auto is_term_byte = [](unsigned char c) {
      return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    };
    if (!is_term_byte(static_cast<unsigned char>(question[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    std::string term;
    while (j < question.size() && is_term_byte(static_cast<unsigned char>(question[j]))) {
      char c = question[j++];
      term.push_back(c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c);
    }
    i = j;
    if (stop.count(term) || !seen.insert(term).second) continue;
    terms.push_back(std::move(term));
  }
  return terms;
}

std::string BuildFtsQuery(std::string_view question) {
  // Each term is an FTS5 string (double-quoted): inside one, only '"' is special, and terms never
  // contain it (ASCII punctuation separates terms). Non-ASCII runs may hold characters unicode61
  // treats as separators; quoted, they become a phrase (or an empty phrase that matches nothing),
  // never a syntax error. Duplicates are removed because bm25() sums every phrase, so "x" OR "x"
  // would count x twice.
  std::string q;
  for (const std::string& t : QueryTerms(question)) {
    if (!q.empty()) q += " OR ";
    q += '"';
    q += t;
    q += '"';
  }
  return q;
}

PassageIndex::PassageIndex(std::unique_ptr<SqliteDb> db, PassageIndexOptions options) :
    db_(std::move(db)), options_(options) {}
PassageIndex::~PassageIndex() = default;

Result<std::unique_ptr<PassageIndex>> PassageIndex::Open(const std::string& path, PassageIndexOptions options) {
  // The user's documents and conversations: owner-only file and folder (WAL and SHM follow).
  IMPRESS_RETURN_IF_ERROR(PreparePrivateFile(path));
  // FTS5 is compiled into Debian's libsqlite3, but not into every build: checked at run time,
  // apart from the file, so a damaged file is never blamed on the library.
  if (Status fts = sqlite::CheckFts5(); !fts.ok()) {
    if (fts.code() != Status::Code::kUnsupported) return fts;
    return Status::Unsupported(path + ": " + fts.message() +
                               "; passage retrieval needs a build with SQLITE_ENABLE_FTS5");
  }
  IMPRESS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path, /*create=*/true));
  IMPRESS_ASSIGN_OR_RETURN(const bool fresh, sqlite::IsFreshFile(*db, kAppId, "passage index"));
  if (!fresh) {  // damage in any page (SQLite's structural check, one read of the file)
    IMPRESS_ASSIGN_OR_RETURN(std::string problems, db->QuickCheck("checking the file"));
    if (!problems.empty()) return Status::Corruption(path + ": the passage index is damaged (" + problems + ")");
  }
  // The index is derived data: a file of another version is not migrated but refused, before
  // any write (the caller deletes it and indexes the documents again).
  const sqlite::SchemaHistory history = PassageHistory();
  if (!fresh) {
    IMPRESS_ASSIGN_OR_RETURN(std::optional<int64_t> v, sqlite::ReadSchemaVersion(*db, history));
    if (v != kSchemaVersion)
      return Status::Unsupported(path + ": passage index has schema version \"" + (v ? std::to_string(*v) : "") +
                                 "\", this build reads " + std::to_string(kSchemaVersion) +
                                 " (delete the file to rebuild the index)");
  }
  IMPRESS_RETURN_IF_ERROR(RestrictToOwner(path));  // ours: private even if an older build made it 0644
  IMPRESS_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                                   "setting up the connection"));
  IMPRESS_RETURN_IF_ERROR(db->SetMaxFileBytes(options.max_file_bytes));
  IMPRESS_RETURN_IF_ERROR(sqlite::UpgradeSchema(*db, history, fresh ? 0 : kSchemaVersion));
  return std::unique_ptr<PassageIndex>(new PassageIndex(std::move(db), options));
}

Result<std::unique_ptr<PassageIndex>> PassageIndex::OpenOrStartOver(const std::string& path,
                                                                    PassageIndexOptions options,
                                                                    std::string* moved_to) {
  if (moved_to) moved_to->clear();
  auto opened = Open(path, options);
  if (opened.ok() || opened.status().code() != Status::Code::kCorruption || path == ":memory:") return opened;
  IMPRESS_ASSIGN_OR_RETURN(std::string to, store::MoveAside(path));
  spdlog::warn("passage index {} is damaged ({}); moved aside to {}, starting a new one", path,
               opened.status().ToString(), to);
  if (moved_to) *moved_to = to;
  return Open(path, options);
}

Status PassageIndex::DeleteDocumentLocked(const std::string& doc_key, const std::string& what) {
  {
    // The FTS table first: it has no foreign keys to cascade from the passages.
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM pidx_fts WHERE rowid IN (SELECT p.id FROM pidx_passages p "
                                               "JOIN pidx_documents d ON d.id = p.doc WHERE d.doc_key = ?)"));
    s.Bind(1, doc_key);
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
  }
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("DELETE FROM pidx_documents WHERE doc_key = ?"));
  s.Bind(1, doc_key);
  return db_->Run(s, what);
}

Status PassageIndex::Add(const std::string& doc_key, const std::string& name, std::string_view text) {
  const std::vector<PassageSpan> spans = SplitPassages(text, options_.target_passage_bytes);
  MutexLock lk(&mu_);
  const std::string what = "indexing \"" + name + "\"";
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin(what));
  IMPRESS_RETURN_IF_ERROR(DeleteDocumentLocked(doc_key, what));  // replace: the old passages go first
  int64_t doc_id = 0;
  {
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO pidx_documents(doc_key, name, n_bytes) VALUES(?, ?, ?)"));
    s.Bind(1, doc_key);
    s.Bind(2, name);
    s.Bind(3, int64_t(text.size()));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
    doc_id = db_->LastInsertRowid();
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    int64_t passage_id = 0;
    {
      IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO pidx_passages(doc, idx, byte_offset, byte_length) "
                                                 "VALUES(?, ?, ?, ?)"));
      s.Bind(1, doc_id);
      s.Bind(2, int64_t(i));
      s.Bind(3, int64_t(spans[i].offset));
      s.Bind(4, int64_t(spans[i].length));
      IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
      passage_id = db_->LastInsertRowid();
    }
    IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("INSERT INTO pidx_fts(rowid, body) VALUES(?, ?)"));
    s.Bind(1, passage_id);
    s.Bind(2, text.substr(spans[i].offset, spans[i].length));
    IMPRESS_RETURN_IF_ERROR(db_->Run(s, what));
  }
  return t.Commit(what);
}

Status PassageIndex::Remove(const std::string& doc_key) {
  MutexLock lk(&mu_);
  const std::string what = "removing \"" + doc_key + "\" from the passage index";
  Txn t(*db_);
  IMPRESS_RETURN_IF_ERROR(t.Begin(what));
  IMPRESS_RETURN_IF_ERROR(DeleteDocumentLocked(doc_key, what));
  if (db_->Changes() == 0) return Status::NotFound(db_->path() + ": no indexed document with key \"" + doc_key + "\"");
  return t.Commit(what);
}

Result<bool> PassageIndex::Contains(const std::string& doc_key) {
  MutexLock lk(&mu_);
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT 1 FROM pidx_documents WHERE doc_key = ?"));
  s.Bind(1, doc_key);
  return s.Step("looking up \"" + doc_key + "\"");
}

Result<std::vector<IndexedDocument>> PassageIndex::Documents() {
  MutexLock lk(&mu_);
  IMPRESS_ASSIGN_OR_RETURN(Stmt s, db_->Prep("SELECT d.doc_key, d.name, d.n_bytes, "
                                             "(SELECT count(*) FROM pidx_passages p WHERE p.doc = d.id) "
                                             "FROM pidx_documents d ORDER BY d.id"));
  std::vector<IndexedDocument> out;
  IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "listing indexed documents", [&](const Stmt& row) {
    out.push_back({row.Text(0), row.Text(1), uint64_t(row.Int(2)), int(row.Int(3))});
  }));
  return out;
}

Result<std::vector<Passage>> PassageIndex::Passages(const std::string& doc_key) {
  MutexLock lk(&mu_);
  IMPRESS_ASSIGN_OR_RETURN(Stmt s,
                           db_->Prep("SELECT d.doc_key, d.name, p.idx, p.byte_offset, p.byte_length, f.body, d.id "
                                     "FROM pidx_documents d JOIN pidx_passages p ON p.doc = d.id "
                                     "JOIN pidx_fts f ON f.rowid = p.id WHERE d.doc_key = ? ORDER BY p.idx"));
  s.Bind(1, doc_key);
  std::vector<Passage> out;
  IMPRESS_RETURN_IF_ERROR(db_->ForEachRow(s, "reading the passages of \"" + doc_key + "\"",
                                          [&](const Stmt& row) { out.push_back(PassageColumns(row)); }));
  if (out.empty()) {  // an empty document has no passages; an unknown key is an error
    IMPRESS_ASSIGN_OR_RETURN(Stmt e, db_->Prep("SELECT 1 FROM pidx_documents WHERE doc_key = ?"));
    e.Bind(1, doc_key);
    IMPRESS_ASSIGN_OR_RETURN(const bool found, e.Step("looking up \"" + doc_key + "\""));
    if (!found) return Status::NotFound(db_->path() + ": no indexed document with key \"" + doc_key + "\"");
  }
  return out;
}

Result<std::vector<Passage>> PassageIndex::Search(std::string_view question, int k) {
  MutexLock lk(&mu_);
  return SearchLocked(question, k);
}

Result<std::vector<Passage>> PassageIndex::SearchLocked(std::string_view question, int k) {
  std::vector<Passage> out;
  const std::string match = BuildFtsQuery(question);
  if (match.empty() || k <= 0) return out;
  IMPRESS_ASSIGN_OR_RETURN(
      Stmt s, db_->Prep("SELECT d.doc_key, d.name, p.idx, p.byte_offset, p.byte_length, r.body, d.id, r.score "
                        "FROM (SELECT rowid AS id, bm25(pidx_fts) AS score, body FROM pidx_fts "
                        "      WHERE pidx_fts MATCH ? ORDER BY rank, rowid LIMIT ?) r "
                        "JOIN pidx_passages p ON p.id = r.id JOIN pidx_documents d ON d.id = p.doc "
                        "ORDER BY r.score, r.id"));
  s.Bind(1, std::string_view(match));
  s.Bind(2, int64_t(k));
  IMPRESS_RETURN_IF_ERROR(
      db_->ForEachRow(s, "searching for \"" + std::string(question.substr(0, 80)) + "\"", [&](const Stmt& row) {
        Passage p = PassageColumns(row);
        p.bm25 = row.Double(7);
        out.push_back(std::move(p));
      }));
  return out;
}

Result<BudgetSelection> PassageIndex::SelectForBudget(std::string_view question, int max_tokens,
                                                      const std::function<int(std::string_view)>& count_tokens,
                                                      int max_candidates) {
  if (!count_tokens) return Status::InvalidArgument("SelectForBudget: no token counter given");
  BudgetSelection sel;
  std::vector<Passage> ranked;
  {
    MutexLock lk(&mu_);
    IMPRESS_ASSIGN_OR_RETURN(ranked, SearchLocked(question, max_candidates));
  }
  sel.n_candidates = int(ranked.size());
  for (Passage& p : ranked) {
    const int n = count_tokens(p.text);
    if (n < 0) return Status::InvalidArgument("SelectForBudget: token counter returned " + std::to_string(n));
    if (int64_t(sel.n_tokens) + n > int64_t(max_tokens)) continue;
    sel.n_tokens += n;
    sel.passages.push_back(std::move(p));
  }
  std::sort(sel.passages.begin(), sel.passages.end(), [](const Passage& a, const Passage& b) {
    return a.doc_order != b.doc_order ? a.doc_order < b.doc_order : a.offset < b.offset;
  });
  return sel;
}

}  // namespace impress::persist
