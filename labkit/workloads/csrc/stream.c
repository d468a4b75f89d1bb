/*
 * labkit stream: memory bandwidth in the manner of McCalpin's STREAM.
 *
 * Four kernels over double arrays a, b, c of N elements each:
 *   Copy  c = a            (16 bytes moved per element)
 *   Scale b = s*c          (16 bytes)
 *   Add   c = a + b        (24 bytes)
 *   Triad a = b + s*c      (24 bytes)
 * Each kernel runs NTIMES; the first pass is discarded as warm-up and the best
 * rate over the rest is reported in MB/s (1 MB = 10^6 bytes), as STREAM does.
 * Work is split between T POSIX threads; each thread first-touches its own
 * slice so pages land on its NUMA node. The output mimics STREAM's table so
 * the same parser reads labkit's kernel and the reference stream.c.
 *
 * With mergeable = 1 the three arrays are mapped page-aligned (mmap) and marked
 * madvise(MADV_MERGEABLE) before they are first touched, so that kernel same-page
 * merging (KSM) may scan and merge them: without it no page of a native process is
 * ever merged, whatever /sys/kernel/mm/ksm/run says. The output says whether the
 * mark was accepted ("Mergeable memory: ..."); a refused mark (a kernel without KSM)
 * is printed, not fatal: the run's KSM check then finds no merged page.
 *
 * KSM merges a page only once it has stayed unchanged between two of ksmd's scans, and the
 * timed passes rewrite every page: without a pause no page is merged before the kernels run.
 * With settle_ms > 0 (and mergeable = 1) the program waits after initializing the arrays, before
 * the first timed pass, until KSM has merged at least half of the arrays' pages for this process
 * (/proc/self/ksm_merging_pages, Linux >= 6.1) or settle_ms have passed, and prints
 * "KSM settle: <pages> pages merged of <total> after <s> s" (the wait is outside every timed
 * pass). The timed passes then run on merged pages: what KSM costs a process that writes them.
 *
 * usage: stream <elements per array> [ntimes (>=2, default 10)] [threads (default 1)]
 *               [mergeable (0 or 1, default 0)] [settle_ms (>= 0, default 0)]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double *a, *b, *c;
static long n;
static int nthreads;
static int op;              /* kernel the workers run next; -1 = init, 4 = exit */
static const double scalar = 3.0;
static pthread_barrier_t start_bar, end_bar;

/* n doubles, page-aligned and marked MADV_MERGEABLE (before first touch); NULL when the
 * mapping fails. *why gets 0 when the mark was accepted, else the errno of madvise. */
static double *alloc_mergeable(long count, int *why) {
    size_t bytes = sizeof(double) * (size_t)count;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_MERGEABLE
    *why = madvise(p, bytes, MADV_MERGEABLE) == 0 ? 0 : errno;
#else
    *why = ENOSYS;
#endif
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
    long id = (long)arg;
    long chunk = (n + nthreads - 1) / nthreads;
    long lo = id * chunk, hi = lo + chunk > n ? n : lo + chunk;
    for (;;) {
        pthread_barrier_wait(&start_bar);
        int k = op;
        if (k == 4) break;
        long j;
        switch (k) {
        case -1: for (j = lo; j < hi; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; } break;
        case 0:  for (j = lo; j < hi; j++) c[j] = a[j]; break;
        case 1:  for (j = lo; j < hi; j++) b[j] = scalar * c[j]; break;
        case 2:  for (j = lo; j < hi; j++) c[j] = a[j] + b[j]; break;
        case 3:  for (j = lo; j < hi; j++) a[j] = b[j] + scalar * c[j]; break;
        }
        pthread_barrier_wait(&end_bar);
    }
    return NULL;
}

static double run_op(int k) {
    op = k;
    double t0 = now();
    pthread_barrier_wait(&start_bar);
    pthread_barrier_wait(&end_bar);
    return now() - t0;
}

