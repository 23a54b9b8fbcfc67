// core/common's handling of what users give and get: printable() (NOTE [Printing user text]),
// read_input_file() (NOTE [Input files]), parse_json_text() (NOTE [Bounded JSON nesting]) and
// OutputFile (NOTE [Atomic outputs]).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/json_file.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "tests/support/input_error.h"

namespace fullshard {
namespace {

namespace fs = std::filesystem;

bool valid_utf8_without_controls(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return false;
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;  // C1
    i += n;
  }
  return true;
}

// ---------------------------------------------------------------- printable
TEST(Printable, PlainTextAndUtf8PassUnchanged) {
  EXPECT_EQ(printable("llama3.1-8b fsdp8"), "llama3.1-8b fsdp8");
  EXPECT_EQ(printable("Größe 8×H100 ✓"), "Größe 8×H100 ✓");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, ControlsAndInvalidBytesAreEscaped) {
  EXPECT_EQ(printable("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(printable("x\ny\tz\r"), "x\\ny\\tz\\r");
  EXPECT_EQ(printable(std::string("nul\0end", 7)), "nul\\x00end");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(printable("\xc2\x9b"
                      "31m"),
            "\\u009b31m");  // C1 CSI
  EXPECT_EQ(printable("bad\xff\xfe"), "bad\\xff\\xfe");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
  EXPECT_EQ(printable("cut\xe2\x82"), "cut\\xe2\\x82");     // truncated sequence
}

TEST(Printable, LongTextIsCutAtACharacterWithItsSize) {
  const std::string s(2 << 20, 'n');
  const std::string p = printable(s, 100);
  EXPECT_EQ(p, std::string(100, 'n') + "... (2097152 bytes)");
  // Never inside a multi-byte character.
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xe2\x82\xac";
  const std::string q = printable(euros, 10);
  EXPECT_EQ(q, "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac... (300 bytes)");
}

RC_GTEST_PROP(PrintableProp, OutputIsValidUtf8WithoutControlsBoundedAndStable,
              (const std::string& s)) {
  const size_t max = *rc::gen::inRange<size_t>(1, 64);
  const std::string p = printable(s, max);
  RC_ASSERT(valid_utf8_without_controls(p));
  RC_ASSERT(p.size() <= max + 32);
  if (p.find("... (") == std::string::npos) RC_ASSERT(printable(p, max) == p);
}

TEST(Printable, InputErrorMessagesAreOneSafeLine) {
  const InputError e("name", "is 'a\nb\x1b[31m'", std::string(5000, 'f'));
  const std::string w = e.what();
  EXPECT_EQ(w.find('\n'), std::string::npos);
  EXPECT_EQ(w.find('\x1b'), std::string::npos);
  EXPECT_NE(w.find("is 'a\\nb\\x1b[31m'"), std::string::npos) << w;
  EXPECT_LT(w.size(), 1200u);
  EXPECT_NE(w.find("(5000 bytes)"), std::string::npos);
  EXPECT_EQ(e.where(), "name");
}

// ---------------------------------------------------------------- input files
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "fullshard-common-XXXXXX").string();
    dir_ = mkdtemp(templ.data());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

using testing::input_error_of;

using InputFile = TempDir;

TEST_F(InputFile, ReadsRegularFilesAndRefusesEverythingElse) {
  std::ofstream(path("a.json")) << "{\"x\": 1}";
  EXPECT_EQ(read_input_file(path("a.json"), "a file"), "{\"x\": 1}");
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  // Would block forever in open() without O_NONBLOCK: the test's timeout catches a regression.
  EXPECT_NE(input_error_of([&] {
              read_input_file(path("fifo"), "a file");
            }).find("is a FIFO (named pipe), not a regular file"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              read_input_file("/dev/zero", "a file");
            }).find("/dev/zero: is a character device"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { read_input_file(dir_, "a file"); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              read_input_file(path("none"), "a scenario");
            }).find("file not found; give the path of a scenario"),
            std::string::npos);
}

TEST_F(InputFile, SizeIsCapped) {
  std::ofstream(path("big")) << std::string(1000, 'x');
  EXPECT_EQ(read_input_file(path("big"), "a file", 1000).size(), 1000u);
  EXPECT_NE(input_error_of([&] {
              read_input_file(path("big"), "a file", 999);
            }).find("is 1000 bytes, more than the"),
            std::string::npos);
}

// ---------------------------------------------------------------- JSON nesting
TEST(JsonInput, NestingIsBoundedWithThePosition) {
  const auto nest = [](size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_NO_THROW(parse_json_text(nest(kMaxJsonDepth), "f.json"));
  const std::string e = input_error_of([&] { parse_json_text(nest(kMaxJsonDepth + 1), "f.json"); });
  EXPECT_NE(e.find("f.json:1:65: malformed JSON: nested deeper than 64 levels"), std::string::npos)
      << e;
  // 100k deep, objects and arrays mixed: an error, not a stack overflow.
  std::string deep;
  for (int i = 0; i < 50000; ++i) deep += "{\"a\":[";
  EXPECT_NE(input_error_of([&] { parse_json_text(deep, "d.json"); }).find("nested deeper"),
            std::string::npos);
  // Brackets inside strings are text.
  EXPECT_NO_THROW(parse_json_text("{\"k\": \"" + std::string(1000, '[') + "\\\"[\"}", "s.json"));
}

TEST(JsonInput, OverflowingNumbersAndDuplicatesAreErrors) {
  EXPECT_NE(
      input_error_of([] { parse_json_text("{\"bytes\": 1e999}", "m.json"); }).find("m.json:1:"),
      std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_json_text("{\"bytes\": 1e999}", "m.json");
            }).find("number overflow"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              parse_json_text("{\"a\": {\"b\": 1, \"b\": 2}}", "d.json");
            }).find("'a.b' appears twice"),
            std::string::npos);
  EXPECT_EQ(parse_json_text("{\"a\": [1, 2]}", "ok.json")["a"][1], 2);
}

