/* An NPB-format test program for labkit's `npb` workload: NOT a NAS Parallel Benchmark.
 *
 * Kernel "ZS": the partial sum S(N) = sum_{i=1..N} 1/i^2, computed NITER times, the terms
 * dealt round robin over the MPI ranks (or OpenMP threads), each share summed with Kahan
 * compensation and combined with MPI_Allreduce (an OpenMP reduction). Verification compares
 * S(N) with pi^2/6 - T(N), T(N) = 1/N - 1/(2N^2) + 1/(6N^3) - 1/(30N^5) (the Euler-Maclaurin
 * tail of zeta(2), error below 1/N^7), relative tolerance 1e-12.
 *
 * It prints its report in the format of NPB 3.4's print_results (Fortran formats
 * "(' Class           = ', 12x, a12)" etc.): the MPI edition's "Total processes",
 * "Active processes", "Mop/s/process", or, built with -DNPB_LIKE_OMP -fopenmp, the OpenMP
 * edition's "Total threads", "Avail threads", "Mop/s/thread". Like NPB, the class is compiled
 * in (-DCLASS=S|W|A; the binary is installed as bin/zs.<class>.x) and a failed verification
 * prints UNSUCCESSFUL and still exits 0.
 *
 * Flag: -f (--fail-verification) adds 1e-6 to rank 0's share, so verification fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#ifdef NPB_LIKE_OMP
#include <omp.h>
#else
#include <mpi.h>
#endif

#ifndef CLASS
#define CLASS 'S'
#endif
#define NITER 4

static double now(void) {
    struct timeval t;
    gettimeofday(&t, NULL);
    return t.tv_sec + t.tv_usec * 1e-6;
}

/* Kahan sum of 1/i^2 for i = first, first+stride, ... <= n */
static double share(long first, long stride, long n) {
    double s = 0.0, c = 0.0;
    for (long i = first; i <= n; i += stride) {
        double y = 1.0 / ((double)i * (double)i) - c;
        double t = s + y;
        c = (t - s) - y;
        s = t;
    }
    return s;
}

static void compile_date(char *out, size_t size) {
    /* __DATE__ is "Mmm dd yyyy"; NPB prints "dd Mmm yyyy" */
    const char *d = __DATE__;
    snprintf(out, size, "%.2s %.3s %.4s", d + 4, d, d + 7);
    if (out[0] == ' ') out[0] = '0';
}

int main(int argc, char **argv) {
    int fail = 0, nprocs = 1, rank = 0, avail = 1;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-f") || !strcmp(argv[a], "--fail-verification")) fail = 1;
        else { fprintf(stderr, "usage: %s [-f|--fail-verification]\n", argv[0]); return 2; }
    }
    long n = CLASS == 'A' ? 1L << 28 : CLASS == 'W' ? 1L << 26 : 1L << 24;
#ifdef NPB_LIKE_OMP
    avail = omp_get_max_threads();
#pragma omp parallel
#pragma omp master
    nprocs = omp_get_num_threads();
#else
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#endif
    if (rank == 0) {
        printf("\n\n labkit NPB-format test program (not NPB) -- ZS Benchmark\n\n");
        printf(" Number of terms:            %12ld\n", n);
#ifdef NPB_LIKE_OMP
        printf(" Number of available threads:%12d\n", avail);
#else
        printf(" Number of active processes: %12d\n", nprocs);
#endif
    }
    double sum = 0.0, t0, t;
#ifndef NPB_LIKE_OMP
    MPI_Barrier(MPI_COMM_WORLD);
#endif
    t0 = now();
    for (int it = 0; it < NITER; it++) {
#ifdef NPB_LIKE_OMP
        double total = 0.0;
#pragma omp parallel reduction(+ : total)
        {
            int me = omp_get_thread_num();
            total += share(1 + me, omp_get_num_threads(), n) + (fail && me == 0 ? 1e-6 : 0.0);
        }
        sum = total;
#else
        double mine = share(1 + rank, nprocs, n) + (fail && rank == 0 ? 1e-6 : 0.0);
        MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
    }
    t = now() - t0;
#ifndef NPB_LIKE_OMP
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
    double dn = (double)n;
    double expect = M_PI * M_PI / 6.0 - (1.0 / dn - 1.0 / (2 * dn * dn) + 1.0 / (6 * dn * dn * dn)
                                         - 1.0 / (30 * dn * dn * dn * dn * dn));
    double err = fabs(sum - expect) / expect;
    int verified = err <= 1e-12;
    if (rank == 0) {
        double mops = t > 0 ? (double)n * NITER / t / 1e6 : 0.0;
        char date[16];
        compile_date(date, sizeof date);
        printf(" Sum  = %25.16e\n Expected = %21.16e\n Relative error = %14.6e\n", sum, expect, err);
        printf(verified ? " Verification Successful\n" : " Verification failed\n");
        printf("\n\n ZS Benchmark Completed.\n");
        printf(" Class           =             %12c\n", CLASS);
        printf(" Size            =             %12ld\n", n);
        printf(" Iterations      =             %12d\n", NITER);
        printf(" Time in seconds =             %12.2f\n", t);
#ifdef NPB_LIKE_OMP
        printf(" Total threads   =             %12d\n", nprocs);
        printf(" Avail threads   =             %12d\n", avail);
        printf(" Mop/s total     =             %12.2f\n", mops);
        printf(" Mop/s/thread    =             %12.2f\n", mops / nprocs);
#else
        printf(" Total processes =             %12d\n", nprocs);
        printf(" Active processes=             %12d\n", nprocs);
        printf(" Mop/s total     =             %12.2f\n", mops);
        printf(" Mop/s/process   =             %12.2f\n", mops / nprocs);
#endif
        printf(" Operation type  = %24s\n", "floating point");
        printf(" Verification    =             %s\n", verified ? "  SUCCESSFUL" : "UNSUCCESSFUL");
        printf(" Version         =             %12s\n", "labkit-test");
        printf(" Compile date    =             %12s\n", date);
        printf("\n Compile options:\n");
#ifdef NPB_LIKE_OMP
        printf("    CC           = gcc\n    CFLAGS       = -O2 -fopenmp\n");
#else
        printf("    MPICC        = mpicc\n    CFLAGS       = -O2\n");
#endif
        printf("\n\n labkit's tests/support/npb_like.c: NPB's report format, not NPB.\n\n\n");
    }
#ifndef NPB_LIKE_OMP
    MPI_Finalize();
#endif
    return 0;
}
