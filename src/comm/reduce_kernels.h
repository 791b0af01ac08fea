/* reduce_kernels.h — the body of one set of reduction kernels, included by reduce.c once
 * per instruction set (KSFX names it, KATTR is its target attribute, KF16_* convert 16
 * halves at a time). Loops work on fixed blocks copied to locals so the compiler emits
 * vector code for them (GCC/clang vector extensions) and dst == a needs no alias check;
 * the tail is padded with zeros.
 * Not here: choosing the set at run time (reduce.c). Proved by tests/comm/test_reduce.c. */
#define KCAT2(a, b) a##_##b
#define KCAT(a, b) KCAT2(a, b)
#define KN(name) KCAT(name, KSFX)

/* One elementwise pass over T: V is a 128-byte vector of T (GCC/clang vector extensions,
 * lowered to the set's registers), VI the same bits as signed integers for selects. The
 * tail is padded with zeros (harmless for every op). STEP(x, y) leaves x OP y in x. */
#define KLOOP(T, I, STEP)                                                                  \
    do {                                                                                   \
        typedef T V __attribute__((vector_size(128), aligned(1)));                         \
        typedef I VI __attribute__((vector_size(128), aligned(1)));                        \
        enum { L = 128 / sizeof(T), VI_NBYTES_ = sizeof(VI) }; /* VI used by selects */   \
        T *d_ = (T *)dst;                                                                  \
        const T *a_ = (const T *)a, *b_ = (const T *)b;                                    \
        size_t i_ = 0;                                                                     \
        for (; i_ + L <= count; i_ += L) {                                                 \
            V x, y;                                                                        \
            memcpy(&x, a_ + i_, sizeof x);                                                 \
            memcpy(&y, b_ + i_, sizeof y);                                                 \
            STEP(x, y);                                                                    \
            memcpy(d_ + i_, &x, sizeof x);                                                 \
        }                                                                                  \
        if (i_ < count) {                                                                  \
            V x = {0}, y = {0};                                                            \
            size_t r_ = (count - i_) * sizeof(T);                                          \
            memcpy(&x, a_ + i_, r_);                                                       \
            memcpy(&y, b_ + i_, r_);                                                       \
            STEP(x, y);                                                                    \
            memcpy(d_ + i_, &x, r_);                                                       \
        }                                                                                  \
    } while (0)

#define KV_ADD(x, y) (x) = (x) + (y)
#define KV_MUL(x, y) (x) = (x) * (y)
#define KV_SEL(x, y, M)                                                                    \
    do {                                                                                   \
        VI m_ = (VI)(M);                                                                   \
        (x) = (V)(((VI)(x) & m_) | ((VI)(y) & ~m_));                                       \
    } while (0)
#define KV_IMIN(x, y) KV_SEL(x, y, (x) < (y))
#define KV_IMAX(x, y) KV_SEL(x, y, (x) > (y))
#define KV_FMIN(x, y) KV_SEL(x, y, ((x) < (y)) | ((x) != (x)))
#define KV_FMAX(x, y) KV_SEL(x, y, ((x) > (y)) | ((x) != (x)))

/* T: the dtype, U: its unsigned twin (sums and products wrap), I: signed ints of T's width. */
#define KOPS(T, U, I, S_MIN, S_MAX)                                                        \
    do {                                                                                   \
        switch (op) {                                                                      \
        case SHOAL_SUM:                                                                    \
        case SHOAL_AVG: KLOOP(U, I, KV_ADD); break;                                        \
        case SHOAL_PROD: KLOOP(U, I, KV_MUL); break;                                       \
        case SHOAL_MIN: KLOOP(T, I, S_MIN); break;                                         \
        case SHOAL_MAX: KLOOP(T, I, S_MAX); break;                                         \
        default: break;                                                                    \
        }                                                                                  \
    } while (0)

/* 16-bit floats: blocks of KF16_W widened to float32 vectors (V), reduced, rounded back.
 * LOAD(x, h) sets V x from KF16_W halves at h; STORE(h, x) writes them back rounded. */
