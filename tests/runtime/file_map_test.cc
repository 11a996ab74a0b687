// FileMap: artifact files are opened beneath the artifact directory (no symlink, no escape) and
// never block on a FIFO.
#include "runtime/file_map.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tests/support/temp_dir.h"

namespace kiln::runtime {
namespace {

namespace fs = std::filesystem;
using kiln::testing::TempDir;
using kiln::testing::write_bytes;

TEST(FileMap, MapsAFileBeneathTheArtifactDirectory) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "kernels");
  write_bytes(tmp.path() / "kernels" / "m.cubin", "cubin bytes");
  Result<std::unique_ptr<FileMap>> m = FileMap::open(tmp.path(), "kernels/m.cubin");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->size(), 11u);
  EXPECT_EQ(std::memcmp((*m)->data(), "cubin bytes", 11), 0);
  EXPECT_FALSE(file_map_check(**m, tmp.path() / "kernels/m.cubin", 12, 0, false).ok());
}

TEST(FileMap, RefusesSymlinksEscapesAndMissingFiles) {
  TempDir tmp;
  const fs::path art = tmp.path() / "art";
  fs::create_directories(art);
  write_bytes(tmp.path() / "outside.bin", "secret");
  fs::create_symlink(tmp.path() / "outside.bin", art / "weights.bin");
  fs::create_directory_symlink(tmp.path(), art / "kernels");
  for (const char* rel : {"weights.bin", "kernels/outside.bin", "../outside.bin"}) {
    Result<std::unique_ptr<FileMap>> m = FileMap::open(art, rel);
    ASSERT_FALSE(m.ok()) << rel;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status().to_string();
    EXPECT_NE(m.status().message().find((art / rel).string()), std::string::npos)
        << m.status().message();
  }
  EXPECT_EQ(FileMap::open(art, "gone.bin").status().code(), StatusCode::kNotFound);
}

TEST(FileMap, AFifoIsRefusedWithoutBlocking) {
  TempDir tmp;
  ASSERT_EQ(::mkfifo((tmp.path() / "weights.bin").c_str(), 0600), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(10);  // a blocking open fails the test instead of hanging it
    const bool beneath = !FileMap::open(tmp.path(), "weights.bin").ok();
    const bool plain = !FileMap::open(tmp.path() / "weights.bin").ok();
    ::_exit(beneath && plain ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "FileMap::open blocked on a FIFO (wait status " << status
                                 << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace kiln::runtime
