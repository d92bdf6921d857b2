// The SQLite layer (base/sqlite.h): the schema-version helper (a fresh database gets the latest
// version, an old one is migrated step by step in order, a newer one is refused before anything
// is written, a failing step leaves the recorded version and the tables as they were, inside a
// caller's transaction too), statements and their column types, and the error classification
// the store relies on (damage vs errors of the moment).
#include "base/sqlite.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace impress::sqlite {
namespace {

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("impress-sqlite-test-" + std::to_string(getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "test.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<SqliteDb> OpenOrDie() {
    auto db = SqliteDb::Open(path_, /*create=*/true);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  // A history of three versions over table t: 1 has column a, 2 adds b, 3 adds c. Every step
  // appends the version it makes to *applied; `fail_at` makes the step to that version fail.
  SchemaHistory History(std::vector<int>* applied, int fail_at = 0) {
    SchemaHistory h;
    h.name = "test database";
    h.version_table = "kv";
    h.latest = 3;
    h.create = [applied](SqliteDb& db) {
      applied->push_back(0);
      return db.Exec("CREATE TABLE kv(key TEXT PRIMARY KEY, value TEXT NOT NULL); CREATE TABLE t(a, b, c);", "create");
    };
    for (int to : {2, 3}) {
      h.migrations.push_back([applied, fail_at, to](SqliteDb& db) -> Status {
        const std::string sql = std::string("ALTER TABLE t ADD COLUMN ") + (to == 2 ? "b" : "c");
        IMPRESS_RETURN_IF_ERROR(db.Exec(sql, "migrate"));
        if (to == fail_at) return Status::Internal("step to version " + std::to_string(to) + " failed");
        applied->push_back(to);
        return Status::Ok();
      });
    }
    return h;
  }

  // A database at version 1 as that version's build made it.
  void MakeVersion1(SqliteDb& db) {
    ASSERT_TRUE(db.Exec("CREATE TABLE kv(key TEXT PRIMARY KEY, value TEXT NOT NULL); CREATE TABLE t(a);"
                        "INSERT INTO kv VALUES('schema_version', '1'); INSERT INTO t VALUES(7);",
                        "version 1")
                    .ok());
  }

  static std::optional<int64_t> VersionOf(SqliteDb& db, const SchemaHistory& h) {
    auto v = ReadSchemaVersion(db, h);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : std::nullopt;
  }

  static std::vector<std::string> Columns(SqliteDb& db) {
    std::vector<std::string> out;
    auto s = db.Prep("SELECT name FROM pragma_table_info('t') ORDER BY cid");
    EXPECT_TRUE(s.ok());
    if (s.ok()) {
      EXPECT_TRUE(db.ForEachRow(*s, "columns", [&](const Stmt& row) { out.push_back(row.Text(0)); }).ok());
    }
    return out;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(SqliteTest, FreshDatabaseGetsTheLatestVersion) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  std::vector<int> applied;
  const SchemaHistory h = History(&applied);
  auto v = ReadSchemaVersion(*db, h);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->has_value());  // no version table yet
  ASSERT_TRUE(UpgradeSchema(*db, h, 0).ok());
  EXPECT_EQ(applied, std::vector<int>{0});  // created in the latest layout, no migration run
  EXPECT_EQ(Columns(*db), (std::vector<std::string>{"a", "b", "c"}));
  db.reset();
  db = OpenOrDie();  // recorded in the file
  v = ReadSchemaVersion(*db, h);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::optional<int64_t>(3));
  ASSERT_TRUE(UpgradeSchema(*db, h, 3).ok());  // current: nothing to do
  EXPECT_EQ(applied, std::vector<int>{0});
}

TEST_F(SqliteTest, OldVersionIsMigratedInOrder) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  MakeVersion1(*db);
  std::vector<int> applied;
  const SchemaHistory h = History(&applied);
  auto v = ReadSchemaVersion(*db, h);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(*v, std::optional<int64_t>(1));
  ASSERT_TRUE(UpgradeSchema(*db, h, **v).ok());
  EXPECT_EQ(applied, (std::vector<int>{2, 3}));
  EXPECT_EQ(Columns(*db), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(VersionOf(*db, h), std::optional<int64_t>(3));
  EXPECT_EQ(db->QueryInt("SELECT a FROM t", "row").value(), 7);  // the rows stay

  // From version 2, only the last step runs.
  auto db2 = SqliteDb::Open((dir_ / "v2.db").string(), true);
  ASSERT_TRUE(db2.ok());
  ASSERT_TRUE((*db2)
                  ->Exec("CREATE TABLE kv(key TEXT PRIMARY KEY, value TEXT NOT NULL); CREATE TABLE t(a, b);"
                         "INSERT INTO kv VALUES('schema_version', '2');",
                         "version 2")
                  .ok());
  applied.clear();
  ASSERT_TRUE(UpgradeSchema(**db2, h, *VersionOf(**db2, h)).ok());
  EXPECT_EQ(applied, std::vector<int>{3});
}

TEST_F(SqliteTest, NewerVersionIsRefusedAndLeftUnchanged) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  MakeVersion1(*db);
  ASSERT_TRUE(db->Exec("UPDATE kv SET value = '4' WHERE key = 'schema_version'", "newer").ok());
  std::vector<int> applied;
  SchemaHistory h = History(&applied);
  h.newer_advice = "use a newer build";
  auto v = ReadSchemaVersion(*db, h);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Status::Code::kUnsupported);
  const std::string m = v.status().message();
  EXPECT_NE(m.find(path_), std::string::npos) << m;
  EXPECT_NE(m.find("test database has schema version 4"), std::string::npos) << m;
  EXPECT_NE(m.find("newer"), std::string::npos) << m;
  EXPECT_NE(m.find("up to version 3"), std::string::npos) << m;
  EXPECT_NE(m.find("use a newer build"), std::string::npos) << m;
  const Status up = UpgradeSchema(*db, h, 4);
  EXPECT_EQ(up.code(), Status::Code::kUnsupported) << up.ToString();
  EXPECT_TRUE(applied.empty());
  EXPECT_EQ(Columns(*db), std::vector<std::string>{"a"});
}

