# SPDX-License-Identifier: Apache-2.0
# Installation (GNUInstallDirs), the CMake package (flashclConfig.cmake, flashclConfigVersion.cmake,
# flashclTargets.cmake), flashcl.pc, and the .deb packages (cpack -G DEB). Components:
#   runtime  the shared library, LICENSE and NOTICE         -> package libflashclMAJOR.MINOR
#   dev      header, static library, CMake package, .pc     -> package libflashcl-dev
#   tools    flashcl-info, flashcl-bench (tools/CMakeLists)  -> package flashcl-tools
include(CMakePackageConfigHelpers)

set(FLASHCL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashcl)

install(TARGETS flashcl flashcl_static EXPORT flashclTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/flashcl DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(FILES LICENSE NOTICE DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

install(EXPORT flashclTargets NAMESPACE flashcl:: DESTINATION ${FLASHCL_CMAKE_DIR} COMPONENT dev)
set(FLASHCL_CLBLAST_IS_TARGET OFF)
if(FLASHCL_USE_CLBLAST AND TARGET clblast)
  set(FLASHCL_CLBLAST_IS_TARGET ON)
endif()
configure_package_config_file(cmake/flashclConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/flashclConfig.cmake
                              INSTALL_DESTINATION ${FLASHCL_CMAKE_DIR})
# 0.x: a minor release may change the ABI, so only the same MAJOR.MINOR is compatible.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(FLASHCL_COMPATIBILITY SameMinorVersion)
else()
  set(FLASHCL_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashclConfigVersion.cmake
                                 COMPATIBILITY ${FLASHCL_COMPATIBILITY})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashclConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flashclConfigVersion.cmake
        DESTINATION ${FLASHCL_CMAKE_DIR} COMPONENT dev)

# pkg-config: relocatable (prefix from the .pc file's own folder); Libs.private is what a
# static link adds.
file(RELATIVE_PATH FLASHCL_PC_RELATIVE_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" FLASHCL_PC_RELATIVE_PREFIX "${FLASHCL_PC_RELATIVE_PREFIX}")
set(FLASHCL_PC_LIBS_PRIVATE "-lOpenCL -lm -pthread")
if(FLASHCL_USE_CLBLAST)
  set(FLASHCL_PC_LIBS_PRIVATE "-lclblast ${FLASHCL_PC_LIBS_PRIVATE}")
endif()
configure_file(cmake/flashcl.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flashcl.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashcl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# .deb packages, one per component.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME flashcl)
set(CPACK_PACKAGE_VENDOR "The flashcl authors")
set(CPACK_PACKAGE_CONTACT "The flashcl authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Flash-attention kernels in OpenCL C for every OpenCL 1.2 device")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libflashcl${FLASHCL_SOVERSION})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libflashcl-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libflashcl${FLASHCL_SOVERSION} (= ${PROJECT_VERSION}), ocl-icd-opencl-dev | opencl-dev, opencl-c-headers | opencl-headers")
if(FLASHCL_USE_CLBLAST)
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libclblast-dev")
endif()
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME flashcl-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION science)
# The tools link libflashcl from its own package (no shlibs entry for it outside the build), so
# their dependencies are written out.
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS
    "libflashcl${FLASHCL_SOVERSION} (= ${PROJECT_VERSION}), libclblast1, ocl-icd-libopencl1 | libopencl1, libc6")
include(CPack)
cpack_add_component(runtime DISPLAY_NAME "flashcl shared library" DESCRIPTION "libflashcl.so, the flashcl runtime")
cpack_add_component(dev DISPLAY_NAME "flashcl development files" DEPENDS runtime
                    DESCRIPTION "flashcl.h, libflashcl.a, the CMake package and flashcl.pc")
cpack_add_component(tools DISPLAY_NAME "flashcl tools" DEPENDS runtime
                    DESCRIPTION "flashcl-info and flashcl-bench")