TEST(JsonInput, ANulByteIsAnErrorNotTheEndOfTheText) {
  // NOTE [NUL in JSON text] (core/common/json_file.cc): nlohmann stops at a NUL, so the text after
  // it was silently dropped.
  const std::string glued = std::string("{\"a\": 1}") + '\0' + "{\"b\": 2}";
  const std::string e = input_error_of([&] { parse_json_text(glued, "g.json"); });
  EXPECT_NE(e.find("g.json:1:9: malformed JSON: a NUL byte"), std::string::npos) << e;
  EXPECT_NE(input_error_of([] {
              parse_json_text(std::string("{}\n") + '\0', "t.json");
            }).find("t.json:2:1:"),
            std::string::npos);
  EXPECT_EQ(parse_json_text("{\"s\": \"a\\u0000b\"}", "u.json")["s"].get<std::string>(),
            std::string("a\0b", 3));
}

// ---------------------------------------------------------------- outputs
using Output = TempDir;

TEST_F(Output, WritesCompletelyThenRenames) {
  std::ofstream(path("r.json")) << "old";
  {
    OutputFile f(path("r.json"), "--json");
    f.write("new ");
    f.stream() << "content";
    EXPECT_EQ(slurp(path("r.json")), "old");  // untouched until commit
    EXPECT_EQ(names().size(), 2u);            // the temporary file beside it
    f.commit();
  }
  EXPECT_EQ(slurp(path("r.json")), "new content");
  EXPECT_EQ(names(), std::vector<std::string>{"r.json"});
}

TEST_F(Output, AnUncommittedFileLeavesNothingAndKeepsTheOld) {
  std::ofstream(path("r.json")) << "old";
  {
    OutputFile f(path("r.json"), "--json");
    f.write("partial");
  }
  EXPECT_EQ(slurp(path("r.json")), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"r.json"});
  { OutputFile f(path("fresh.json"), "--json"); }
  EXPECT_EQ(names(), std::vector<std::string>{"r.json"});
}

TEST_F(Output, AFullDiskIsAnErrorNamingTheFlag) {
  const std::string e =
      input_error_of([] { write_output_file("/dev/full", std::string(1 << 20, 'x'), "--trace"); });
  EXPECT_NE(e.find("--trace: could not write '/dev/full' (No space left on device)"),
            std::string::npos)
      << e;
  // /dev/null stays a device: it is written directly, never renamed over.
  write_output_file("/dev/null", "x", "--json");
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(Output, MissingFolderAndDirectoryAreRefusedUpFront) {
  EXPECT_NE(input_error_of([&] {
              check_output_writable("-o", path("no/dir/x.json"));
            }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { check_output_writable("-o", dir_); }).find("is a directory"),
            std::string::npos);
  EXPECT_TRUE(names().empty());
}

TEST_F(Output, AnInputIsNeverAnOutput) {
  std::ofstream(path("s.json")) << "{}";
  ASSERT_EQ(symlink("s.json", path("link.json").c_str()), 0);
  ASSERT_EQ(link(path("s.json").c_str(), path("hard.json").c_str()), 0);
  for (const std::string& out :
       {path("s.json"), path("link.json"), path("hard.json"), dir_ + "/./s.json"})
    EXPECT_NE(input_error_of([&] {
                refuse_output_over_input("--json", out, {"", path("s.json")});
              }).find("is also an input"),
              std::string::npos)
        << out;
  // Not yet existing: by canonical path.
  EXPECT_NE(input_error_of([&] {
              refuse_output_over_input("-o", dir_ + "/x/../new.json", {path("new.json")});
            }).find("is also an input"),
            std::string::npos);
  EXPECT_NO_THROW(refuse_output_over_input("--json", path("r.json"), {path("s.json")}));
  EXPECT_NO_THROW(refuse_output_over_input("--json", "/dev/null", {"/dev/null"}));
}

TEST_F(Output, ASymlinkedOutputReplacesItsTarget) {
  std::ofstream(path("target.json")) << "old";
  ASSERT_EQ(symlink("target.json", path("link.json").c_str()), 0);
  write_output_file(path("link.json"), "new", "-o");
  EXPECT_TRUE(fs::is_symlink(path("link.json")));
  EXPECT_EQ(slurp(path("target.json")), "new");
}

// A kill mid-write: the handler removes the temporary file, the old output stays, and the
// process still dies of the signal.
TEST_F(Output, SigtermRemovesTemporaryFiles) {
  std::ofstream(path("r.json")) << "old";
  for (int sig : {SIGTERM, SIGINT}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      signal(sig, SIG_DFL);
      install_output_cleanup_on_signals();
      for (int i = 0; i < 100; ++i) OutputFile discarded(path("d.json"), "-o");  // slots are reused
      OutputFile a(path("r.json"), "--json");
      OutputFile b(path("other.json"), "--trace");
      a.write("partial");
      raise(sig);
      _exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_EQ(names(), std::vector<std::string>{"r.json"});
    EXPECT_EQ(slurp(path("r.json")), "old");
  }
}

}  // namespace
}  // namespace fullshard