TEST_F(SqliteTest, InvalidVersionIsCorruptionAndAMissingRowIsNoVersion) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  MakeVersion1(*db);
  std::vector<int> applied;
  const SchemaHistory h = History(&applied);
  for (const char* bad : {"abc", "0", "-2", "3x", ""}) {
    ASSERT_TRUE(db->Exec(std::string("UPDATE kv SET value = '") + bad + "' WHERE key = 'schema_version'", "set").ok());
    auto v = ReadSchemaVersion(*db, h);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), Status::Code::kCorruption) << bad;
  }
  ASSERT_TRUE(db->Exec("DELETE FROM kv", "delete").ok());
  auto v = ReadSchemaVersion(*db, h);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
}

TEST_F(SqliteTest, FailingMigrationLeavesTheVersionUnchanged) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  MakeVersion1(*db);
  std::vector<int> applied;
  const SchemaHistory h = History(&applied, /*fail_at=*/3);
  const Status st = UpgradeSchema(*db, h, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("step to version 3 failed"), std::string::npos) << st.ToString();
  EXPECT_EQ(applied, std::vector<int>{2});  // the first step ran, then was undone with the second
  EXPECT_FALSE(db->InTransaction());
  EXPECT_EQ(VersionOf(*db, h), std::optional<int64_t>(1));
  EXPECT_EQ(Columns(*db), std::vector<std::string>{"a"});

  // Inside the caller's transaction: the upgrade alone is undone, the caller's writes stay.
  {
    Txn t(*db);
    ASSERT_TRUE(t.Begin("caller").ok());
    ASSERT_TRUE(db->Exec("INSERT INTO t(a) VALUES(8)", "caller's write").ok());
    EXPECT_FALSE(UpgradeSchema(*db, h, 1).ok());
    EXPECT_TRUE(db->InTransaction());
    ASSERT_TRUE(t.Commit("caller").ok());
  }
  EXPECT_EQ(VersionOf(*db, h), std::optional<int64_t>(1));
  EXPECT_EQ(Columns(*db), std::vector<std::string>{"a"});
  EXPECT_EQ(db->QueryInt("SELECT count(*) FROM t", "rows").value(), 2);

  // A history missing a step is refused the same way.
  SchemaHistory gap = History(&applied);
  gap.migrations.pop_back();
  const Status g = UpgradeSchema(*db, gap, 1);
  EXPECT_EQ(g.code(), Status::Code::kInternal) << g.ToString();
  EXPECT_EQ(VersionOf(*db, h), std::optional<int64_t>(1));
  EXPECT_EQ(Columns(*db), std::vector<std::string>{"a"});
}

