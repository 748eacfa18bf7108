/* SPDX-License-Identifier: Apache-2.0 */
#include "cache/disk_cache.h"

#include "cache/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static const unsigned char fcl_disk_cache_magic[8] = {'F', 'C', 'L', 'B', 'I', 'N', 0, 1};

static atomic_uint fcl_disk_cache_counter;

/* ------------------------------------------------------------------ helpers */

static void put_u32le(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64le(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32le(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* 64 lowercase hex digits and a NUL. */
static void key_hex(const uint8_t key[32], char out[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[key[i] >> 4];
        out[2 * i + 1] = digits[key[i] & 15];
    }
    out[64] = '\0';
}

/* malloc'd "<dir>/<name>", or NULL. */
static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + 1 + b + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* A value that differs between calls, threads and processes (uniqueness, not secrecy). */
static uint64_t unique_bits(void)
{
    struct timespec ts;
    uint64_t x = 0;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    unsigned c = atomic_fetch_add(&fcl_disk_cache_counter, 1u);
    int local = 0;
    x ^= (uint64_t)(uintptr_t)&local * 0x9e3779b97f4a7c15u;
    x ^= ((uint64_t)c << 32) ^ (uint64_t)getpid();
    /* splitmix64 finaliser */
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

/* Creates a new file "<dir>/<prefix>.<pid>.<counter>.<random>" with O_EXCL; returns its fd and
 * its malloc'd path in *path_out, or -1. */
static int create_unique(const char *dir, const char *prefix, char **path_out)
{
    *path_out = NULL;
    for (int attempt = 0; attempt < 16; attempt++) {
        char name[160];
        unsigned c = atomic_fetch_add(&fcl_disk_cache_counter, 1u);
        int n = snprintf(name, sizeof name, "%s.%ld.%u.%016llx", prefix, (long)getpid(), c,
                         (unsigned long long)unique_bits());
        if (n < 0 || (size_t)n >= sizeof name)
            return -1;
        char *path = join_path(dir, name);
        if (!path)
            return -1;
        int fd;
        do
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        while (fd < 0 && errno == EINTR);
        if (fd >= 0) {
            *path_out = path;
            return fd;
        }
        int err = errno;
        free(path);
        if (err != EEXIST)
            return -1;
    }
    return -1;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0)
            return -1;
        p += (size_t)w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes: 0 on success, 1 on early end of file, -1 on an error. */
static int read_all(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = read(fd, p, chunk);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 1;
        p += (size_t)r;
        n -= (size_t)r;
    }
    return 0;
}

/* ------------------------------------------------------------------ folder */

static int ascii_ieq(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y - 'A' + 'a');
        if (x != y)
            return 0;
        if (x == 0)
            return 1;
    }
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* mkdir -p with mode 0755 (path is modified temporarily, restored on return). */
static int make_dirs(char *path)
{
    size_t n = strlen(path);
    if (n == 0)
        return -1;
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/')
            continue; /* repeated slash */
        char saved = path[i];
        path[i] = '\0';
        int ok = mkdir(path, 0755) == 0 || (errno == EEXIST && is_dir(path));
        path[i] = saved;
        if (!ok)
            return -1;
    }
    return 0;
}

static int probe_writable(const char *dir)
{
    char *probe = NULL;
    int fd = create_unique(dir, ".flashcl-probe", &probe);
    if (fd < 0)
        return -1;
    int ok = close(fd) == 0;
    if (unlink(probe) != 0)
        ok = 0;
    free(probe);
    return ok ? 0 : -1;
}

char *fcl_disk_cache_resolve_dir(void)
{
    const char *env = getenv("FLASHCL_CACHE_DIR");
    char *dir = NULL;
    if (env && env[0]) {
        if (ascii_ieq(env, "off"))
            return NULL;
        dir = strdup(env);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME");
        const char *home = getenv("HOME");
        if (xdg && xdg[0] == '/')
            dir = join_path(xdg, "flashcl");
        else if (home && home[0])
            dir = join_path(home, ".cache/flashcl");
        else
            return NULL;
    }
    if (!dir)
        return NULL;
    /* drop trailing slashes, keeping a lone "/" */
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    if (make_dirs(dir) != 0 || !is_dir(dir) || probe_writable(dir) != 0) {
        free(dir);
        return NULL;
    }
    return dir;
}

int fcl_programs_on_disk(const char *platform_name)
{
    const char *force = getenv("FLASHCL_CACHE_PROGRAMS");
    if (force && (strcmp(force, "0") == 0 || strcmp(force, "1") == 0))
        return force[0] == '1';
    const char *pocl_cache = getenv("POCL_KERNEL_CACHE");
    return !(platform_name && strstr(platform_name, "Portable Computing Language") &&
             !(pocl_cache && strcmp(pocl_cache, "0") == 0));
}

/* ------------------------------------------------------------------ entries */

static char *entry_path(const char *dir, const uint8_t key[32])
{
    char name[64 + sizeof ".clbin"];
    key_hex(key, name);
    memcpy(name + 64, ".clbin", sizeof ".clbin");
    return join_path(dir, name);
}

int fcl_disk_cache_load(const char *dir, const uint8_t key[32], unsigned char **bin, size_t *len)
{
    if (bin)
        *bin = NULL;
    if (len)
        *len = 0;
    if (!dir || !key || !bin || !len)
        return 0;
    char *path = entry_path(dir, key);
    if (!path)
        return 0;
    int fd;
    do /* O_NONBLOCK: a FIFO planted under the name must not block the open */
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    int open_err = errno;
    free(path);
    if (fd < 0) /* a socket under the name gives ENXIO: bad; absent or unreadable: no entry */
        return open_err == ENXIO ? -1 : 0;

    int result = -1;
    unsigned char *payload = NULL;
    unsigned char hdr[FCL_DISK_CACHE_HEADER_SIZE];
    struct stat st;
    if (fstat(fd, &st) != 0) {
        result = 0;
        goto done;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)FCL_DISK_CACHE_HEADER_SIZE)
        goto done;
    /* regular files ignore O_NONBLOCK for reads; clear it anyway */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);

    int r = read_all(fd, hdr, sizeof hdr);
    if (r != 0) {
        result = r > 0 ? -1 : 0;
        goto done;
    }
    if (memcmp(hdr, fcl_disk_cache_magic, 8) != 0 || get_u32le(hdr + 8) != FCL_DISK_CACHE_FORMAT ||
        get_u32le(hdr + 12) != 0 || memcmp(hdr + 16, key, 32) != 0)
        goto done;
    uint64_t n = get_u64le(hdr + 48);
    if (n == 0 || n > FCL_DISK_CACHE_MAX_PAYLOAD || n > (uint64_t)SIZE_MAX ||
        (uint64_t)st.st_size - FCL_DISK_CACHE_HEADER_SIZE != n)
        goto done;
    payload = malloc((size_t)n);
    if (!payload) {
        result = 0;
        goto done;
    }
    r = read_all(fd, payload, (size_t)n);
    if (r != 0) {
        result = r > 0 ? -1 : 0;
        goto done;
    }
    unsigned char extra;
    ssize_t more;
    do
        more = read(fd, &extra, 1);
    while (more < 0 && errno == EINTR);
    if (more != 0) { /* grew since fstat, or a read error */
        result = more > 0 ? -1 : 0;
        goto done;
    }
    uint8_t digest[32];
    fcl_sha256_digest(payload, (size_t)n, digest);
    if (memcmp(digest, hdr + 56, 32) != 0)
        goto done;
    *bin = payload;
    *len = (size_t)n;
    payload = NULL;
    result = 1;
