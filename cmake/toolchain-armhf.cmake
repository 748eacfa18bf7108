# SPDX-License-Identifier: Apache-2.0
# 32-bit Arm Linux, hard float (armhf: ARMv7-A, VFPv3-D16, Thumb-2) with Debian's
# gcc-arm-linux-gnueabihf; see cmake/cross-debian.cmake.
set(CMAKE_SYSTEM_PROCESSOR arm)
set(FLASHCL_CROSS_TRIPLET arm-linux-gnueabihf)
include(${CMAKE_CURRENT_LIST_DIR}/cross-debian.cmake)