TEST_F(SqliteTest, StatementsStepAndReadColumnsByType) {
  auto db = OpenOrDie();
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->Exec("CREATE TABLE v(x)", "create").ok());
  {
    auto ins = db->Prep("INSERT INTO v(x) VALUES(?)");
    ASSERT_TRUE(ins.ok());
    ins->Bind(1, int64_t(42));
    ASSERT_TRUE(db->Run(*ins, "int").ok());
    EXPECT_EQ(db->LastInsertRowid(), 1);
  }
  for (const char* sql : {"INSERT INTO v VALUES(2.5)", "INSERT INTO v VALUES('t')", "INSERT INTO v VALUES(x'0102')",
                          "INSERT INTO v VALUES(NULL)"})
    ASSERT_TRUE(db->Exec(sql, "insert").ok());
  auto s = db->Prep("SELECT x FROM v ORDER BY rowid");
  ASSERT_TRUE(s.ok());
  std::vector<ColumnType> types;
  std::vector<int> sizes;
  ASSERT_TRUE(db->ForEachRow(*s, "read", [&](const Stmt& row) {
                  types.push_back(row.Type(0));
                  sizes.push_back(row.Size(0));
                }).ok());
  EXPECT_EQ(types, (std::vector<ColumnType>{ColumnType::kInteger, ColumnType::kFloat, ColumnType::kText,
                                            ColumnType::kBlob, ColumnType::kNull}));
  EXPECT_EQ(sizes[2], 1);
  EXPECT_EQ(sizes[3], 2);
  EXPECT_EQ(sizes[4], 0);
  ASSERT_TRUE(db->Exec("DELETE FROM v WHERE x IS NULL", "delete").ok());
  EXPECT_EQ(db->Changes(), 1);
  auto empty = db->Prep("SELECT x FROM v WHERE 0");
  ASSERT_TRUE(empty.ok());
  auto row = empty->Step("none");
  ASSERT_TRUE(row.ok());
  EXPECT_FALSE(*row);
  EXPECT_TRUE(CheckFts5().ok()) << CheckFts5().ToString();  // Debian's libsqlite3 has FTS5
  auto healthy = db->QuickCheck("check");
  ASSERT_TRUE(healthy.ok());
  EXPECT_EQ(*healthy, "");
}

TEST_F(SqliteTest, NotADatabaseIsCorruptionAndALockIsTransient) {
  {
    std::ofstream f(path_, std::ios::binary);
    f << std::string(4096, 'x');
  }
  auto db = OpenOrDie();  // opening reads nothing yet
  ASSERT_TRUE(db);
  auto n = db->QueryInt("SELECT count(*) FROM sqlite_master", "read the schema");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Status::Code::kCorruption) << n.status().ToString();
  EXPECT_FALSE(IsTransient(n.status().code()));

  const std::string other = (dir_ / "locked.db").string();
  auto a = SqliteDb::Open(other, true);
  auto b = SqliteDb::Open(other, true);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Exec("CREATE TABLE t(x)", "create").ok());
  (*b)->SetBusyTimeout(0);
  Txn hold(**a);
  ASSERT_TRUE(hold.Begin("hold").ok());
  Txn second(**b);
  const Status busy = second.Begin("second writer");
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.code(), Status::Code::kIOError) << busy.ToString();
  EXPECT_TRUE(IsTransient(busy.code()));
  EXPECT_NE(busy.message().find("locked"), std::string::npos) << busy.ToString();
}

}  // namespace
}  // namespace impress::sqlite