done:
    free(payload);
    close(fd);
    return result;
}

/* Removes the folder `name` of folder dirfd with everything below it, never following a link
 * (links are removed, not their targets) and at most 16 levels deep: 0 on success. */
static int remove_tree_at(int dirfd, const char *name, int depth)
{
    if (depth > 16)
        return -1;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int ok = 1;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (unlinkat(fd, e->d_name, 0) != 0) /* a folder: EISDIR on Linux, EPERM by POSIX */
            ok = (errno == EISDIR || errno == EPERM) && remove_tree_at(fd, e->d_name, depth + 1) == 0;
    }
    closedir(d);
    return ok && unlinkat(dirfd, name, AT_REMOVEDIR) == 0 ? 0 : -1;
}

/* Renames tmp over final_path; a folder planted under the entry's name (which rename cannot
 * replace, so every later run would reject the entry again) is removed first. 0 on success. */
static int rename_over(const char *tmp, const char *final_path)
{
    if (rename(tmp, final_path) == 0)
        return 0;
    struct stat st;
    if ((errno != EISDIR && errno != ENOTEMPTY && errno != EEXIST) || lstat(final_path, &st) != 0 ||
        !S_ISDIR(st.st_mode) || remove_tree_at(AT_FDCWD, final_path, 0) != 0)
        return -1;
    return rename(tmp, final_path);
}

int fcl_disk_cache_store(const char *dir, const uint8_t key[32], const unsigned char *bin, size_t len)
{
    if (!dir || !key || !bin || len == 0 || (uint64_t)len > FCL_DISK_CACHE_MAX_PAYLOAD)
        return -1;
    char *final_path = entry_path(dir, key);
    if (!final_path)
        return -1;
    char hex[65];
    key_hex(key, hex);
    char prefix[96];
    snprintf(prefix, sizeof prefix, ".%.16s.tmp", hex);
    char *tmp = NULL;
    int fd = create_unique(dir, prefix, &tmp);
    if (fd < 0) {
        free(final_path);
        return -1;
    }

    unsigned char hdr[FCL_DISK_CACHE_HEADER_SIZE];
    memcpy(hdr, fcl_disk_cache_magic, 8);
    put_u32le(hdr + 8, FCL_DISK_CACHE_FORMAT);
    put_u32le(hdr + 12, 0);
    memcpy(hdr + 16, key, 32);
    put_u64le(hdr + 48, (uint64_t)len);
    fcl_sha256_digest(bin, len, hdr + 56);

    int ok = write_all(fd, hdr, sizeof hdr) == 0 && write_all(fd, bin, len) == 0;
    /* No fsync: a file cut short by a crash fails the length or checksum check on load. */
    if (close(fd) != 0)
        ok = 0;
    if (ok && rename_over(tmp, final_path) != 0)
        ok = 0;
    if (!ok)
        unlink(tmp);
    free(tmp);
    free(final_path);
    return ok ? 0 : -1;
}