#define KHALF_BLOCK(HA, HB, HD, LOAD, STORE)                                               \
    do {                                                                                   \
        V x, y;                                                                            \
        LOAD(x, (HA));                                                                     \
        LOAD(y, (HB));                                                                     \
        switch (op) {                                                                      \
        case SHOAL_PROD: KV_MUL(x, y); break;                                              \
        case SHOAL_MIN: KV_FMIN(x, y); break;                                              \
        case SHOAL_MAX: KV_FMAX(x, y); break;                                              \
        default: KV_ADD(x, y); break;                                                      \
        }                                                                                  \
        STORE((HD), x);                                                                    \
    } while (0)

#define KHALF(LOAD, STORE)                                                                 \
    do {                                                                                   \
        uint16_t *d_ = (uint16_t *)dst;                                                    \
        const uint16_t *a_ = (const uint16_t *)a, *b_ = (const uint16_t *)b;               \
        size_t i_ = 0;                                                                     \
        for (; i_ + KF16_W <= count; i_ += KF16_W)                                         \
            KHALF_BLOCK(a_ + i_, b_ + i_, d_ + i_, LOAD, STORE);                           \
        if (i_ < count) {                                                                  \
            uint16_t ha_[KF16_W] = {0}, hb_[KF16_W] = {0};                                 \
            size_t r_ = (count - i_) * 2;                                                  \
            memcpy(ha_, a_ + i_, r_);                                                      \
            memcpy(hb_, b_ + i_, r_);                                                      \
            KHALF_BLOCK(ha_, hb_, ha_, LOAD, STORE);                                       \
            memcpy(d_ + i_, ha_, r_);                                                      \
        }                                                                                  \
    } while (0)

/* bfloat16 <-> float32 with vector integer operations (every set that does not define its
 * own): widen is a shift; narrowing rounds to nearest even by adding 0x7fff + the kept
 * lowest bit; NaN is kept quiet (0x40) instead of rounded. */
#ifndef KBF16_LOAD
#define KBF16_LOAD(x, h)                                                                   \
    do {                                                                                   \
        VH h_;                                                                             \
        memcpy(&h_, (h), sizeof h_);                                                       \
        VU u_ = __builtin_convertvector(h_, VU) << 16;                                     \
        (x) = (V)u_;                                                                       \
    } while (0)
#define KBF16_STORE(h, x)                                                                  \
    do {                                                                                   \
        VU u_ = (VU)(x);                                                                   \
        VU rr_ = (u_ + 0x7fffu + ((u_ >> 16) & 1u)) >> 16;                                  \
        VI nan_ = (VI)((u_ & 0x7fffffffu) > 0x7f800000u);                                  \
        rr_ = (VU)(((VI)((u_ >> 16) | 0x40u) & nan_) | ((VI)rr_ & ~nan_));                 \
        VH o_ = __builtin_convertvector(rr_, VH);                                           \
        memcpy((h), &o_, sizeof o_);                                                       \
    } while (0)
#endif

KATTR static void KN(reduce3)(void *dst, const void *a, const void *b, size_t count,
                              shoal_dtype dt, shoal_op op)
{
    switch (dt) {
    case SHOAL_INT8: KOPS(int8_t, uint8_t, int8_t, KV_IMIN, KV_IMAX); break;
    case SHOAL_UINT8: KOPS(uint8_t, uint8_t, int8_t, KV_IMIN, KV_IMAX); break;
    case SHOAL_INT32: KOPS(int32_t, uint32_t, int32_t, KV_IMIN, KV_IMAX); break;
    case SHOAL_INT64: KOPS(int64_t, uint64_t, int64_t, KV_IMIN, KV_IMAX); break;
    case SHOAL_FLOAT32: KOPS(float, float, int32_t, KV_FMIN, KV_FMAX); break;
    case SHOAL_FLOAT64: KOPS(double, double, int64_t, KV_FMIN, KV_FMAX); break;
    case SHOAL_FLOAT16:
    case SHOAL_BFLOAT16: {
        typedef float V __attribute__((vector_size(KF16_W * 4)));
        typedef int32_t VI __attribute__((vector_size(KF16_W * 4)));
        typedef uint32_t VU __attribute__((vector_size(KF16_W * 4)));
        typedef uint16_t VH __attribute__((vector_size(KF16_W * 2)));
        enum { VU_NBYTES_ = sizeof(VU), VH_NBYTES_ = sizeof(VH) }; /* used by KBF16_* */
        if (dt == SHOAL_FLOAT16)
            KHALF(KF16_LOAD, KF16_STORE);
        else
            KHALF(KBF16_LOAD, KBF16_STORE);
        break;
    }
    default: break;
    }
}

