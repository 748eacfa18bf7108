/* SPDX-License-Identifier: Apache-2.0 */
/* Host float32 <-> F16 / BF16 conversions, round to nearest even. */
#include <flashcl/flashcl.h>

#include <string.h>

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

uint16_t fcl_f32_to_f16(float x)
{
    uint32_t u = bits_of(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) /* NaN: keep it quiet and non-zero */
        return (uint16_t)(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
    if (absu >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal half (2^-14): subnormal or zero */
        if (absu < 0x33000000u) /* below half of the smallest subnormal (2^-25): zero */
            return sign;
        uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(absu >> 23); /* mant * 2^(e-150) in units of 2^-24 */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = absu - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

float fcl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu)
        return float_of(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24, exact */
        return sign ? -v : v;
    }
    return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t fcl_f32_to_bf16(float x)
{
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float fcl_bf16_to_f32(uint16_t b) { return float_of((uint32_t)b << 16); }
