// Finding which /dev/shm file a host pointer lives in (the ipc trainer's in-place export), from
// /proc/<pid>/maps text and from this process's real mappings (only wt segments of this user).
#include "shared_mappings.hpp"

#include <wt/sdk/shm_segments.hpp>

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
  // Not a page multiple: the mapping ends past the file.
  auto c = shm::create_segment(10000);
  ASSERT_NE(c.addr, nullptr);
  auto* p = static_cast<unsigned char*>(c.addr);
  auto maps = SharedMappings::snapshot();
  auto loc = maps.locate(p + 100, 50);
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc->name, c.name);
  EXPECT_EQ(loc->offset, 100u);
  EXPECT_EQ(loc->extent, 10000u);
  EXPECT_FALSE(maps.locate(p + 9990, 20)) << "past the end of the file, inside the page";
  // Once the name is gone the memory is no longer shareable by name.
  shm_unlink(c.name.c_str());
  EXPECT_FALSE(SharedMappings::snapshot().locate(p + 100, 50));
  munmap(p, 10000);
}

// A file mapped and named, shm_open-style. Returns the mapping.
unsigned char* map_named(const std::string& name, std::size_t size) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  void* p = ftruncate(fd, static_cast<off_t>(size)) == 0
                ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
}

// The worker maps only wt segments of its own user, so nothing else is exported in place: another
// program's shared memory (or a framework's own) is copied.
TEST(SharedMappings, FilesThatAreNotWtSegmentsAreNotShareable) {
  const std::string name = "/wt_test_maps-" + std::to_string(getpid());
  auto* p = map_named(name, 8192);
  ASSERT_NE(p, nullptr);
  auto maps = SharedMappings::snapshot();
  EXPECT_TRUE(SharedMappings::parse("7f0000000000-7f0000002000 rw-s 00000000 00:1a 1 /dev/shm" +
                                    name + "\n")
                  .find(at(0x7f0000000000), 16))
      << "parse() itself stays generic";
  EXPECT_FALSE(maps.locate(p, 16)) << "not a wt segment";
  munmap(p, 8192);
  shm_unlink(name.c_str());
}

TEST(SharedMappings, AWtSegmentOfAnotherUserIsNotShareable) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can give a file to another user";
  auto c = shm::create_segment(8192);
  ASSERT_NE(c.addr, nullptr);
  EXPECT_TRUE(SharedMappings::snapshot().locate(c.addr, 16));
  ASSERT_EQ(chown(("/dev/shm" + c.name).c_str(), 65534, 65534), 0);
  EXPECT_FALSE(SharedMappings::snapshot().locate(c.addr, 16));
  munmap(c.addr, 8192);
  shm_unlink(c.name.c_str());
}

}  // namespace
}  // namespace wt::ipc
