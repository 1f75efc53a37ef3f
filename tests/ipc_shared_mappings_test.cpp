// Finding which /dev/shm file a host pointer lives in (the ipc trainer's in-place export), from
// /proc/<pid>/maps text and from this process's real mappings.
#include "shared_mappings.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace wt::ipc {
namespace {

const void* at(uintptr_t a) {
  return reinterpret_cast<const void*>(a);
}

TEST(SharedMappings, FindsASharedDevShmMappingWithItsFileOffset) {
  auto m = SharedMappings::parse(
      "7f0000000000-7f0000010000 rw-s 00002000 00:1a 4242  /dev/shm/weights\n");
  auto loc = m.find(at(0x7f0000000100), 0x100);
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc->name, "/weights");
  EXPECT_EQ(loc->inode, 4242u);
  EXPECT_EQ(loc->offset, 0x2100u);
  EXPECT_EQ(loc->extent, 0x12000u);
}

TEST(SharedMappings, IgnoresWhatAWorkerCannotOpenByName) {
  auto m = SharedMappings::parse(
      "100000-200000 rw-p 00000000 00:1a 1 /dev/shm/private\n"         // copy-on-write
      "300000-400000 rw-s 00000000 00:1a 2 /dev/shm/gone (deleted)\n"  // unlinked
      "500000-600000 rw-s 00000000 00:1a 3 /dev/shm/dir/nested\n"      // not an shm_open name
      "700000-800000 rw-s 00000000 08:01 4 /var/tmp/file\n"            // not in /dev/shm
      "900000-a00000 -w-s 00000000 00:1a 5 /dev/shm/unreadable\n"      // no read permission
      "b00000-c00000 rw-s 00000000 00:01 6 /memfd:anon (deleted)\n"    // memfd
      "d00000-e00000 rw-p 00000000 00:00 0 \n");                       // anonymous
  EXPECT_EQ(m.size(), 0u);
}

TEST(SharedMappings, AdjacentAreasOfOneFileCountAsOneMapping) {
  auto m = SharedMappings::parse(
      "100000-200000 rw-s 00000000 00:1a 7 /dev/shm/split name\n"
      "200000-300000 r--s 00100000 00:1a 7 /dev/shm/split name\n"
      "300000-400000 rw-s 00000000 00:1a 8 /dev/shm/other\n");
  EXPECT_EQ(m.size(), 2u);
  auto loc = m.find(at(0x1ff000), 0x2000);  // crosses the area boundary
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc->name, "/split name");
  EXPECT_EQ(loc->offset, 0xff000u);
  EXPECT_FALSE(m.find(at(0x2ff000), 0x2000)) << "runs into another file";
  EXPECT_FALSE(m.find(at(0x3ff000), 0x2000)) << "runs past the end";
  EXPECT_FALSE(m.find(at(0x50), 4)) << "below every mapping";
}

TEST(SharedMappings, LocatesARealMappingAndClampsToTheFileSize) {
  std::string name = "/wt_test_maps-" + std::to_string(getpid());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 10000), 0);  // not a page multiple: the mapping ends past the file
  auto* p =
      static_cast<unsigned char*>(mmap(nullptr, 10000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto maps = SharedMappings::snapshot();
  auto loc = maps.locate(p + 100, 50);
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc->name, name);
  EXPECT_EQ(loc->offset, 100u);
  EXPECT_EQ(loc->extent, 10000u);
  EXPECT_FALSE(maps.locate(p + 9990, 20)) << "past the end of the file, inside the page";
  // Once the name is gone the memory is no longer shareable by name.
  shm_unlink(name.c_str());
  EXPECT_FALSE(SharedMappings::snapshot().locate(p + 100, 50));
  munmap(p, 10000);
}

}  // namespace
}  // namespace wt::ipc
