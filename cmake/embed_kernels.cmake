# SPDX-License-Identifier: Apache-2.0
# Writes OUT: a C file holding each OpenCL source in SOURCES as a NUL-terminated byte array,
# plus a lookup table, so no kernel file is read at run time.
set(body "/* Generated from the cl/ folder by cmake/embed_kernels.cmake; do not edit. */\n#include <stddef.h>\n#include <string.h>\n")
set(table "")
string(REPLACE "|" ";" SOURCES "${SOURCES}")
foreach(src ${SOURCES})
  get_filename_component(name ${src} NAME_WE)
  file(READ ${src} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "static const char src_${name}[] = {${bytes}0x00};\n")
  string(APPEND table "    {\"${name}\", src_${name}},\n")
endforeach()
string(APPEND body "static const struct { const char *name; const char *text; } sources[] = {\n${table}};\n")
string(APPEND body "const char *fcl_kernel_source(const char *name)\n{\n    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++)\n        if (strcmp(sources[i].name, name) == 0)\n            return sources[i].text;\n    return NULL;\n}\n")
file(WRITE ${OUT} "${body}")
