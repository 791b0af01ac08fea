/* reduce_kernels.h — the body of one set of reduction kernels, included by reduce.c once
 * per instruction set (KSFX names it, KATTR is its target attribute, KF16_* convert 16
 * halves at a time). Loops work on fixed blocks copied to locals so the compiler emits
 * vector code for them and dst == a needs no alias check; the tail is padded with zeros.
 * Not here: choosing the set at run time (reduce.c). Proved by tests/comm/test_reduce.c. */
#define KCAT2(a, b) a##_##b
#define KCAT(a, b) KCAT2(a, b)
#define KN(name) KCAT(name, KSFX)

/* One elementwise pass of T with x = EXPR(x, y); L elements per block (128 bytes). */
#define KLOOP(T, EXPR)                                                                     \
    do {                                                                                   \
        enum { L = 128 / sizeof(T) };                                                      \
        T *d_ = (T *)dst;                                                                  \
        const T *a_ = (const T *)a, *b_ = (const T *)b;                                    \
        size_t i_ = 0;                                                                     \
        for (; i_ + L <= count; i_ += L) {                                                 \
            T x[L], y[L];                                                                  \
            memcpy(x, a_ + i_, sizeof x);                                                  \
            memcpy(y, b_ + i_, sizeof y);                                                  \
            for (size_t j = 0; j < L; j++) x[j] = EXPR(x[j], y[j]);                        \
            memcpy(d_ + i_, x, sizeof x);                                                  \
        }                                                                                  \
        if (i_ < count) {                                                                  \
            T x[L] = {0}, y[L] = {0};                                                      \
            size_t r_ = (count - i_) * sizeof(T);                                          \
            memcpy(x, a_ + i_, r_);                                                        \
            memcpy(y, b_ + i_, r_);                                                        \
            for (size_t j = 0; j < L; j++) x[j] = EXPR(x[j], y[j]);                        \
            memcpy(d_ + i_, x, r_);                                                        \
        }                                                                                  \
    } while (0)

#define KOPS(T, U, F_ADD, F_MUL, F_MIN, F_MAX)                                             \
    do {                                                                                   \
        switch (op) {                                                                      \
        case SHOAL_SUM:                                                                    \
        case SHOAL_AVG: KLOOP(U, F_ADD); break;                                            \
        case SHOAL_PROD: KLOOP(U, F_MUL); break;                                           \
        case SHOAL_MIN: KLOOP(T, F_MIN); break;                                            \
        case SHOAL_MAX: KLOOP(T, F_MAX); break;                                            \
        default: break;                                                                    \
        }                                                                                  \
    } while (0)

/* 16-bit floats: blocks of 32 widened to float32, reduced, rounded back. */
#define KHALF(LOAD16, STORE16)                                                             \
    do {                                                                                   \
        uint16_t *d_ = (uint16_t *)dst;                                                    \
        const uint16_t *a_ = (const uint16_t *)a, *b_ = (const uint16_t *)b;               \
        for (size_t i_ = 0; i_ < count; i_ += 32) {                                        \
            uint16_t ha[32] = {0}, hb[32] = {0};                                           \
            size_t r_ = count - i_ < 32 ? count - i_ : 32;                                 \
            memcpy(ha, a_ + i_, r_ * 2);                                                   \
            memcpy(hb, b_ + i_, r_ * 2);                                                   \
            float x[32], y[32];                                                            \
            LOAD16(x, ha);                                                                 \
            LOAD16(x + 16, ha + 16);                                                       \
            LOAD16(y, hb);                                                                 \
            LOAD16(y + 16, hb + 16);                                                       \
            switch (op) {                                                                  \
            case SHOAL_PROD:                                                               \
                for (int j = 0; j < 32; j++) x[j] = R_MUL(x[j], y[j]);                     \
                break;                                                                     \
            case SHOAL_MIN:                                                                \
                for (int j = 0; j < 32; j++) x[j] = R_FMIN(x[j], y[j]);                    \
                break;                                                                     \
            case SHOAL_MAX:                                                                \
                for (int j = 0; j < 32; j++) x[j] = R_FMAX(x[j], y[j]);                    \
                break;                                                                     \
            default:                                                                       \
                for (int j = 0; j < 32; j++) x[j] = R_ADD(x[j], y[j]);                     \
                break;                                                                     \
            }                                                                              \
            STORE16(ha, x);                                                                \
            STORE16(ha + 16, x + 16);                                                      \
            memcpy(d_ + i_, ha, r_ * 2);                                                   \
        }                                                                                  \
    } while (0)

KATTR static void KN(reduce3)(void *dst, const void *a, const void *b, size_t count,
                              shoal_dtype dt, shoal_op op)
{
    switch (dt) {
    case SHOAL_INT8: KOPS(int8_t, uint8_t, R_ADD, R_MUL, R_IMIN, R_IMAX); break;
    case SHOAL_UINT8: KOPS(uint8_t, uint8_t, R_ADD, R_MUL, R_IMIN, R_IMAX); break;
    case SHOAL_INT32: KOPS(int32_t, uint32_t, R_ADD, R_MUL, R_IMIN, R_IMAX); break;
    case SHOAL_INT64: KOPS(int64_t, uint64_t, R_ADD, R_MUL, R_IMIN, R_IMAX); break;
    case SHOAL_FLOAT32: KOPS(float, float, R_ADD, R_MUL, R_FMIN, R_FMAX); break;
    case SHOAL_FLOAT64: KOPS(double, double, R_ADD, R_MUL, R_FMIN, R_FMAX); break;
    case SHOAL_FLOAT16: KHALF(KF16_LOAD16, KF16_STORE16); break;
    case SHOAL_BFLOAT16: KHALF(KBF16_LOAD16, KBF16_STORE16); break;
    default: break;
    }
}

#undef KLOOP
#undef KOPS
#undef KHALF
#undef KN
#undef KCAT
#undef KCAT2
