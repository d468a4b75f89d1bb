/* A PARSEC-hooks-format test program for labkit's `parsec` workload: NOT a PARSEC benchmark.
 *
 * Like a PARSEC 3.0 program built with the hooks (parsecmgmt -c gcc-hooks), it prints the
 * hooks library's lines (pkgs/libs/hooks/src/hooks.c: "[HOOKS] PARSEC Hooks Version 1.2",
 * "[HOOKS] Entering ROI", "[HOOKS] Leaving ROI", "[HOOKS] Total time spent in ROI: %.3fs",
 * "[HOOKS] Terminating") around a parallel region of interest, and, like swaptions, its
 * thread count ("Number of threads: %d"). Arguments as swaptions': -ns tasks, -sm steps,
 * -nt threads.
 *
 * Kernel: task k integrates (k+1) * 4/(1+x^2) over [0,1] with the midpoint rule in `steps`
 * steps, tasks dealt round robin over `threads` pthreads; each result must be (k+1)*pi within
 * 1e-9 relative (the midpoint rule's error here is below 1/(6 steps^2)). A failed check exits 1
 * before the hooks' end lines. Flag -f makes task 0's result wrong.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static int ntasks = 16, nthreads = 1, fail = 0;
static long steps = 2000000;
static double *result;

static double now(void) {
    struct timeval t;
    gettimeofday(&t, NULL);
    return (double)t.tv_sec + (double)t.tv_usec * 1e-6;
}

static void *worker(void *arg) {
    long me = (long)arg;
    double h = 1.0 / (double)steps;
    for (int k = (int)me; k < ntasks; k += nthreads) {
        double s = 0.0;
        for (long i = 0; i < steps; i++) {
            double x = (i + 0.5) * h;
            s += 4.0 / (1.0 + x * x);
        }
        result[k] = (k + 1) * s * h;
    }
    return NULL;
}

int main(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-ns") && a + 1 < argc) ntasks = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-sm") && a + 1 < argc) steps = atol(argv[++a]);
        else if (!strcmp(argv[a], "-nt") && a + 1 < argc) nthreads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-f")) fail = 1;
        else { fprintf(stderr, "usage: %s [-ns tasks] [-sm steps] [-nt threads] [-f]\n", argv[0]); return 2; }
    }
    if (ntasks < 1 || steps < 100 || nthreads < 1 || nthreads > 1024) {
        fprintf(stderr, "Error: need tasks >= 1, steps >= 100, 1 <= threads <= 1024\n");
        return 2;
    }
    printf("labkit PARSEC-hooks-format test program (tests/support/parsec_like.c), not PARSEC\n");
    printf("[HOOKS] PARSEC Hooks Version 1.2\n");
    printf("Number of tasks: %d,  Number of threads: %d Number of steps: %ld\n", ntasks, nthreads, steps);
    fflush(NULL);
    result = calloc((size_t)ntasks, sizeof *result);
    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    if (!result || !tid) return 3;
    printf("[HOOKS] Entering ROI\n");
    fflush(NULL);
    double begin = now();
    for (long t = 0; t < nthreads; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)t)) { perror("pthread_create"); return 3; }
    for (int t = 0; t < nthreads; t++) pthread_join(tid[t], NULL);
    double end = now();
    printf("[HOOKS] Leaving ROI\n");
    fflush(NULL);
    if (fail) result[0] += 1e-3;
    for (int k = 0; k < ntasks; k++) {
        double want = (k + 1) * M_PI;
        printf("Task %d: [Value: %.10f Expected: %.10f]\n", k, result[k], want);
        if (fabs(result[k] - want) > 1e-9 * want) {
            fprintf(stderr, "Verification failed: task %d gave %.12f, expected %.12f\n", k, result[k], want);
            return 1;
        }
    }
    fflush(NULL);
    printf("[HOOKS] Total time spent in ROI: %.3fs\n", end - begin);
    printf("[HOOKS] Terminating\n");
    free(result);
    free(tid);
    return 0;
}
