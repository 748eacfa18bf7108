# SPDX-License-Identifier: Apache-2.0
# Shared part of cmake/toolchain-aarch64.cmake and cmake/toolchain-armhf.cmake: Debian's cross
# gcc for FLASHCL_CROSS_TRIPLET (set by the including file) and a target root holding the
# target's libraries and headers (OpenCL, CLBlast, Criterion, libc), looked up there only.
#
# The target root is FLASHCL_SYSROOT (a -D cache value or the environment variable), by default
# .deps/sysroot-<triplet> of this checkout, which scripts/cross-build fills from Debian's
# packages. FLASHCL_SYSROOT=/ takes the build machine's own multiarch packages instead
# (dpkg --add-architecture and apt-get install ocl-icd-opencl-dev:arm64 ...).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${FLASHCL_CROSS_TRIPLET}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${FLASHCL_CROSS_TRIPLET})

if(NOT FLASHCL_SYSROOT)
  if(DEFINED ENV{FLASHCL_SYSROOT})
    set(FLASHCL_SYSROOT $ENV{FLASHCL_SYSROOT})
  else()
    get_filename_component(FLASHCL_SYSROOT ${CMAKE_CURRENT_LIST_DIR}/../.deps/sysroot-${FLASHCL_CROSS_TRIPLET}
                           ABSOLUTE)
  endif()
endif()
# try_compile projects read this file again: hand them the same root.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FLASHCL_SYSROOT FLASHCL_CROSS_TRIPLET)

if(NOT FLASHCL_SYSROOT STREQUAL "/")
  if(NOT EXISTS ${FLASHCL_SYSROOT}/usr/include)
    message(FATAL_ERROR "no target root at ${FLASHCL_SYSROOT}: run scripts/cross-build, or set FLASHCL_SYSROOT")
  endif()
  set(CMAKE_SYSROOT ${FLASHCL_SYSROOT})
  set(CMAKE_FIND_ROOT_PATH ${FLASHCL_SYSROOT})
  set(ENV{PKG_CONFIG_SYSROOT_DIR} ${FLASHCL_SYSROOT})
  set(ENV{PKG_CONFIG_LIBDIR}
      "${FLASHCL_SYSROOT}/usr/lib/${FLASHCL_CROSS_TRIPLET}/pkgconfig:${FLASHCL_SYSROOT}/usr/share/pkgconfig")
  # The linker follows the target libraries' own dependencies (Criterion's libgit2, ...) there.
  foreach(dir lib/${FLASHCL_CROSS_TRIPLET} usr/lib/${FLASHCL_CROSS_TRIPLET})
    string(APPEND CMAKE_EXE_LINKER_FLAGS_INIT " -Wl,-rpath-link,${FLASHCL_SYSROOT}/${dir}")
    string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -Wl,-rpath-link,${FLASHCL_SYSROOT}/${dir}")
  endforeach()
else()
  set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${FLASHCL_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig")
endif()

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