/* pages KSM has merged for this process (/proc/self/ksm_merging_pages); -1 when unreadable */
static long ksm_merging_pages(void) {
    FILE *f = fopen("/proc/self/ksm_merging_pages", "r");
    long v = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <elements per array> [ntimes>=2] [threads>=1] [mergeable 0|1] [settle_ms>=0]\n",
                argv[0]);
        return 2;
    }
    n = atol(argv[1]);
    int ntimes = argc > 2 ? atoi(argv[2]) : 10;
    nthreads = argc > 3 ? atoi(argv[3]) : 1;
    int mergeable = argc > 4 ? atoi(argv[4]) : 0;
    long settle_ms = argc > 5 ? atol(argv[5]) : 0;
    if (n < 1000 || ntimes < 2 || nthreads < 1 || nthreads > 1024 || (mergeable != 0 && mergeable != 1)
            || settle_ms < 0 || settle_ms > 3600000L) {
        fprintf(stderr, "stream: bad arguments (elements >= 1000, ntimes >= 2, 1 <= threads <= 1024, "
                        "mergeable 0 or 1, 0 <= settle_ms <= 3600000)\n");
        return 2;
    }
    int why[3] = {0, 0, 0};
    if (mergeable) {
        a = alloc_mergeable(n, &why[0]);
        b = alloc_mergeable(n, &why[1]);
        c = alloc_mergeable(n, &why[2]);
    } else {
        a = malloc(sizeof(double) * n);
        b = malloc(sizeof(double) * n);
        c = malloc(sizeof(double) * n);
    }
    if (!a || !b || !c) {
        fprintf(stderr, "stream: cannot allocate 3 x %ld doubles\n", n);
        return 3;
    }
    printf("-------------------------------------------------------------\n");
    printf("labkit STREAM-like kernel (pthreads)\n");
    printf("Array size = %ld (elements), Offset = 0 (elements)\n", n);
    printf("Memory per array = %.1f MiB (= %.1f GiB).\n",
           sizeof(double) * n / 1048576.0, sizeof(double) * n / 1073741824.0);
    printf("Total memory required = %.1f MiB (= %.1f GiB).\n",
           3.0 * sizeof(double) * n / 1048576.0, 3.0 * sizeof(double) * n / 1073741824.0);
    printf("Each kernel will be executed %d times.\n", ntimes);
    printf("Number of Threads requested = %d\n", nthreads);
    if (!mergeable)
        printf("Mergeable memory: no\n");
    else if (!why[0] && !why[1] && !why[2])
        printf("Mergeable memory: yes (madvise MADV_MERGEABLE on the 3 arrays)\n");
    else
        printf("Mergeable memory: refused (madvise MADV_MERGEABLE: %s)\n",
               strerror(why[0] ? why[0] : why[1] ? why[1] : why[2]));

    pthread_barrier_init(&start_bar, NULL, nthreads + 1);
    pthread_barrier_init(&end_bar, NULL, nthreads + 1);
    pthread_t *tids = calloc(nthreads, sizeof(pthread_t));
    for (long i = 0; i < nthreads; i++) {
        if (pthread_create(&tids[i], NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "stream: pthread_create failed\n");
            return 3;
        }
    }
    run_op(-1);

    if (mergeable && settle_ms > 0) {
        long total = 3 * (long)((sizeof(double) * n + 4095) / 4096), merged = ksm_merging_pages();
        double t0 = now(), waited = 0;
        while (merged >= 0 && merged < total / 2 && waited * 1000 < settle_ms) {
            struct timespec pause = {0, 50 * 1000 * 1000};
            nanosleep(&pause, NULL);
            merged = ksm_merging_pages();
            waited = now() - t0;
        }
        if (merged < 0)
            printf("KSM settle: not readable (/proc/self/ksm_merging_pages)\n");
        else
            printf("KSM settle: %ld pages merged of %ld after %.2f s\n", merged, total, waited);
    }

    static const char *label[4] = {"Copy:      ", "Scale:     ", "Add:       ", "Triad:     "};
    double bytes[4] = {2.0 * sizeof(double) * n, 2.0 * sizeof(double) * n,
                       3.0 * sizeof(double) * n, 3.0 * sizeof(double) * n};
    double mint[4] = {1e30, 1e30, 1e30, 1e30}, maxt[4] = {0}, avgt[4] = {0};
    for (int t = 0; t < ntimes; t++) {
        for (int k = 0; k < 4; k++) {
            double dt = run_op(k);
            if (t == 0) continue; /* warm-up pass, as STREAM */
            avgt[k] += dt;
            if (dt < mint[k]) mint[k] = dt;
            if (dt > maxt[k]) maxt[k] = dt;
        }
    }
    op = 4;
    pthread_barrier_wait(&start_bar);
    for (int i = 0; i < nthreads; i++) pthread_join(tids[i], NULL);

    printf("-------------------------------------------------------------\n");
    printf("Function    Best Rate MB/s  Avg time     Min time     Max time\n");
    for (int k = 0; k < 4; k++) {
        printf("%s%12.1f  %11.6f  %11.6f  %11.6f\n", label[k],
               1.0e-6 * bytes[k] / mint[k], avgt[k] / (ntimes - 1), mint[k], maxt[k]);
    }
    printf("-------------------------------------------------------------\n");

    /* validate as STREAM does: replay the scalar recurrence */
    double aj = 1.0, bj = 2.0, cj = 0.0;
    for (int t = 0; t < ntimes; t++) {
        cj = aj; bj = scalar * cj; cj = aj + bj; aj = bj + scalar * cj;
    }
    double ea = 0, eb = 0, ec = 0;
    for (long j = 0; j < n; j++) {
        ea += fabs(a[j] - aj); eb += fabs(b[j] - bj); ec += fabs(c[j] - cj);
    }
    ea /= n; eb /= n; ec /= n;
    double eps = 1.0e-13;
    if (ea / fabs(aj) > eps || eb / fabs(bj) > eps || ec / fabs(cj) > eps) {
        printf("Failed Validation: avg relative errors a=%e b=%e c=%e\n",
               ea / fabs(aj), eb / fabs(bj), ec / fabs(cj));
        return 4;
    }
    printf("Solution Validates: avg error less than %e on all three arrays\n", eps);
    printf("-------------------------------------------------------------\n");
    return 0;
}
