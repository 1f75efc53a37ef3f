// Plugin directories the build cannot make: a FIFO named like a plugin, a plugin file or directory
// writable by others, made fresh in a private temporary directory for each test.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace wt::test {

namespace fs = std::filesystem;

// The directory of the test plugins whose wt_plugin_get crashes or never returns.
inline std::string hostile_plugin_dir() {
  return (fs::path(WT_TEST_BROKEN_DIR).parent_path() / "hostile").string();
}

// Under /tmp, mode 0700, removed with everything in it when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "wt-plugins-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // A subdirectory with the given mode (set explicitly: the umask does not apply).
  std::string subdir(const std::string& name, fs::perms mode = fs::perms(0755)) const {
    fs::path d = fs::path(path_) / name;
    fs::create_directories(d);
    fs::permissions(d, mode);
    return d.string();
  }

 private:
  std::string path_;
};

// Copies the good test plugin libwt_testgood.so into `dir` with the given file mode; returns
// the copy's path.
inline std::string copy_good_plugin(const std::string& dir, fs::perms mode = fs::perms(0755)) {
  fs::path to = fs::path(dir) / "libwt_testgood.so";
  fs::copy_file(fs::path(WT_TEST_GOOD_DIR) / "libwt_testgood.so", to,
                fs::copy_options::overwrite_existing);
  fs::permissions(to, mode);
  return to.string();
}

// The refused layouts, each in its own directory under one TempDir:
//   fifo/libwt_fifo.so           a FIFO (loading must never open it: that would block)
//   file0666/libwt_testgood.so   a good plugin, writable by others
//   file0664/libwt_testgood.so   a good plugin, writable by a group not this process's own
//   dir0777/libwt_testgood.so    a good plugin in a directory writable by others
inline constexpr gid_t kForeignGid = 54321;

struct RefusedPlugins {
  TempDir tmp;
  std::string fifo_dir, fifo, file0666_dir, file0666, file0664_dir, file0664, dir0777, in_dir0777;

  RefusedPlugins() {
    fifo_dir = tmp.subdir("fifo");
    fifo = fifo_dir + "/libwt_fifo.so";
    if (::mkfifo(fifo.c_str(), 0644) != 0) throw std::runtime_error("mkfifo failed");
    file0666_dir = tmp.subdir("file0666");
    file0666 = copy_good_plugin(file0666_dir, fs::perms(0666));
    file0664_dir = tmp.subdir("file0664");
    file0664 = copy_good_plugin(file0664_dir, fs::perms(0664));
    // Writable by a group that is not this process's own (a shared group).
    if (::chown(file0664.c_str(), static_cast<uid_t>(-1), kForeignGid) != 0)
      throw std::runtime_error("chown to a foreign group failed (tests run as root)");
    dir0777 = tmp.subdir("dir0777");
    in_dir0777 = copy_good_plugin(dir0777);
    fs::permissions(dir0777, fs::perms(0777));
  }
  // Every refused directory, colon-separated, for WT_PLUGIN_PATH.
  std::string path_list() const {
    return fifo_dir + ":" + file0666_dir + ":" + file0664_dir + ":" + dir0777;
  }
};

}  // namespace wt::test
