/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-disk program-binary cache. Internal to flashcl; not part of the public API.
 *
 * One file per entry, <dir>/<64 lowercase hex of key>.clbin, laid out (integers little-endian):
 *
 *   offset  size  field
 *        0     8  magic "FCLBIN\0\1"
 *        8     4  format version (FCL_DISK_CACHE_FORMAT)
 *       12     4  reserved, 0
 *       16    32  key (the entry's own key, checked against the file name's)
 *       48     8  payload length in bytes
 *       56    32  SHA-256 of the payload
 *       88     n  payload (the program binary)
 *
 * Entries are written to a uniquely named temporary file in the same folder and renamed over
 * the final name, so readers see either the old file or the whole new one. A file that fails
 * any check is reported as bad; the caller recompiles and stores over it.
 * No function here prints, aborts or exits. All are safe to call from several threads.
 */
#ifndef FLASHCL_DISK_CACHE_H
#define FLASHCL_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define FCL_DISK_CACHE_FORMAT 1u
#define FCL_DISK_CACHE_HEADER_SIZE 88u
/* Payloads larger than this are neither stored nor accepted (1 GiB). */
#define FCL_DISK_CACHE_MAX_PAYLOAD ((uint64_t)1 << 30)

/*
 * The cache folder to use, or NULL when the disk cache is off. FLASHCL_CACHE_DIR chooses it;
 * "off" (any case) turns the cache off; unset or empty means $XDG_CACHE_HOME/flashcl (when
 * XDG_CACHE_HOME is an absolute path), else $HOME/.cache/flashcl, else off. The folder is
 * created (with parents, mode 0755) and checked writable by creating and removing a probe
 * file; any failure gives NULL. Returns a malloc'd string without trailing '/' (caller frees).
 */
char *fcl_disk_cache_resolve_dir(void);

/*
 * Whether compiled programs of a device on platform `platform_name` go to the disk cache
 * (tuned tiles always do). FLASHCL_CACHE_PROGRAMS=1 says yes and =0 no on every device;
 * otherwise yes, except on PoCL while its own kernel cache is on (POCL_KERNEL_CACHE unset or
 * not 0): PoCL keeps every build in that cache already, and handing out a program's binary
 * makes it compile a generic copy of every kernel in the program on top of the ones it runs.
 */
int fcl_programs_on_disk(const char *platform_name);

/*
 * Looks up `key` in `dir`. Returns
 *    1  hit: *bin is a malloc'd copy of the payload (caller frees), *len its size (> 0);
 *    0  no usable entry and nothing known wrong with one: no file, or it could not be read
 *       for reasons outside its content (permissions, I/O error, out of memory), or dir/key
 *       NULL;
 *   -1  a bad entry: not a regular file, too short, wrong magic or format version, a key
 *       that is not `key`, a length that disagrees with the file's size, a zero or oversized
 *       length, or a payload whose SHA-256 differs from the header's.
 * On 0 and -1, *bin is NULL and *len is 0.
 */
int fcl_disk_cache_load(const char *dir, const uint8_t key[32], unsigned char **bin, size_t *len);

/*
 * Stores `len` bytes of `bin` under `key` in `dir`, atomically replacing any entry there (a
 * folder planted under the entry's name is removed with its contents, never following links).
 * Returns 0 on success, -1 on failure (bad arguments, len == 0 or over the maximum, any I/O
 * error); on failure the temporary file is removed and any previous entry is left as it was.
 */
int fcl_disk_cache_store(const char *dir, const uint8_t key[32], const unsigned char *bin, size_t len);

#endif
