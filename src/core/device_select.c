/* SPDX-License-Identifier: Apache-2.0 */
/* Device selection: turns a selector string into a (platform, device) pair. */
#include "core/device_select.h"

#include "core/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLATFORMS 32
#define MAX_DEVICES 64

static int contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

static cl_uint list_devices(cl_platform_id p, cl_device_type type, cl_device_id *out)
{
    cl_uint n = 0;
    if (clGetDeviceIDs(p, type, MAX_DEVICES, out, &n) != CL_SUCCESS)
        return 0; /* CL_DEVICE_NOT_FOUND: a platform without devices is skipped */
    return n < MAX_DEVICES ? n : MAX_DEVICES;
}

static int first_of_type(cl_platform_id *plats, cl_uint np, cl_device_type type,
                         fcl_device_choice *out)
{
    cl_device_id devs[MAX_DEVICES];
    for (cl_uint p = 0; p < np; p++) {
        if (list_devices(plats[p], type, devs) > 0) {
            out->platform = plats[p];
            out->device = devs[0];
            return 1;
        }
    }
    return 0;
}

/* Whether `word` names device d of platform p: pass 0 matches the platform's name or vendor,
 * pass 1 the device's vendor or name. */
static int matches_name(cl_platform_id p, cl_device_id d, const char *word, int pass)
{
    char buf[512];
    const cl_platform_info pinfo[2] = {CL_PLATFORM_NAME, CL_PLATFORM_VENDOR};
    const cl_device_info dinfo[2] = {CL_DEVICE_VENDOR, CL_DEVICE_NAME};
    for (int i = 0; i < 2; i++) {
        const cl_int err = pass == 0 ? clGetPlatformInfo(p, pinfo[i], sizeof buf, buf, NULL)
                                     : clGetDeviceInfo(d, dinfo[i], sizeof buf, buf, NULL);
        buf[sizeof buf - 1] = '\0';
        if (err == CL_SUCCESS && contains_nocase(buf, word))
            return 1;
    }
    return 0;
}

/* The first device whose platform matches `word`, else the first device that matches it itself:
 * "intel" is Intel's OpenCL platform even where PoCL names its CPU device after the processor
 * ("pthread-skylake-avx512-Intel(R) Xeon(R) ...", vendor "GenuineIntel"). */
static int by_name(cl_platform_id *plats, cl_uint np, const char *word, fcl_device_choice *out)
{
    cl_device_id devs[MAX_DEVICES];
    for (int pass = 0; pass < 2; pass++)
        for (cl_uint p = 0; p < np; p++) {
            cl_uint nd = list_devices(plats[p], CL_DEVICE_TYPE_ALL, devs);
            for (cl_uint d = 0; d < nd; d++) {
                if (matches_name(plats[p], devs[d], word, pass)) {
                    out->platform = plats[p];
                    out->device = devs[d];
                    return 1;
                }
            }
        }
    return 0;
}

static int by_index(cl_platform_id *plats, cl_uint np, const char *sel, fcl_device_choice *out)
{
    char *end = NULL;
    long pi = strtol(sel, &end, 10);
    if (end == sel || *end != ':')
        return -1;
    const char *ds = end + 1;
    long di = strtol(ds, &end, 10);
    if (end == ds || *end != '\0')
        return -1;
    cl_device_id devs[MAX_DEVICES];
    if (pi < 0 || pi >= (long)np || di < 0)
        return 0;
    cl_uint nd = list_devices(plats[pi], CL_DEVICE_TYPE_ALL, devs);
    if (di >= (long)nd)
        return 0;
    out->platform = plats[pi];
    out->device = devs[di];
    return 1;
}

fcl_status fcl_select_device(const char *selector, fcl_device_choice *out)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    if (!selector || !*selector)
        selector = getenv("FLASHCL_DEVICE");
    if (clGetPlatformIDs(MAX_PLATFORMS, plats, &np) != CL_SUCCESS || np == 0)
        return fcl_fail(NULL, FCL_ERR_NO_DEVICE, "no OpenCL platform is installed (the ICD loader found none)");
    if (np > MAX_PLATFORMS)
        np = MAX_PLATFORMS;
    int found;
    if (!selector || !*selector) {
        found = first_of_type(plats, np, CL_DEVICE_TYPE_GPU, out) ||
                first_of_type(plats, np, CL_DEVICE_TYPE_CPU, out) ||
                first_of_type(plats, np, CL_DEVICE_TYPE_ALL, out);
        if (!found)
            return fcl_fail(NULL, FCL_ERR_NO_DEVICE, "no OpenCL device found on %u platform(s)", (unsigned)np);
        return FCL_SUCCESS;
    }
    if (strcmp(selector, "gpu") == 0)
        found = first_of_type(plats, np, CL_DEVICE_TYPE_GPU, out);
    else if (strcmp(selector, "cpu") == 0)
        found = first_of_type(plats, np, CL_DEVICE_TYPE_CPU, out);
    else {
        found = by_index(plats, np, selector, out);
        if (found < 0)
            found = by_name(plats, np, selector, out);
    }
    if (!found)
        return fcl_fail(NULL, FCL_ERR_NO_DEVICE,
                        "no OpenCL device matches selector \"%s\" (%u platform(s) present; "
                        "flashcl-info lists them)", selector, (unsigned)np);
    return FCL_SUCCESS;
}
