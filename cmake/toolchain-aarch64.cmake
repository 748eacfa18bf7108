# SPDX-License-Identifier: Apache-2.0
# 64-bit Arm Linux (aarch64) with Debian's gcc-aarch64-linux-gnu; see cmake/cross-debian.cmake.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(FLASHCL_CROSS_TRIPLET aarch64-linux-gnu)
include(${CMAKE_CURRENT_LIST_DIR}/cross-debian.cmake)
