#include "cache/open_beneath.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_bytes;

// dir/
//   a/b/data.bin            "inside"
//   link_in -> a            (a symlink that stays inside)
//   link_out -> ../outside  (one that leads out)
//   fifo                    (a FIFO nobody writes to)
// outside/secret.bin
struct Tree {
  TempDir tmp;
  fs::path dir = tmp.path() / "dir";
  Tree() {
    fs::create_directories(dir / "a" / "b");
    fs::create_directories(tmp.path() / "outside");
    write_bytes(dir / "a" / "b" / "data.bin", "inside");
    write_bytes(tmp.path() / "outside" / "secret.bin", "secret");
    fs::create_directory_symlink("a", dir / "link_in");
    fs::create_directory_symlink("../outside", dir / "link_out");
    fs::create_symlink("a/b/data.bin", dir / "file_link");
    EXPECT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  }
};

// The bytes of the file open_beneath returns, or "errno N".
std::string read_all(int fd) {
  if (fd < 0) return "errno " + std::to_string(-fd);
  std::string out(64, '\0');
  const ssize_t n = ::read(fd, out.data(), out.size());
  ::close(fd);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

std::string err(int e) { return "errno " + std::to_string(e); }

class OpenBeneath : public ::testing::TestWithParam<BeneathMethod> {};

TEST_P(OpenBeneath, OpensFilesInsideAndRefusesEscapes) {
  Tree t;
  const BeneathMethod m = GetParam();
  if (m == BeneathMethod::kAuto)
    std::printf("openat2 %s\n", openat2_available() ? "available" : "unavailable: fallback");
  const auto open = [&](const std::string& rel, BeneathSymlinks s) {
    return read_all(open_beneath(t.dir, rel, s, m));
  };
  for (BeneathSymlinks s : {BeneathSymlinks::kRefuse, BeneathSymlinks::kInside}) {
    EXPECT_EQ(open("a/b/data.bin", s), "inside");
    EXPECT_EQ(open("./a//b/data.bin", s), "inside");
    EXPECT_EQ(open("../outside/secret.bin", s), err(EXDEV));  // ".."
    EXPECT_EQ(open("a/../../outside/secret.bin", s), err(EXDEV));
    EXPECT_EQ(open((t.tmp.path() / "outside/secret.bin").string(), s), err(EXDEV));  // absolute
    EXPECT_EQ(open("link_out/secret.bin", s),
              s == BeneathSymlinks::kRefuse ? err(ELOOP) : err(EXDEV));
    EXPECT_EQ(open("a/b/missing.bin", s), err(ENOENT));
  }
  // A symlink in the middle of the path, or at its end, that stays inside.
  EXPECT_EQ(open("link_in/b/data.bin", BeneathSymlinks::kRefuse), err(ELOOP));
  EXPECT_EQ(open("file_link", BeneathSymlinks::kRefuse), err(ELOOP));
  EXPECT_EQ(open("link_in/b/data.bin", BeneathSymlinks::kInside), "inside");
  EXPECT_EQ(open("file_link", BeneathSymlinks::kInside), "inside");
}

TEST_P(OpenBeneath, AFifoOpensWithoutBlockingAndIsNotRegular) {
  Tree t;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(5);  // a blocking open fails the test instead of hanging it
    const int fd = open_beneath(t.dir, "fifo", BeneathSymlinks::kRefuse, GetParam());
    struct stat st {};
    const bool fifo = fd >= 0 && ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
    ::_exit(fifo ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "open_beneath blocked on a FIFO (wait status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

INSTANTIATE_TEST_SUITE_P(Methods, OpenBeneath,
                         ::testing::Values(BeneathMethod::kAuto, BeneathMethod::kFallback),
                         [](const auto& info) {
                           return info.param == BeneathMethod::kAuto ? "Auto" : "Fallback";
                         });

}  // namespace
}  // namespace kiln::cache