/* x /= divisor for the float dtypes (avg's final step); the same IEEE division as the
 * scalar code, so every set gives the same bits. Integers stay in reduce.c. */
#define KDIVLOOP(T, DIV)                                                                   \
    do {                                                                                   \
        typedef T V __attribute__((vector_size(128)));                                     \
        enum { L = 128 / sizeof(T) };                                                      \
        T *d_ = (T *)dst;                                                                  \
        size_t i_ = 0;                                                                     \
        for (; i_ + L <= count; i_ += L) {                                                 \
            V x;                                                                           \
            memcpy(&x, d_ + i_, sizeof x);                                                 \
            x = x / (DIV);                                                                 \
            memcpy(d_ + i_, &x, sizeof x);                                                 \
        }                                                                                  \
        if (i_ < count) {                                                                  \
            V x = {0};                                                                     \
            size_t r_ = (count - i_) * sizeof(T);                                          \
            memcpy(&x, d_ + i_, r_);                                                       \
            x = x / (DIV);                                                                 \
            memcpy(d_ + i_, &x, r_);                                                       \
        }                                                                                  \
    } while (0)

#define KHALF_DIV(LOAD, STORE)                                                             \
    do {                                                                                   \
        uint16_t *d_ = (uint16_t *)dst;                                                    \
        float dv_ = (float)divisor;                                                        \
        size_t i_ = 0;                                                                     \
        for (; i_ + KF16_W <= count; i_ += KF16_W) {                                       \
            V x;                                                                           \
            LOAD(x, d_ + i_);                                                              \
            x = x / dv_;                                                                   \
            STORE(d_ + i_, x);                                                             \
        }                                                                                  \
        if (i_ < count) {                                                                  \
            uint16_t ht_[KF16_W] = {0};                                                    \
            size_t r_ = (count - i_) * 2;                                                  \
            memcpy(ht_, d_ + i_, r_);                                                      \
            V x;                                                                           \
            LOAD(x, ht_);                                                                  \
            x = x / dv_;                                                                   \
            STORE(ht_, x);                                                                 \
            memcpy(d_ + i_, ht_, r_);                                                      \
        }                                                                                  \
    } while (0)

KATTR static void KN(avg_finish)(void *dst, size_t count, shoal_dtype dt, int divisor)
{
    switch (dt) {
    case SHOAL_FLOAT32: KDIVLOOP(float, (float)divisor); break;
    case SHOAL_FLOAT64: KDIVLOOP(double, (double)divisor); break;
    case SHOAL_FLOAT16:
    case SHOAL_BFLOAT16: {
        typedef float V __attribute__((vector_size(KF16_W * 4)));
        typedef int32_t VI __attribute__((vector_size(KF16_W * 4)));
        typedef uint32_t VU __attribute__((vector_size(KF16_W * 4)));
        typedef uint16_t VH __attribute__((vector_size(KF16_W * 2)));
        enum { VI_NBYTES_ = sizeof(VI), VU_NBYTES_ = sizeof(VU), VH_NBYTES_ = sizeof(VH) };
        if (dt == SHOAL_FLOAT16)
            KHALF_DIV(KF16_LOAD, KF16_STORE);
        else
            KHALF_DIV(KBF16_LOAD, KBF16_STORE);
        break;
    }
    default: break;
    }
}

#undef KDIVLOOP
#undef KHALF_DIV
#undef KLOOP
#undef KOPS
#undef KHALF
#undef KHALF_BLOCK
#undef KBF16_LOAD
#undef KBF16_STORE
#undef KV_ADD
#undef KV_MUL
#undef KV_SEL
#undef KV_IMIN
#undef KV_IMAX
#undef KV_FMIN
#undef KV_FMAX
#undef KN
#undef KCAT
#undef KCAT2
