"""Builds wt with CMake (into the repository's build-python/, without the test suite, or uses
$WT_BUILD_DIR, built already)
and packs into the package: the extension wt._wt, libwt and its service libraries (wt/lib), the
plugins (wt/lib/wt/plugins, where libwt looks next to itself) and the wt command (wt/bin/wt,
which wt.launch runs). Nothing needs an environment variable at run time."""

import glob
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


class WithNativeParts(Distribution):
    def has_ext_modules(self):  # a platform wheel: it holds compiled code
        return True


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        # A build of its own, of what the package holds only (no test suite, no benchmarks):
        # minutes on a small machine, where the whole tree's build takes a quarter of an hour.
        build = pathlib.Path(os.environ.get("WT_BUILD_DIR") or ROOT / "build-python")
        if not (build / "build.ninja").exists():
            print(f"wt: building the package's parts in {build} for {sys.executable}", flush=True)
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                   "-DWT_BUILD_TESTS=OFF", "-DWT_BUILD_BENCHMARKS=OFF",
                                   f"-DWT_PYTHON_EXECUTABLE={sys.executable}"])
        if not os.environ.get("WT_BUILD_DIR"):  # a given build dir is used as it is
            subprocess.check_call(["cmake", "--build", str(build)])
        package = pathlib.Path(self.build_lib) / "wt"
        with tempfile.TemporaryDirectory(prefix="wt-wheel-") as stage:
            subprocess.check_call(["cmake", "--install", str(build), "--prefix", stage],
                                  stdout=subprocess.DEVNULL)
            stage = pathlib.Path(stage)
            extensions = glob.glob(str(stage / "lib/python3/dist-packages/wt/_wt*.so"))
            if not extensions:
                sys.exit(f"the build in {build} has no Python extension: configure it with "
                         "python3-dev and pybind11-dev installed (scripts/install-deps.sh)")
            for ext in extensions:
                shutil.copy2(ext, package)
            libdir = next(p for p in (stage / "lib", stage / "lib64") if (p / "wt").is_dir())
            (package / "lib").mkdir(exist_ok=True)
            for lib in libdir.glob("libwt*.so*"):
                shutil.copy2(lib, package / "lib", follow_symlinks=False)
            shutil.copytree(libdir / "wt" / "plugins", package / "lib" / "wt" / "plugins",
                            dirs_exist_ok=True)
            (package / "bin").mkdir(exist_ok=True)
            shutil.copy2(stage / "bin" / "wt", package / "bin" / "wt")
            if (stage / "share" / "wt").is_dir():
                shutil.copytree(stage / "share" / "wt", package / "share" / "wt",
                                dirs_exist_ok=True)


setup(distclass=WithNativeParts, cmdclass={"build_py": BuildWithCMake})
