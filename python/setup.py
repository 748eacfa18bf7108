# SPDX-License-Identifier: Apache-2.0
"""Builds the flashcl Python package: a ctypes binding plus the C library.

By default the C library is built with CMake from the repository around this folder (options
FLASHCL_BUILD_TESTS/TOOLS/EXAMPLES off) and bundled as flashcl/_native/libflashcl.so. With
FLASHCL_PREFIX set, the library installed under that prefix is used instead (its path is
recorded in flashcl/_build.py; nothing is compiled). FLASHCL_LIBRARY at run time overrides both.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def read_version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(flashcl VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text)
    if not m:
        raise RuntimeError("no flashcl version in ../CMakeLists.txt")
    return m.group(1)


def installed_library(prefix: str) -> str:
    """The shared library under an installed prefix (lib/, lib64/ or lib/<triplet>/)."""
    hits = sorted(Path(prefix).glob("lib*/**/libflashcl.so*")) + sorted(Path(prefix).glob("lib*/libflashcl.so*"))
    real = [p for p in hits if p.is_file() and not p.is_symlink()]
    if not real:
        raise RuntimeError(f"FLASHCL_PREFIX={prefix}: no libflashcl.so under {prefix}/lib*")
    return str(real[0].resolve())


class BuildWithLibrary(build_py):
    """build_py that also provides the C library (built or found) and writes flashcl/_build.py."""

    def run(self) -> None:
        super().run()
        pkg = Path(self.build_lib) / "flashcl"
        prefix = os.environ.get("FLASHCL_PREFIX")
        library = None
        if prefix:
            library = installed_library(prefix)
        else:
            self.build_native(pkg / "_native")
        (pkg / "_build.py").write_text(
            '"""Written by setup.py: how this copy of the package finds the C library."""\n'
            f"VERSION = {read_version()!r}\n"
            f"LIBRARY = {library!r}  # None: the bundled _native/libflashcl.so\n"
        )

    def build_native(self, dest: Path) -> None:
        build_dir = Path(self.get_finalized_command("build").build_temp) / "flashcl-cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
            "-DFLASHCL_BUILD_TESTS=OFF", "-DFLASHCL_BUILD_TOOLS=OFF", "-DFLASHCL_BUILD_EXAMPLES=OFF",
            "-DCMAKE_SKIP_BUILD_RPATH=ON",
        ]
        subprocess.check_call(configure)
        jobs = str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "flashcl", "-j", jobs])
        lib = (build_dir / "libflashcl.so").resolve()
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, dest / "libflashcl.so")


try:
    from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """The wheel holds a native library: tagged for the platform, for any Python 3."""

        def finalize_options(self) -> None:
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    extra = {"bdist_wheel": PlatformWheel}
except ImportError:  # no wheel package: sdist or develop builds only
    extra = {}

setup(version=read_version(), cmdclass={"build_py": BuildWithLibrary, **extra})
